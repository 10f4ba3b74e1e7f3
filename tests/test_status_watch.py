"""``status --watch``: the table, then a row when a job's phase changes (a real local task
ending, the status files kept current by ``apply --wait``), until SIGINT (exit 130); with
NAME it ends by itself at the terminal phase (0 Succeeded, 1 Failed); ``-o json`` one document
a line per change."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.conftest import cli
from tests.test_daemon import CONFIG as DAEMON_CONFIG
from tests.test_daemon import Daemon
from tests.test_daemon import job as daemon_job
from tests.test_e2e_local import project, wait_until

__all__ = ["project"]  # the fixture


def _job(name: str, go: Path, code: int) -> str:
    script = f"import pathlib, sys, time\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\nsys.exit({code})"
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: [python, -c, {json.dumps(script)}]\n"
        "  restartPolicy: Never\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def _watch(project: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "status", "--watch", "--watch-interval", "0.2", *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.e2e
def test_watch_prints_a_row_per_change_until_interrupted(project: Path) -> None:
    go = project / "go"
    (project / "specs" / "good.yaml").write_text(_job("good", go, 0))
    (project / "specs" / "bad.yaml").write_text(_job("bad", go, 3))
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stderr

    every = _watch(project)
    as_json = _watch(project, "-o", "json")
    good = _watch(project, "good")
    bad = _watch(project, "bad", "-o", "json")
    assert every.stdout is not None and as_json.stdout is not None
    assert every.stdout.readline().split()[:2] == ["NAME", "PHASE"]
    first = sorted(every.stdout.readline().split()[:2] for _ in range(2))
    assert first == [["bad", "Running"], ["good", "Running"]], first
    started = [json.loads(as_json.stdout.readline()) for _ in range(2)]
    assert {(d["name"], d["phase"]) for d in started} == {("bad", "Running"), ("good", "Running")}

    go.touch()
    waited = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)  # keeps the files current
    assert waited.returncode == 1  # bad failed

    assert good.wait(timeout=30) == 0  # ended by itself: Succeeded
    assert bad.wait(timeout=30) == 1  # Failed
    assert bad.stdout is not None
    documents = [json.loads(line) for line in bad.stdout.read().splitlines()]
    assert documents[0]["phase"] == "Running" and documents[-1]["phase"] == "Failed"
    assert documents[-1]["kind"] == "TFJobStatus"  # with NAME: the whole status document

    rows: list[list[str]] = []
    wait_until(lambda: (rows.extend([every.stdout.readline().split()[:2]]), len(rows) >= 2)[1], timeout=30)
    assert sorted(rows) == [["bad", "Failed"], ["good", "Succeeded"]], rows
    later = [json.loads(as_json.stdout.readline()) for _ in range(2)]
    assert {(d["name"], d["phase"]) for d in later} == {("bad", "Failed"), ("good", "Succeeded")}

    for watcher in (every, as_json):
        assert watcher.poll() is None  # watches on until interrupted
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=10) == 130

    assert cli("delete", "good", cwd=project).returncode == 0
    gone = _watch(project, "-o", "json")
    assert gone.stdout is not None
    assert json.loads(gone.stdout.readline())["name"] == "bad"
    assert cli("delete", "bad", cwd=project).returncode == 0
    assert json.loads(gone.stdout.readline()) == {"name": "bad", "deleted": True}
    gone.send_signal(signal.SIGINT)
    assert gone.wait(timeout=10) == 130
    missing = cli("status", "nosuch", "--watch", cwd=project)
    assert missing.returncode == 1 and "no job named 'nosuch'" in missing.stderr


class _Lines:
    """What a watcher prints, read on a thread as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        assert process.stdout is not None
        stdout = process.stdout
        self.thread = threading.Thread(
            target=lambda: self.lines.extend(iter(stdout.readline, "")), daemon=True
        )
        self.thread.start()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=10)
        self.thread.join(timeout=10)
        return code


BROKEN = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: NAME}\nspec:\n  replicas: {worker: {cout: 1}}\n"
)


@pytest.mark.e2e
def test_watch_says_each_problem_as_it_appears_and_clears(tmp_path: Path) -> None:
    """An invalid file standing when it starts, one committed later, a status folder that
    turns read-only (the status file stale): each a line (a JSON document with -o json) when it
    appears and when it clears. The real daemon in folder mode."""
    project = tmp_path
    (project / "tfdeclare.yaml").write_text(DAEMON_CONFIG)
    (project / "specs" / "a-out").mkdir(parents=True)
    (project / "specs" / "a.yaml").write_text(daemon_job("a"))
    (project / "specs" / "b.yaml").write_text(BROKEN.replace("NAME", "b"))
    folder = project / "status"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(folder)]).returncode:
        missing("cannot mount a tmpfs here (not root)")
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    watchers: list[_Lines] = []
    try:
        wait_until(lambda: (project / "status" / "a.yaml").exists() and daemon.get("/healthz")[1]["problems"])
        text, as_json = _Lines(_watch(project)), _Lines(_watch(project, "-o", "json"))
        watchers = [text, as_json]

        def documents() -> list[dict[str, Any]]:
            return [
                d["problem"] | {"cleared": d["cleared"]}
                for d in map(json.loads, as_json.lines)
                if "problem" in d
            ]

        def said(line: str) -> bool:
            return any(line in each for each in text.lines)

        def told(kind: str, path: str, cleared: bool) -> bool:
            """The JSON watcher has said it too (each watcher looks on its own: the next step
            waits for both, or a short-lived state could fall between one's looks)."""
            return any((d["kind"], d["path"], d["cleared"]) == (kind, path, cleared) for d in documents())

        wait_until(  # standing at the start
            lambda: (
                said("problem invalid-spec: specs/b.yaml:") and told("invalid-spec", "specs/b.yaml", False)
            ),
            timeout=30,
        )
        (project / "specs" / "c.yaml").write_text(BROKEN.replace("NAME", "c"))
        wait_until(
            lambda: (
                said("problem invalid-spec: specs/c.yaml:") and told("invalid-spec", "specs/c.yaml", False)
            ),
            timeout=30,
        )
        (project / "specs" / "b.yaml").unlink()
        wait_until(
            lambda: (
                said("problem cleared (invalid-spec): specs/b.yaml")
                and told("invalid-spec", "specs/b.yaml", True)
            ),
            timeout=30,
        )

        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        try:
            (project / "specs" / "a.yaml").write_text(daemon_job("a", count=2))  # its status must change
            wait_until(
                lambda: (
                    said("problem status-stale: a: status file stale: cannot write")
                    and told("status-stale", str(folder / "a.yaml"), False)
                ),
                timeout=30,
            )
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(folder)], check=True)
        wait_until(lambda: said(f"problem cleared (status-stale): {folder / 'a.yaml'}"), timeout=30)

        wait_until(lambda: len(documents()) >= 5, timeout=30)
        seen = [(d["kind"], d["path"], d["cleared"]) for d in documents()]
        assert seen == [
            ("invalid-spec", "specs/b.yaml", False),
            ("invalid-spec", "specs/c.yaml", False),
            ("invalid-spec", "specs/b.yaml", True),
            ("status-stale", str(folder / "a.yaml"), False),
            ("status-stale", str(folder / "a.yaml"), True),
        ], seen
        assert all(line.startswith("{") for line in as_json.lines)  # one document a line
        assert [line.split()[:2] for line in text.lines[:2]] == [["NAME", "PHASE"], ["a", "Running"]], (
            text.lines
        )
    finally:
        codes = [w.stop() for w in watchers]
        daemon.stop()
        subprocess.run(["umount", "-l", str(folder)], check=False)
        cli("delete", "--all", cwd=project)
    assert codes == [130, 130]
