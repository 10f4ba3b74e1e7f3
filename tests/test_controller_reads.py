"""What the controller lets a caller read (``Controller.records``, ``status_files``,
``status_documents``, ``read_log``...): the daemon's only way in, over the real state and
status folders and the in-memory fake backend."""

from __future__ import annotations

from pathlib import Path

from tests.controller_world import World, job_text
from tests.records_db import put_row
from tfdeclare.controller import Controller
from tfdeclare.core.enums import Role
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateStore


def test_status_documents_of_a_new_controller_come_from_records_and_from_status_files(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.write("a", job_text("a"))
    world.write("b", job_text("b"))
    world.apply()
    world.settle()
    put_row(tmp_path / "state", "b", "{not a record")  # b's record cannot be read now
    # a controller that has written nothing yet (a daemon just started) over the same folders
    fresh = Controller(StateStore(tmp_path / "state"), world.backend, StatusWriter(world.status_dir))
    assert fresh.state_root == tmp_path / "state" and fresh.backend_name == world.backend.name
    records = fresh.records()
    assert set(records) == {"a"} and set(fresh.observed()) == {"a"}
    on_disk = {d["name"]: d for d in fresh.status_files()}
    assert set(on_disk) == {"a", "b"}
    documents, texts = fresh.status_documents(records)
    assert set(documents) == set(texts) == {"a", "b"}
    assert documents["b"] == on_disk["b"], "a job whose record cannot be read: its status file's last word"
    assert documents["a"]["specHash"] == records["a"].spec_hash, "a job's document as its record says"
    assert documents["a"]["name"] == "a" and '"name": "a"' in texts["a"]


def test_read_log_and_watch_reach_the_backend(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    woken: list[bool] = []
    world.controller.watch(lambda: woken.append(True))
    task = world.task("a", Role.WORKER, 0)
    world.backend.finish(task.task_id, 0)
    assert woken, "the backend's watch reached the caller"
    chunk = world.controller.read_log(task.task_id, 0, 1024)
    assert chunk == world.backend.read_log(task.task_id, 0, 1024)


def test_the_lock_holders_store_hands_over_what_it_holds_without_reading_and_only_then(
    tmp_path: Path,
) -> None:
    """``StateStore.held``: what ``locked`` hands to the background controller's check after a
    command. The lock holder's store that has read or saved every record says what is on disk;
    one that has not, or is not the only writer, says nothing (the check then reads the files)."""
    world = World(tmp_path)
    world.write("a", job_text("a"))
    world.write("b", job_text("b"))
    world.apply()
    world.settle()
    on_disk = StateStore(tmp_path / "state").records()
    holder = StateStore(tmp_path / "state", exclusive=True)
    assert holder.held() is None, "nothing read yet: it cannot say"
    holder.records()
    assert {r.name: r for r in holder.held() or []} == on_disk
    assert StateStore(tmp_path / "state").held() is None, "not the only writer: never trusted"
    broken = StateStore(tmp_path / "state", exclusive=True)
    put_row(tmp_path / "state", "b", "{not a record")
    broken.records()
    assert broken.held() is None, "a record it cannot read: the files say more than it holds"
    empty = StateStore(tmp_path / "empty", exclusive=True)
    assert empty.records() == {} and empty.held() == []
    empty.save_many([on_disk["a"]])
    assert [r.name for r in empty.held() or []] == ["a"], "what it saved into a new folder"
