"""Bounded status (issue 29): a status document lists at most ``status.TASKS_LISTED`` tasks and
says when it lists fewer than the job has; the rest are paged (``task_entries``, ``tfdeclare
status NAME --tasks-offset``); the summaries ``tfdeclare status`` prints come from the writer's
index while it is of the files there, else from the files. Small counts, with the bound lowered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import REPO
from tests.controller_world import World, job_text
from tfdeclare.cli.main import main
from tfdeclare.core.run import status
from tfdeclare.shell.statuswriter import StatusWriter

STATUS_SCHEMA = json.loads((REPO / "schemas" / "status.schema.json").read_text())
SEVEN = "worker: {count: 7, resources: {cpus: 0.1, mem: 16}}"


def schema_errors(document: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(STATUS_SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def seven_workers(root: Path, *, running: bool = True) -> World:
    world = World(root)
    world.write("a", job_text("a", SEVEN, extra="tensorboard: {logDir: logs}"))
    world.apply()
    if running:
        world.settle()
    return world


def test_a_document_lists_the_first_tasks_and_says_how_many_there_are(tmp_path: Path) -> None:
    world = seven_workers(tmp_path)
    record = world.record("a")
    whole = status.status_document(record, world.clock())
    assert len(whole["tasks"]) == 8 and "tasksTruncated" not in whole and "taskCount" not in whole
    cut = status.status_document(record, world.clock(), tasks_listed=3)
    assert cut["tasks"] == whole["tasks"][:3]
    assert cut["tasksTruncated"] is True and cut["taskCount"] == 8
    assert list(cut).index("tasksTruncated") == list(cut).index("tasks") + 1
    assert schema_errors(cut) == [] and schema_errors(whole) == []
    # every task is still counted, and a summary of either says the same
    assert cut["replicas"] == whole["replicas"]
    assert status.summary(cut) == status.summary(whole)
    assert status.summary(whole)["running"] == 8 and status.summary(whole)["tasks"] == 8


def test_task_entries_page_through_every_task_in_order(tmp_path: Path) -> None:
    world = seven_workers(tmp_path, running=False)
    record = world.record("a")
    every = status.status_document(record, world.clock())["tasks"]
    pages = [status.task_entries(record, offset, 3) for offset in range(0, 9, 3)]
    assert [t for page in pages for t in page] == every
    assert status.task_entries(record, 8, 5) == [] and status.task_entries(record, 6) == every[6:]
    assert [f"{t['role']}-{t['index']}" for t in every] == [
        "tensorboard-0",
        *(f"worker-{i}" for i in range(7)),
    ]


def test_the_default_bound_lists_a_job_within_the_default_policy_whole(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.write("big", job_text("big", "worker: {count: 1001, resources: {cpus: 1000}}"))
    world.apply()
    world.reconcile()
    document = world.status("big")
    assert document is not None
    assert len(document["tasks"]) == status.TASKS_LISTED == 1000
    assert document["taskCount"] == 1001 and document["tasksTruncated"] is True
    assert schema_errors(document) == []


def test_summaries_come_from_the_index_while_it_is_of_the_files_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = seven_workers(tmp_path)
    index = tmp_path / "state" / "status-summaries.json"
    writer = StatusWriter(world.status_dir, index=index)
    for name in ("a", "b"):
        writer.write({**status.status_document(world.record("a"), world.clock()), "name": name})
    writer.flush()
    reader = StatusWriter(world.status_dir, index=index)
    expected = [status.summary(d) for d in (reader.read("a"), reader.read("b")) if d is not None]
    read: list[str] = []
    real_read = StatusWriter.read
    monkeypatch.setattr(StatusWriter, "read", lambda self, name: read.append(name) or real_read(self, name))
    assert reader.summaries() == expected and read == [], "no file read while the index is of them"
    # another writer changes b behind the index: b is read, a still comes from the index
    other = StatusWriter(world.status_dir)
    other.write({**status.status_document(world.record("a"), world.clock()), "name": "b", "message": "new"})
    summaries = reader.summaries()
    assert [s["message"] for s in summaries] == [expected[0]["message"], "new"] and read == ["b"]
    # an index that cannot be read is no index
    index.write_text("{not json")
    read.clear()
    assert [s["name"] for s in reader.summaries()] == ["a", "b"] and read == ["a", "b"]
    writer.remove("b")
    writer.flush()
    assert [s["name"] for s in StatusWriter(world.status_dir, index=index).summaries()] == ["a"]


def test_the_controller_keeps_the_index_once_a_pass(tmp_path: Path) -> None:
    world = World(tmp_path)
    index = tmp_path / "state" / "status-summaries.json"
    world.statuses.index = index
    world.write("a", job_text("a"))
    world.write("b", job_text("b"))
    world.apply()
    world.settle()
    jobs = json.loads(index.read_text())["jobs"]
    assert sorted(jobs) == ["a", "b"]
    assert [jobs[n]["summary"] for n in ("a", "b")] == [
        status.summary(d) for d in (world.status("a"), world.status("b")) if d is not None
    ]


def run_status(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["status", *args, "--state-dir", str(root / "state"), "--status-dir", str(root / "status")])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_name_lists_a_page_of_tasks_and_says_how_to_see_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status, "TASKS_LISTED", 3)  # the status file lists 3 of the 8 tasks
    world = seven_workers(tmp_path)
    document = world.status("a")
    assert document is not None and len(document["tasks"]) == 3 and document["taskCount"] == 8
    monkeypatch.setattr("tfdeclare.cli.run_commands.DETAIL_TASKS", 2)
    code, out, _ = run_status(tmp_path, capsys, "a")
    assert code == 0
    assert "tasks (8 in all):" in out and "tensorboard-0" in out and "worker-0" in out
    assert "worker-1" not in out
    assert "(tasks 1-2 of 8 listed; 6 more: `tfdeclare status a --tasks-offset 2`, or `--tasks all`)" in out
    # past what the status file lists: from the job's record
    code, out, _ = run_status(tmp_path, capsys, "a", "--tasks-offset", "5", "--tasks", "2", "-o", "json")
    paged = json.loads(out)
    assert [t["index"] for t in paged["tasks"]] == [4, 5]
    assert (paged["tasksOffset"], paged["taskCount"], paged["tasksTruncated"]) == (5, 8, True)
    assert schema_errors(paged) == []
    code, out, _ = run_status(tmp_path, capsys, "a", "--tasks", "all", "-o", "json")
    every = json.loads(out)
    assert len(every["tasks"]) == 8 and "tasksTruncated" not in every
    code, out, _ = run_status(tmp_path, capsys, "a", "-o", "json")
    assert json.loads(out) == document, "-o json alone: the status file as it is"
    # the table counts every task, not those listed
    code, out, _ = run_status(tmp_path, capsys)
    assert " 8/8 " in out.splitlines()[1]


def test_tasks_options_need_a_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seven_workers(tmp_path)
    code, _, err = run_status(tmp_path, capsys, "--tasks", "3")
    assert code == 1 and "--tasks and --tasks-offset list the tasks of one job: name it" in err
    with pytest.raises(SystemExit):
        run_status(tmp_path, capsys, "a", "--tasks", "-1")
