"""Suspend and resume through git commits, with the daemon (issue 34): a real daemon in git
mode on a ``file://`` repository; a commit setting ``spec.suspend: true`` stops the job's tasks
gracefully (each gets SIGTERM and records it) and the job goes ``Suspended`` with reason
``Suspended``, counted apart from restarts; a commit setting it back to ``false`` runs the job
again, on the same ports. The status records each commit applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_daemon import Daemon, alive, commit, cwd, pids, repo, status, wait_until

pytestmark = pytest.mark.e2e

__all__ = ["cwd", "repo"]  # the fixtures of test_daemon

TASK = str(REPO / "tests" / "e2e_task.py")


def spec(outputs: Path, *, suspend: bool | None = None) -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: bert}\nspec:\n"
        f"  command: [python, {TASK}, term]\n"
        f"  env: {{OUT: '{outputs}'}}\n"
        "  terminationGracePeriodSeconds: 5\n"
        + ("" if suspend is None else f"  suspend: {str(suspend).lower()}\n")
        + "  replicas: {worker: {count: 2, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def records(outputs: Path) -> dict[str, dict[str, object]]:
    return {p.stem: json.loads(p.read_text()) for p in outputs.glob("*.json")}


def terms(outputs: Path) -> set[str]:
    return {p.stem for p in outputs.glob("*.term")}


def test_a_commit_suspends_a_job_and_another_resumes_it(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    outputs = cwd / "bert-out"
    outputs.mkdir()
    first = commit(work, "add bert", {"bert.yaml": spec(outputs)})
    daemon = Daemon(
        cwd, "--git", f"file://{remote}", "--branch", "main", "--path", "jobs", "--interval", "0.5"
    )
    try:
        wait_until(
            lambda: len(records(outputs)) == 2 and (status(cwd, "bert") or {}).get("phase") == "Running"
        )
        assert status(cwd, "bert")["revision"] == first  # type: ignore[index]
        running = pids(outputs)

        suspended = commit(work, "suspend bert", {"bert.yaml": spec(outputs, suspend=True)})
        wait_until(lambda: (status(cwd, "bert") or {}).get("revision") == suspended)
        wait_until(lambda: status(cwd, "bert")["phase"] == "Suspended" and not any(map(alive, running)))  # type: ignore[index]
        assert terms(outputs) == {"worker-0.0", "worker-1.0"}, "each task got SIGTERM, not a kill"
        document = status(cwd, "bert")
        assert document is not None
        assert document["suspension"]["reason"] == "Suspended"
        assert {c["type"]: c["reason"] for c in document["conditions"]}["Suspended"] == "Suspended"
        assert (document["restarts"], document["suspensions"], document["preemptions"]) == (0, 1, 0)
        done = daemon.passes()
        # several passes later: nothing launches a suspended job
        wait_until(lambda: daemon.passes() >= done + 4)
        assert status(cwd, "bert")["phase"] == "Suspended" and len(records(outputs)) == 2  # type: ignore[index]

        resumed = commit(work, "resume bert", {"bert.yaml": spec(outputs, suspend=False)})
        assert daemon.post("/sync") == 202
        wait_until(lambda: (status(cwd, "bert") or {}).get("revision") == resumed)
        wait_until(lambda: len(records(outputs)) == 4 and status(cwd, "bert")["phase"] == "Running")  # type: ignore[index]
        again = records(outputs)
        for index in (0, 1):
            before, after = again[f"worker-{index}.0"], again[f"worker-{index}.1"]
            assert before["tfConfig"] == after["tfConfig"], "the resumed job runs on the same ports"
        document = status(cwd, "bert")
        assert document is not None
        assert document["restarts"] == 0 and document["suspension"] is None
        assert [h["reason"] for h in document["suspensionHistory"]] == ["Suspended"]
        assert document["suspensionHistory"][0]["resumeTime"]
    finally:
        daemon.stop()
