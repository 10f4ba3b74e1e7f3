"""Bounded status (issue 29): a status document lists at most ``status.TASKS_LISTED`` tasks and
says when it lists fewer than the job has; the rest are paged (``task_entries``, ``tfdeclare
status NAME --tasks-offset``); the summaries ``tfdeclare status`` prints come from the writer's
index while it is of the files there, else from the files. Small counts, with the bound lowered.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import REPO
from tests.controller_world import World, job_text
from tests.records_db import delete_row, put_row
from tests.test_daemon_page import Served
from tfdeclare.cli.main import main
from tfdeclare.core.run import status
from tfdeclare.core.spec.keys import ORDER
from tfdeclare.daemon import page, service
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
    monkeypatch.setattr("tfdeclare.cli.status_command.DETAIL_TASKS", 2)
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


def test_task_keys_are_the_spec_s_and_the_recorded_ones_in_order(tmp_path: Path) -> None:
    """The same keys, in the same order, as sorting the spec's and the recorded ones together,
    for any page; a deleting job's are the recorded ones alone."""
    world = seven_workers(tmp_path)
    running = world.record("a")
    world.write("a", job_text("a", "worker: {count: 3, resources: {cpus: 0.1, mem: 16}}, ps: {count: 2}"))
    world.apply()
    resized = world.record("a").evolve(tasks=running.tasks)  # its 7 workers still recorded
    for record in (running, resized, resized.evolve(deleting=True), resized.evolve(tasks=())):
        recorded = {t.key for t in record.tasks}
        expected = sorted(recorded if record.deleting else {*record.spec.task_keys(), *recorded}, key=ORDER)
        assert status.task_keys(record) == expected and status.task_count(record) == len(expected)
        for offset in range(len(expected) + 1):
            for limit in (0, 1, 2, 5, None):
                end = None if limit is None else offset + limit
                assert status.task_keys(record, offset, limit) == expected[offset:end], (offset, limit)


# ---- the daemon's endpoints ------------------------------------------------------------------


@pytest.fixture
def served_four(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """Jobs a (7 workers and TensorBoard, its status file lists 3 of 8 tasks), b, c, d (2
    workers each) after a daemon pass, with the bounds lowered: /jobs lists 5 tasks in all,
    the page 2 cards of 2 tasks each."""
    monkeypatch.setattr(status, "TASKS_LISTED", 3)
    monkeypatch.setattr(service, "JOBS_TASKS", 5)
    monkeypatch.setattr(page, "PAGE_JOBS", 2)
    monkeypatch.setattr(page, "CARD_TASKS", 2)
    world = seven_workers(tmp_path)
    for name in ("b", "c", "d"):
        world.write(name, job_text(name))
    world.apply()
    world.settle()
    made = Served(world)
    made.daemon._pass()  # publishes the view
    yield made
    made.close()


def test_jobs_lists_every_job_within_a_bound_on_tasks(served_four: Served) -> None:
    code, _, body = served_four.get("/jobs")
    listed = json.loads(body)
    assert all(j["problems"] == [] for j in listed)  # the source problems that hold each back
    jobs = [{k: v for k, v in j.items() if k != "problems"} for j in listed]
    assert code == 200 and [j["name"] for j in jobs] == ["a", "b", "c", "d"]
    a, b, c, d = jobs
    assert (len(a["tasks"]), a["taskCount"], a["tasksTruncated"]) == (3, 8, True)
    assert len(b["tasks"]) == 2 and "tasksTruncated" not in b, "within the bound: as its status file"
    assert (c["tasks"], c["taskCount"], c["tasksTruncated"]) == ([], 2, True)
    assert (d["tasks"], d["taskCount"]) == ([], 2)
    assert all(schema_errors(j) == [] for j in jobs)
    assert b == served_four.world.status("b")


def test_jobs_name_pages_a_job_s_tasks(served_four: Served) -> None:
    code, _, body = served_four.get("/jobs/a?tasksOffset=5&tasksLimit=2")
    paged = json.loads(body)
    assert code == 200 and [t["index"] for t in paged["tasks"]] == [4, 5]  # tensorboard-0 is first
    assert (paged["tasksOffset"], paged["taskCount"], paged["tasksTruncated"]) == (5, 8, True)
    assert all(t["state"] == "running" and t["id"] for t in paged["tasks"]), "from the record: live"
    assert schema_errors(paged) == []
    code, _, body = served_four.get("/jobs/a?tasksLimit=100")
    assert len(json.loads(body)["tasks"]) == 8 and "tasksTruncated" not in json.loads(body)
    code, _, body = served_four.get("/jobs/a")
    assert len(json.loads(body)["tasks"]) == 3, "by default as many as a status file lists"
    assert served_four.get("/jobs/zz")[0] == 404 and served_four.get("/jobs/..%2fa")[0] == 404
    for bad in ("tasksLimit=-1", "tasksLimit=10001", "tasksOffset=x", "tasksOffset=1&tasksOffset=2"):
        assert served_four.get(f"/jobs/a?{bad}")[0] == 400, bad


def test_the_page_shows_a_page_of_cards_with_a_page_of_tasks_each(served_four: Served) -> None:
    code, _, body = served_four.get("/")
    text = body.decode()
    assert code == 200 and 'id="job-a"' in text and 'id="job-b"' in text and 'id="job-c"' not in text
    assert "jobs 1\u20132 of 4" in text and 'href="/?jobsOffset=2"' in text
    assert "8 of 8 tasks running" in text, "counted over every task, not those listed"
    assert text.count('<tr class="task">') == 4
    assert "2 of 8 tasks listed; the other 6" in text and 'href="/jobs/a?tasksOffset=2"' in text
    code, _, body = served_four.get("/?jobsOffset=2")
    text = body.decode()
    assert 'id="job-c"' in text and 'id="job-d"' in text and 'id="job-a"' not in text
    assert 'href="/?jobsOffset=0"' in text
    assert served_four.get("/?jobsOffset=-2")[0] == 400


def test_the_endpoints_answer_from_the_last_pass_without_reading_a_file(
    served_four: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_reads(self: StatusWriter, name: str) -> None:
        raise AssertionError(f"read {name}'s status file")

    monkeypatch.setattr(StatusWriter, "read", no_reads)
    assert [served_four.get(path)[0] for path in ("/", "/jobs", "/jobs/a", "/healthz")] == [200] * 4
    assert served_four.get("/jobs/a/logs?task=worker-6")[0] == 200, "a task past the listed ones"


def test_a_long_pass_keeps_the_endpoints_answering(tmp_path: Path) -> None:
    world = seven_workers(tmp_path)
    made = Served(world)
    made.daemon._pass()
    release = threading.Event()
    inside = threading.Event()
    reconcile = world.controller.reconcile

    def slow() -> Any:
        inside.set()
        release.wait(30)
        return reconcile()

    world.controller.reconcile = slow  # type: ignore[method-assign]
    loop = threading.Thread(target=made.daemon._pass)
    loop.start()
    try:
        assert inside.wait(10)
        assert [made.get(path)[0] for path in ("/", "/jobs", "/jobs/a", "/healthz")] == [200] * 4
        assert loop.is_alive(), "answered while the pass was still stuck in reconcile"
    finally:
        release.set()
        loop.join(30)
        made.close()


def test_a_new_writer_leaves_a_file_that_already_says_it_alone(tmp_path: Path) -> None:
    """A command run again over unchanged jobs (a new process: a new writer) writes none of
    their status files, and keeps when they were written."""
    world = seven_workers(tmp_path)
    document = status.status_document(world.record("a"), world.clock())
    first = StatusWriter(tmp_path / "out")
    assert first.write(document) is True
    path = first.path("a")
    inode = path.stat().st_ino
    later = {**document, "updatedAt": "2030-01-01T00:00:00Z"}
    again = StatusWriter(tmp_path / "out", index=tmp_path / "index.json")
    assert again.write(later) is False and path.stat().st_ino == inode
    assert again.documents()["a"]["updatedAt"] == document["updatedAt"], "when the file was written"
    again.flush()
    assert again.summaries() == [status.summary(document)], "indexed all the same"
    assert StatusWriter(tmp_path / "out").write({**later, "message": "changed"}) is True
    assert path.stat().st_ino != inode
    path.write_text("not: [a status")
    assert StatusWriter(tmp_path / "out").write(later) is True, "a file that says otherwise is replaced"


# ---- many jobs: one sync a pass ------------------------------------------------------------


def waiting_jobs(root: Path, count: int) -> World:
    world = World(root)
    world.statuses.index = root / "state" / "status-summaries.json"
    for i in range(count):
        world.write(f"w{i}", job_text(f"w{i}", "worker: {count: 1, resources: {cpus: 1000}}"))
    return world


def test_a_pass_over_jobs_that_wait_syncs_once_not_twice_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = waiting_jobs(tmp_path, 20)
    syncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    world.apply()
    assert len(syncs) <= 2, f"20 records applied with {len(syncs)} fsync calls"
    syncs.clear()
    world.reconcile()
    assert all(world.record(f"w{i}").reason.value == "Unschedulable" for i in range(20))
    assert len(syncs) <= 6, f"20 records and 20 status files written with {len(syncs)} fsync calls"
    assert [s["name"] for s in world.statuses.summaries()] == sorted(f"w{i}" for i in range(20))
    syncs.clear()
    world.controller.delete([f"w{i}" for i in range(20)])
    world.reconcile()
    assert world.store.records() == {} and world.statuses.names() == []
    assert len(syncs) <= 6, f"20 jobs deleted with {len(syncs)} fsync calls"


def test_a_write_that_fails_in_a_batch_is_that_job_s_alone_and_retried(tmp_path: Path) -> None:
    world = waiting_jobs(tmp_path, 3)
    world.apply()
    blocker = world.statuses.path("w1")
    blocker.mkdir(parents=True)  # w1's status file cannot be put in place
    result = world.reconcile()
    errors = [str(e) for e in result.errors]
    assert [e.split(":")[0] for e in errors] == ["w1"] and "retrying next pass" in errors[0]
    assert world.status("w0") is not None and world.status("w2") is not None
    blocker.rmdir()
    assert world.reconcile().errors == [] and world.status("w1") is not None


def test_a_line_of_job_names_is_bounded() -> None:
    from tfdeclare.cli.run_commands import NAMES_SHOWN, _some

    names = [f"j{i:02d}" for i in range(NAMES_SHOWN + 5)]
    assert _some(names[:3]) == "j00, j01, j02"
    assert _some(names) == ", ".join(names[:NAMES_SHOWN]) + " and 5 more"


def test_a_job_whose_record_cannot_be_read_still_shows_its_last_status(served_four: Served) -> None:
    root = served_four.world.root
    (root / "specs" / "b.yaml").unlink()  # else the daemon applies it anew
    put_row(root / "state", "b", "{not json")
    fresh = Served(World(root))  # a daemon started since: its writer never wrote b's status
    try:
        fresh.daemon._pass()
        code, _, body = fresh.get("/jobs")
        assert code == 200 and [j["name"] for j in json.loads(body)] == ["a", "b", "c", "d"]
        assert 'id="job-b"' in fresh.get("/")[2].decode()
    finally:
        fresh.close()


def test_tasks_past_the_status_file_without_a_record_are_said_to_be_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status, "TASKS_LISTED", 3)
    seven_workers(tmp_path)
    delete_row(tmp_path / "state", "a")  # only the status files, e.g. a copy
    code, out, err = run_status(tmp_path, capsys, "a", "--tasks-offset", "2", "-o", "json")
    paged = json.loads(out)
    assert code == 0 and len(paged["tasks"]) == 1 and paged["taskCount"] == 8
    assert "lists its first 3 of 8 tasks" in err and "has no record of this run" in err
