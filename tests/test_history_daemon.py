"""``tfdeclare history`` end to end: a real daemon on a real git repository (``file://``) and on
a real folder, real task processes, the CLI as a process. Three commits (a good one, an
invalid one, a fix) are three entries newest first with their outcomes and subjects; a
restart of the daemon adds none; ``history JOB`` keeps the entries that touched the job with
the attempt each started; the status page shows them; a folder change is recorded too."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli
from tests.test_daemon import Daemon, commit, cwd, job, repo, status, wait_until

pytestmark = pytest.mark.e2e  # the daemon as a process, real jobs, a git repository

__all__ = ["cwd", "repo"]  # the fixtures of test_daemon


def history(cwd: Path, *args: str) -> list[dict[str, Any]]:
    done = cli("history", "-o", "json", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_git_mode_three_commits_are_three_entries_newest_first(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    (cwd / "tfdeclare.yaml").write_text(
        (cwd / "tfdeclare.yaml").read_text() + "daemon: {settleSeconds: 0.5}\n"
    )
    for name in ("g", "h"):
        (cwd / f"{name}-out").mkdir()
    specs = {
        name: job(name).replace(f"env: {{OUT: {name}-out}}", f"env: {{OUT: {cwd / name}-out}}")
        for name in "gh"
    }
    assert cli("history", cwd=cwd).stdout == "No history yet (the daemon records it).\n"
    good = commit(work, "add g and h", {"g.yaml": specs["g"], "h.yaml": specs["h"]})
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5")
    try:
        wait_until(lambda: (status(cwd, "g") or {}).get("phase") == "Running")
        wait_until(lambda: len(history(cwd)) == 1)
        bad = commit(work, "break g", {"g.yaml": specs["g"].replace("count: 1", "count: -1")})
        wait_until(lambda: len(history(cwd)) == 2)
        fix = commit(work, "fix g", {"g.yaml": specs["g"].replace("[python,", "[python, -u,")})
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == fix)
        wait_until(lambda: len(history(cwd)) == 3)
        entries = history(cwd)  # read while the daemon holds the lock: history never takes it
        attempt = (status(cwd, "g") or {}).get("attempt")
        page = urllib.request.urlopen(daemon.url + "/", timeout=5).read().decode()
    finally:
        assert daemon.stop() == 0
    assert [(e["revision"]["commit"], e["revision"]["subject"], e["outcome"]) for e in entries] == [
        (fix, "fix g", "applied"),
        (bad, "break g", "refused"),
        (good, "add g and h", "applied"),
    ]
    fixed, refused, added = entries
    assert (added["changes"], sorted(j["name"] for j in added["jobs"])) == (2, ["g", "h"])
    assert added["summary"] == "Plan: 2 to create, 0 to resize, 0 to restart, 0 to delete."
    assert refused["problems"] == 1 and refused["diagnostics"][0].startswith(
        "jobs/g.yaml:8:21: error: must be at least 0"
    )
    assert refused["jobs"] == [
        {
            "name": "g",
            "action": "keep",
            "message": refused["jobs"][0]["message"],
            "attempt": None,
            "reason": "InvalidSpec",
        }
    ]
    assert fixed["jobs"][0]["action"] == "restart" and fixed["jobs"][0]["attempt"] == attempt == 1
    assert fixed["rollback"] == f"git revert {fix}" and refused["rollback"] is None
    assert added["revision"]["author"] == "Ada <ada@example.com>"
    assert f"{fix[:12]} fix g" in page and "refused: 1 problem" in page

    # history JOB: the entries that touched it, with the attempt each started
    only_h = history(cwd, "h")
    assert [(e["revision"]["subject"], e["job"]["action"], e["job"]["attempt"]) for e in only_h] == [
        ("add g and h", "create", 0)
    ]
    assert [e["job"]["action"] for e in history(cwd, "g")] == ["restart", "keep", "create"]
    assert [e["revision"]["subject"] for e in history(cwd, "--limit", "1")] == ["fix g"]
    assert yaml.safe_load(cli("history", "-o", "yaml", cwd=cwd).stdout) == history(cwd)
    text = cli("history", cwd=cwd)
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["TIME", "REVISION", "OUTCOME", "JOBS"]
    assert f"{fix[:12]} fix g" in lines[1] and "applied 1 change" in lines[1] and "-/+ g" in lines[1]
    assert f"{bad[:12]} break g" in lines[2] and "refused: 1 problem" in lines[2]
    assert lines[3].strip().startswith("jobs/g.yaml:8:21: error:"), "a refused revision says why"
    assert f"git revert {fix[:12]}` and push: the daemon applies the revert like any commit" in text.stderr
    assert "-/+ restart (attempt 1)" in cli("history", "g", cwd=cwd).stdout
    assert (
        cli("history", "nobody", cwd=cwd).stdout == "No history of job nobody yet (the daemon records it).\n"
    )

    again = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5")
    try:  # the same head after a restart is nothing new
        wait_until(lambda: again.get("/healthz")[1].get("lastPassAt") is not None)
        first = again.get("/healthz")[1]["lastPassAt"]
        wait_until(lambda: again.get("/healthz")[1]["lastPassAt"] > first + 1)  # resyncs later
    finally:
        assert again.stop() == 0
    assert len(history(cwd)) == 3


def _replace(path: Path, text: str) -> None:
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(text)
    staged.rename(path)


def test_folder_mode_records_a_change_of_the_files(cwd: Path) -> None:
    (cwd / "specs" / "f-out").mkdir()
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "0.5")
    try:
        wait_until(lambda: "listening on" in daemon.text())
        assert history(cwd) == [], "a folder with nothing in it changed nothing"
        # written whole (a rename), so the daemon never reads one half-written: an empty file
        # seen mid-write holds its job back (FileHoldsNoJob), a change the history records too
        _replace(cwd / "specs" / "f.yaml", job("f"))
        wait_until(lambda: len(history(cwd)) == 1)
        _replace(
            cwd / "specs" / "f.yaml", "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: f}\nspec: 3\n"
        )
        wait_until(lambda: len(history(cwd)) == 2)
    finally:
        assert daemon.stop() == 0
    broken, created = history(cwd)
    assert (created["source"], created["files"], created["outcome"], created["revision"]) == (
        "folder",
        ["specs/f.yaml"],
        "applied",
        None,
    )
    assert created["jobs"][0]["name"] == "f" and created["jobs"][0]["action"] == "create"
    assert (broken["outcome"], broken["files"], broken["problems"]) == ("refused", ["specs/f.yaml"], 1)
    assert "folder: specs/f.yaml" in cli("history", "f", cwd=cwd).stdout


def test_apply_from_the_command_line_is_recorded_with_its_paths(cwd: Path) -> None:
    (cwd / "specs" / "p-out").mkdir()
    (cwd / "specs" / "p.yaml").write_text(job("p"))
    assert cli("apply", "specs", cwd=cwd).returncode == 0
    assert cli("apply", "specs", cwd=cwd).returncode == 0
    (cwd / "specs" / "p.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: p}\nspec: 3\n"
    )
    assert cli("apply", "specs", cwd=cwd).returncode == 1, "refused where it runs, and nothing applied"
    again, first = history(cwd)
    assert (first["source"], first["files"], first["outcome"], first["jobs"][0]["action"]) == (
        "apply",
        ["specs"],
        "applied",
        "create",
    )
    assert (again["outcome"], again["jobs"]) == ("nothing-to-do", [])
    assert "apply: specs" in cli("history", "p", cwd=cwd).stdout


STUBBORN = (  # a task that ignores SIGTERM: its job's deletion takes the grace period, many passes
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
    "  command: [python, -c, 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "time.sleep(600)']\n"
    "  terminationGracePeriodSeconds: 4\n"
    "  replicas: {{worker: {{count: 1, resources: {{cpus: 0.1, mem: 64}}}}}}\n"
)


def _deleted_over_passes(cwd: Path, daemon: Daemon, name: str, remove: Any) -> None:
    """Remove ``name``'s file (``remove``) and wait until the job is gone, over many passes."""
    wait_until(lambda: (status(cwd, name) or {}).get("phase") == "Running")
    wait_until(lambda: len(history(cwd)) == 1)
    remove()
    wait_until(lambda: (status(cwd, name) or {}).get("phase") == "Deleting")
    deleting = daemon.passes()
    wait_until(lambda: status(cwd, name) is None, timeout=30)
    assert daemon.passes() >= deleting + 3, "the deletion took several passes"
    done = daemon.passes()
    wait_until(lambda: daemon.passes() >= done + 2)  # and the passes after it


def test_a_prune_is_recorded_once_though_its_tasks_take_many_passes_to_stop(cwd: Path) -> None:
    _replace(cwd / "specs" / "u.yaml", job("u"))
    _replace(cwd / "specs" / "v.yaml", STUBBORN.format(name="v"))
    (cwd / "specs" / "u-out").mkdir()
    daemon = Daemon(cwd, "--specs", "specs", "--prune", "--interval", "0.5")
    try:
        _deleted_over_passes(cwd, daemon, "v", (cwd / "specs" / "v.yaml").unlink)
        plan = cli("plan", "specs", "--prune", cwd=cwd)
    finally:
        assert daemon.stop() == 0
    deleted, created = history(cwd)
    assert (deleted["outcome"], deleted["changes"], deleted["files"]) == ("applied", 1, ["specs/v.yaml"])
    assert [(j["name"], j["action"]) for j in deleted["jobs"]] == [("v", "delete")]
    assert created["changes"] == 2
    assert "No changes" in plan.stdout


def test_git_mode_a_prune_is_recorded_once_though_its_tasks_take_many_passes_to_stop(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    remote, work = repo
    (cwd / "m-out").mkdir()
    m = job("m").replace("env: {OUT: m-out}", f"env: {{OUT: {cwd / 'm-out'}}}")
    first = commit(work, "add m and n", {"m.yaml": m, "n.yaml": STUBBORN.format(name="n")})
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--prune", "--interval", "0.5")
    try:
        _deleted_over_passes(cwd, daemon, "n", lambda: commit(work, "drop n", {"n.yaml": None}))
    finally:
        assert daemon.stop() == 0
    dropped, added = history(cwd)
    assert added["revision"]["commit"] == first
    assert (dropped["revision"]["subject"], dropped["outcome"], dropped["changes"]) == (
        "drop n",
        "applied",
        1,
    )
    assert [(j["name"], j["action"]) for j in dropped["jobs"]] == [("n", "delete")]
