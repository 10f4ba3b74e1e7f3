"""Job specs of the tests that run tasks in containers (emulated agents or a real one): a job
whose tasks run tests/e2e_task.py from the repository, mounted read-only at /task, and write
their records to a host folder mounted at /out; specs/'s MWMS training in the TensorFlow
image; the config's policy line letting volumes mount host folders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.conftest import REPO

TASK = "/task/e2e_task.py"  # tests/e2e_task.py, as the tasks see it

# A ps that serves until stopped and two workers that end after 3 s (the replicas' lines).
PS_AND_TWO_WORKERS = (
    f"ps: {{count: 1, resources: {{cpus: 0.5, mem: 64}}, command: [python3, {TASK}, serve]}}",
    f"worker: {{count: 2, resources: {{cpus: 0.5, mem: 64}}, command: [python3, {TASK}, wait=3]}}",
)


def allowed_host_paths(*folders: Path) -> str:
    """The config's policy line letting volumes mount these folders (none by default)."""
    return f"policy: {{allowedHostPaths: [{', '.join(str(f) for f in folders)}]}}\n"


def boxed_job(name: str, image: str, out: Path, replicas: Sequence[str], extra: str = "") -> str:
    """A job of ``image`` with the repository's tests/ at /task and ``out`` at /out (``OUT``),
    working directory ``scratch`` (relative: under the sandbox), ``replicas`` its lines under
    ``replicas:`` and ``extra`` lines of ``spec`` after them."""
    return "\n".join(
        [
            "apiVersion: tfdeclare/v1",
            "kind: TFJob",
            f"metadata: {{name: {name}}}",
            "spec:",
            f"  image: {image}",
            "  env: {OUT: /out}",
            "  workingDir: scratch",
            "  volumes:",
            f"    - {{hostPath: {REPO / 'tests'}, containerPath: /task, mode: ro}}",
            f"    - {{hostPath: {out}, containerPath: /out, mode: rw}}",
            "  replicas:",
            *(f"    {line}" for line in replicas),
            extra,
        ]
    )


def mwms_job(image: str, *env: str) -> str:
    """Job ``mwms``: specs/mwms_train.py (mounted at /job) as two workers in ``image``, with
    the ``env`` entries (``NAME: value``), no retry."""
    return "\n".join(
        [
            "apiVersion: tfdeclare/v1",
            "kind: TFJob",
            "metadata: {name: mwms}",
            "spec:",
            f"  image: {image}",
            "  command: [python, /job/mwms_train.py]",
            *([f"  env: {{{', '.join(env)}}}"] if env else []),
            f"  volumes: [{{hostPath: {REPO / 'specs'}, containerPath: /job, mode: ro}}]",
            "  replicas:",
            "    worker: {count: 2, resources: {cpus: 1, mem: 2Gi}}",
            "  backoffLimit: 0",
            "",
        ]
    )
