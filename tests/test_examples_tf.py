"""The example jobs in specs/: their spec files, and real TensorFlow runs of each of them.

The runs go through tests/tf_runner.py, a stand-in for tfdeclare's local backend, so they test
the examples (and what tfdeclare relies on from TensorFlow), not tfdeclare itself.
"""

from __future__ import annotations

import importlib.util
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.tf_runner import JobResult, TaskResult, load_specs, run_job

SPECS = Path(__file__).resolve().parent.parent / "specs"
EXAMPLES = ("mnist-mwms.yaml", "pss.yaml", "legacy-flags.yaml")

# The contract's job spec fields (§4), as far as examples may use them.
TOP_FIELDS = {"apiVersion", "kind", "metadata", "spec"}
SPEC_FIELDS = {
    "image",
    "command",
    "env",
    "workingDir",
    "replicas",
    "restartPolicy",
    "backoffLimit",
    "activeDeadlineSeconds",
    "clusterSpec",
    "placement",
    "volumes",
}
REPLICA_FIELDS = {"count", "resources", "env", "command"}
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

needs_tf = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed in this environment"
)


def load(file: str) -> dict[str, Any]:
    (spec,) = load_specs(SPECS / file)
    return spec


def explain(result: JobResult) -> str:
    """Everything needed to debug a failed run, for the assertion message."""
    parts = [result.summary()]
    for task in result.tasks.values():
        parts.append(f"----- {task.name} (exit {task.exit_code}) -----\n{task.output[-4000:]}")
    return "\n".join(parts)


def run_example(file: str, tmp_path: Path) -> JobResult:
    result = run_job(load(file), SPECS, timeout_s=180, grace_s=10, log_dir=tmp_path)
    assert result.succeeded, explain(result)
    return result


def last_value(task: TaskResult, prefix: str) -> str:
    lines = task.lines_starting(prefix + " ")
    assert lines, f"{task.name} printed no {prefix} line:\n{task.output[-4000:]}"
    return lines[-1].split()[1]


# --- the spec files (fast: no TensorFlow) ---------------------------------------------------


def test_every_example_is_listed() -> None:
    # A new example in specs/ belongs in EXAMPLES, and gets a run test below.
    assert sorted(p.name for p in SPECS.glob("*.yaml")) == sorted(EXAMPLES)


@pytest.mark.parametrize("file", EXAMPLES)
def test_spec_uses_only_contract_fields(file: str) -> None:
    spec = load(file)
    assert set(spec) == TOP_FIELDS
    assert spec["apiVersion"] == "tfdeclare/v1"
    assert spec["kind"] == "TFJob"
    assert NAME_RE.match(spec["metadata"]["name"])
    assert set(spec["spec"]) <= SPEC_FIELDS
    for role, replica in spec["spec"]["replicas"].items():
        assert role in {"chief", "ps", "worker", "evaluator"}
        assert set(replica) <= REPLICA_FIELDS
        assert set(replica["resources"]) <= {"cpus", "mem", "gpus"}


@pytest.mark.parametrize("file", EXAMPLES)
def test_spec_sets_quiet_unbuffered_tf_and_a_script_next_to_it(file: str) -> None:
    body = load(file)["spec"]
    assert body["env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert body["env"]["PYTHONUNBUFFERED"] == "1"
    assert "TF_NUM_INTEROP_THREADS" not in body["env"]  # deadlocks PSS
    command = body["command"]
    assert command[0] == "python"
    assert (SPECS / command[1]).is_file()


def test_all_examples_together_fit_on_two_cores() -> None:
    """`make demo` runs them all at once on a 2-core machine; the runner refuses to overcommit."""
    total = 0.0
    for file in EXAMPLES:
        for replica in load(file)["spec"]["replicas"].values():
            total += replica.get("count", 1) * replica["resources"]["cpus"]
    assert total < 2.0


# --- real runs (slow: each starts 2-4 TensorFlow processes) ----------------------------------


@pytest.mark.tf
@needs_tf
def test_mwms_workers_end_with_identical_weights(tmp_path: Path) -> None:
    result = run_example("mnist-mwms.yaml", tmp_path)
    workers = result.of_role("worker")
    assert len(workers) == 2
    digests = []
    for worker in workers:
        assert worker.exit_code == 0
        assert not worker.stopped_by_runner
        assert last_value(worker, "STEP") == "20"
        assert len(worker.lines_starting("FINAL_WEIGHTS_SHA256 ")) == 1
        digest = last_value(worker, "FINAL_WEIGHTS_SHA256")
        assert re.fullmatch(r"[0-9a-f]{64}", digest)
        digests.append(digest)
    assert digests[0] == digests[1], explain(result)


@pytest.mark.tf
@needs_tf
def test_pss_chief_finishes_and_servers_are_stopped(tmp_path: Path) -> None:
    result = run_example("pss.yaml", tmp_path)
    chief = result.task("chief", 0)
    assert chief.exit_code == 0
    assert last_value(chief, "STEP") == "40"
    assert "DONE steps=40" in chief.output
    servers = result.of_role("ps") + result.of_role("worker")
    assert len(servers) == 3
    for server in servers:
        # They serve until told to stop, and a plain TF server dies at once on SIGTERM.
        assert server.stopped_by_runner
        assert server.exit_code == -signal.SIGTERM, explain(result)


@pytest.mark.tf
@needs_tf
def test_legacy_flags_workers_reach_the_last_step(tmp_path: Path) -> None:
    spec = load("legacy-flags.yaml")
    (last_step_arg,) = [a for a in spec["spec"]["command"] if a.startswith("--last_step=")]
    last_step = int(last_step_arg.split("=", 1)[1])
    result = run_example("legacy-flags.yaml", tmp_path)
    workers = result.of_role("worker")
    assert len(workers) == 2
    for worker in workers:
        assert worker.exit_code == 0
        assert not worker.stopped_by_runner
        assert int(last_value(worker, "FINAL_GLOBAL_STEP")) >= last_step, explain(result)
        assert worker.exited_s is not None
    # Both workers stop at the same global step, so they exit together. A non-chief stalled by
    # SessionManager's 30 s recovery_wait_secs would exit about 30 s after the chief.
    exits = [w.exited_s or 0.0 for w in workers]
    assert abs(exits[0] - exits[1]) < 15, explain(result)
    (ps,) = result.of_role("ps")
    assert ps.stopped_by_runner
    assert ps.exit_code == -signal.SIGTERM
