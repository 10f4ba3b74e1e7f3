"""Staged records (``Controller.apply``/``delete`` with ``stage=True``, what the CLI's ``apply``
and ``delete`` do): the pass that follows writes each record once, with what it decided; a
staged record is on disk before its job's tasks are launched or stopped (the write-ahead order
of ``controller/reconciler.py``); a job with nothing on a backend is deleted without its mark
ever being written; a staged record that cannot be written leaves the job as it was and is
not retried. Real spec files, planner, records and status files; the fake backend."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.controller_world import World, job_text
from tfdeclare.core.enums import Phase, Reason
from tfdeclare.core.run.record import JobRecord

UNPLACEABLE = "worker: {count: 1, resources: {cpus: 1000, mem: 64}}"


class _Writes:
    """Every record write of the store, by job (the real store does the writing)."""

    def __init__(self, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by_job: dict[str, int] = {}
        store = world.store
        save, save_many = store.save, store.save_many

        def counted_save(record: JobRecord) -> None:
            save(record)
            self.by_job[record.name] = self.by_job.get(record.name, 0) + 1

        def counted_save_many(records: Sequence[JobRecord]) -> dict[str, OSError]:
            failed = save_many(records)
            for record in records:
                if record.name not in failed:
                    self.by_job[record.name] = self.by_job.get(record.name, 0) + 1
            return failed

        monkeypatch.setattr(store, "save", counted_save)
        monkeypatch.setattr(store, "save_many", counted_save_many)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_staged_apply_writes_each_record_once_with_what_the_pass_decided(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = _Writes(world, monkeypatch)
    world.write("runs", job_text("runs"))
    world.write("waits", job_text("waits", UNPLACEABLE))
    changes = world.controller.apply(world.plan(), stage=True)
    assert sorted(changes) == ["+ runs: new job", "+ waits: new job"]
    assert world.store.load("runs") is None and world.store.load("waits") is None, "nothing written yet"
    assert set(world.controller.records()) == {"runs", "waits"}, "the next pass takes them"
    world.reconcile()
    assert writes.by_job == {"runs": 2, "waits": 1}, "the launch's write-ahead, then its tasks"
    waits = world.record("waits")
    assert (waits.phase, waits.reason) == (Phase.PENDING, Reason.UNSCHEDULABLE)
    status = world.status("waits")
    assert status is not None and status["phase"] == "Pending"
    assert len(world.tasks("runs")) == 2
    world.reconcile()
    assert writes.by_job["waits"] == 1, "an unchanged job is not written again"


def test_a_staged_record_is_on_disk_before_its_tasks_are_launched_or_stopped(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = world.backend
    on_disk: list[tuple[str, Any]] = []
    launch, stop = backend.launch, backend.stop

    def checked_launch(placement: Any, tasks: Any) -> None:
        record = world.store.load(placement.job)
        on_disk.append(("launch", record and dict(record.addresses)))
        launch(placement, tasks)

    def checked_stop(task_ids: Sequence[str], grace_s: float) -> None:
        record = world.store.load("a")
        on_disk.append(("stop", record and record.deleting))
        stop(task_ids, grace_s)

    monkeypatch.setattr(backend, "launch", checked_launch)
    monkeypatch.setattr(backend, "stop", checked_stop)
    world.write("a", job_text("a"))
    world.controller.apply(world.plan(), stage=True)
    world.settle()
    assert on_disk == [("launch", {"worker-0": "fake-host:31000", "worker-1": "fake-host:31001"})]
    assert world.controller.delete(["a"], stage=True) == []
    world.reconcile()
    assert on_disk[1:] == [("stop", True)], "marked for deletion on disk before its tasks stop"
    world.settle()
    assert world.store.load("a") is None and world.tasks("a", alive=False) == {}


def test_a_staged_delete_of_a_job_with_nothing_anywhere_never_writes_its_mark(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.write("waits", job_text("waits", UNPLACEABLE))
    world.write("other", job_text("other", UNPLACEABLE))
    world.controller.apply(world.plan(), stage=True)
    world.reconcile()
    writes = _Writes(world, monkeypatch)
    assert world.controller.delete(["waits", "nope"], stage=True) == ["nope"]
    assert world.record("waits").deleting is False, "not written yet"
    world.reconcile()
    assert writes.by_job == {}, "removed at once: its mark was never written"
    assert world.store.load("waits") is None and world.status("waits") is None
    assert world.record("other").phase is Phase.PENDING


@pytest.fixture
def unwritable(world: World) -> Iterator[Path]:
    """The state folder, made unwritable even for root (``chattr +i``): no record database
    can be made in it."""
    jobs = world.store.root
    jobs.mkdir(parents=True, exist_ok=True)
    marked = subprocess.run(["chattr", "+i", str(jobs)], check=False, capture_output=True)
    if marked.returncode != 0:
        missing(f"chattr +i does not work here: {marked.stderr.decode().strip()}")
    try:
        yield jobs
    finally:
        subprocess.run(["chattr", "-i", str(jobs)], check=False)


def test_a_staged_record_that_cannot_be_written_leaves_the_job_as_it_was(
    world: World, unwritable: Path
) -> None:
    world.write("runs", job_text("runs"))
    world.write("waits", job_text("waits", UNPLACEABLE))
    world.controller.apply(world.plan(), stage=True)
    result = world.reconcile()
    assert sorted(world.controller.stage_failures) == ["runs", "waits"]
    assert world.controller.apply_failures == {
        "runs": f"{world.store.database} (Operation not permitted)",
        "waits": f"{world.store.database} (Operation not permitted)",
    }
    assert world.backend.cluster.launched == [], "no write-ahead record: no launch"
    assert not any("retrying" in str(error) for error in result.errors), result.errors
    assert world.status("waits") is None, "no status file for a job never made"
    subprocess.run(["chattr", "-i", str(unwritable)], check=True)
    again = world.reconcile()
    assert world.store.records() == {} and again.launched == 0, "not retried: apply again"
    assert world.controller.stage_failures == {}
