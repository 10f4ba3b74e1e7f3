"""What a reviewer found Kubeflow manifests lost or misread, each at its class: quantities said
as written and rounded as Kubernetes does, the resume hint naming the Kubeflow field."""

from __future__ import annotations

import textwrap

import pytest

from tfdeclare.core.diagnostics import Severity
from tfdeclare.core.run.lifecycle import RESUME_HINT
from tfdeclare.core.spec.kubequantity import parse_cpu
from tfdeclare.core.spec.loader import FileResult, load_file


def load(text: str) -> FileResult:
    return load_file("tf.yaml", textwrap.dedent(text).encode())


def errors(result: FileResult) -> list[str]:
    return [d.format() for d in result.diagnostics if d.severity is Severity.ERROR]


def warnings(result: FileResult) -> list[str]:
    return [d.format() for d in result.diagnostics if d.severity is Severity.WARNING]


def tfjob(container: str = "", pod: str = "", worker: str = "", spec: str = "") -> str:
    """A Kubeflow TFJob with one Worker; the parts are YAML lines at their own indentation."""
    return (
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n"
        + textwrap.indent(textwrap.dedent(spec), "  ")
        + "  tfReplicaSpecs:\n    Worker:\n"
        + textwrap.indent(textwrap.dedent(worker), "      ")
        + "      template:\n        spec:\n"
        + textwrap.indent(textwrap.dedent(pod), "          ")
        + "          containers:\n            - name: tensorflow\n              command: [python, t.py]\n"
        + "              resources: {requests: {cpu: 1, memory: 1Gi}}\n"
        + textwrap.indent(textwrap.dedent(container), "              ")
    )


# ---- 7: quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "cores"),
    [("999u", 0.001), ("0.0005", 0.001), (0.0005, 0.001), ("1n", 0.001), ("1.0005", 1.001), ("100m", 0.1)],
)
def test_cpu_below_a_millicore_rounds_up_as_kubernetes_does(value: object, cores: float) -> None:
    assert parse_cpu(value) == cores


def test_a_memory_too_large_is_said_as_written() -> None:
    result = load(tfjob().replace("memory: 1Gi", "memory: 2Ei"))
    assert result.jobs == ()
    (error,) = errors(result)
    assert "memory '2Ei' is larger than 1 EiB" in error and error.startswith("tf.yaml:12:"), error
    assert "Gi'" not in error.replace("'2Ei'", "")


def test_the_resume_hint_names_the_kubeflow_field_too() -> None:
    assert "suspend: false" in RESUME_HINT and "runPolicy.suspend" in RESUME_HINT
