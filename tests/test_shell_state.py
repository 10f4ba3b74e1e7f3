"""The shell's state, directly: the job record store (``shell/store.py``), the status writer
(``shell/statuswriter.py``: atomic, only on change, valid against ``schemas/status``) and the
one-controller lock (``shell/lock.py``, with real processes holding it)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.controller_world import World, job_text
from tests.records_db import put_row
from tfdeclare.core.enums import Phase, Role
from tfdeclare.core.run import status
from tfdeclare.shell.lock import ControllerLock, LockHeld
from tfdeclare.shell.statuswriter import StatusWriter
from tfdeclare.shell.store import StateError, StateStore

STATUS_SCHEMA = json.loads((REPO / "schemas" / "status.schema.json").read_text())


def running_world(root: Path) -> World:
    world = World(root)
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    return world


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


# ---- the record store --------------------------------------------------------------------


def test_a_saved_record_reads_back_equal_private_and_without_temp_files(tmp_path: Path) -> None:
    world = running_world(tmp_path)
    record = world.record("a")
    fresh = StateStore(tmp_path / "state").load("a")
    assert fresh == record and fresh is not record
    made = sorted(world.store.root.glob("records.sqlite*"))
    assert world.store.database in made
    for path in made:  # the database and its journal
        assert path.stat().st_mode & 0o777 == 0o600, f"{path.name}: records may hold the spec's secrets"
    assert leftovers(world.store.root) == []


def test_records_lists_readable_ones_and_names_the_unreadable(tmp_path: Path) -> None:
    world = running_world(tmp_path)
    put_row(tmp_path / "state", "torn", b"{not json")  # a row of the database
    jobs = tmp_path / "state" / "jobs"  # an older release's record files
    jobs.mkdir()
    (jobs / "broken.json").write_text("{not json")
    (jobs / "half.json").write_text(json.dumps({"name": "half"}))
    (jobs / "notes.txt").write_text("ignored")
    (jobs / "Not_A_Name.json").write_text("{}")
    store = StateStore(tmp_path / "state")
    assert sorted(store.records()) == ["a"]
    assert sorted(store.unreadable) == ["broken", "half", "torn"]
    assert "broken.json" in store.unreadable["broken"] and "cannot read" in store.unreadable["broken"]
    assert f"{store.database}: job torn: cannot read job record" in store.unreadable["torn"]
    assert "invalid job record" in store.unreadable["half"]
    assert world.record("a").phase is Phase.RUNNING
    with pytest.raises(StateError, match=r"broken\.json"):
        store.load("broken")
    with pytest.raises(StateError, match=r"records\.sqlite: job torn"):
        store.load("torn")


def test_unchanged_records_are_the_same_objects_and_a_change_by_another_writer_is_seen(
    tmp_path: Path,
) -> None:
    running_world(tmp_path)
    reader = StateStore(tmp_path / "state")
    first = reader.records()["a"]
    observed = reader.observed()["a"]
    assert reader.records()["a"] is first and reader.observed()["a"] is observed
    writer = StateStore(tmp_path / "state")
    writer.save(first.evolve(message="changed elsewhere"))
    assert reader.records()["a"].message == "changed elsewhere"
    assert reader.observed()["a"] is not observed


def test_delete_and_names_that_could_leave_the_folder(tmp_path: Path) -> None:
    world = running_world(tmp_path)
    world.store.delete("a")
    assert world.store.load("a") is None and world.store.records() == {}
    world.store.delete("a")  # deleting what is gone is fine
    for name in ("../a", "a/b", "", "A"):
        with pytest.raises(StateError):
            world.store.record_path(name)


def test_evolve_is_replace_keeping_the_typed_spec_until_the_spec_changes(tmp_path: Path) -> None:
    record = running_world(tmp_path).record("a")
    spec = record.spec
    moved = record.evolve(message="moved", phase=Phase.PENDING)
    assert moved == dataclasses.replace(record, message="moved", phase=Phase.PENDING)
    assert moved.spec is spec and record.message != "moved", "the typed spec kept, the old record as it was"
    changed = dict(record.canonical, metadata={"name": "a", "labels": {"x": "y"}})
    assert moved.evolve(canonical=changed).spec is not spec
    for wrong in ("nope", "_spec"):  # only the fields __init__ takes
        with pytest.raises(TypeError, match=wrong):
            record.evolve(**{wrong: 1})


# ---- the status writer --------------------------------------------------------------------


def documents_in_every_phase(root: Path) -> list[dict[str, Any]]:
    """Status documents the controller wrote for jobs running, restarting, succeeded, failed
    and being deleted (with a chief, ps and evaluator too)."""
    world = World(root)
    roles = (
        "chief: {count: 1, resources: {cpus: 0.2, mem: 64}}, ps: {count: 1, resources: {cpus: 0.2, mem: 64}}, "
        "evaluator: {count: 1, resources: {cpus: 0.2, mem: 64}}"
    )
    for name in ("run", "again", "done", "bad", "gone"):
        # (no grace for the evaluator: "done" is Succeeded as soon as its chief is)
        world.write(name, job_text(name, roles, extra="restartPolicy: ExitCode\nevaluatorGraceSeconds: 0"))
    world.apply()
    world.settle()
    world.backend.finish(world.task("again", Role.CHIEF).task_id, 137)
    world.backend.finish(world.task("done", Role.CHIEF).task_id, 0)
    world.backend.finish(world.task("bad", Role.CHIEF).task_id, 3)
    world.controller.delete(["gone"])
    world.reconcile()
    documents = [world.status(name) for name in ("run", "again", "done", "bad", "gone")]
    assert [d["phase"] for d in documents if d] == [
        "Running",
        "Restarting",
        "Succeeded",
        "Failed",
        "Deleting",
    ]
    return [d for d in documents if d]


def test_status_documents_are_valid_against_the_schema(tmp_path: Path) -> None:
    validator = jsonschema.Draft202012Validator(STATUS_SCHEMA)
    for document in documents_in_every_phase(tmp_path):
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)
        ]
        assert errors == [], (document["name"], errors)


def test_the_status_schema_rejects_what_is_not_a_status() -> None:
    validator = jsonschema.Draft202012Validator(STATUS_SCHEMA)
    assert not validator.is_valid({"apiVersion": "tfdeclare/v1", "kind": "TFJobStatus", "name": "a"})


def test_written_only_when_something_but_updated_at_changed(tmp_path: Path) -> None:
    world = running_world(tmp_path)
    writer = StatusWriter(tmp_path / "out")
    record = world.record("a")
    document = status.status_document(record, world.clock())
    assert writer.write(document) is True
    path = writer.path("a")
    inode = path.stat().st_ino
    assert writer.write(status.status_document(record, world.clock() + 60)) is False, "only updatedAt differs"
    assert path.stat().st_ino == inode
    assert writer.write({**document, "message": "something else"}) is True
    assert path.stat().st_ino != inode, "written by rename, never in place"
    assert writer.read("a") == yaml.safe_load(path.read_text()) == {**document, "message": "something else"}
    path.unlink()  # removed behind its back: written again even though unchanged
    assert writer.write({**document, "message": "something else"}) is True
    assert leftovers(path.parent) == [] and writer.names() == ["a"]
    writer.remove("a")
    assert writer.read("a") is None and writer.names() == [] and not writer.written("a")


def test_a_reader_never_sees_a_half_written_status(tmp_path: Path) -> None:
    world = running_world(tmp_path)
    writer = StatusWriter(tmp_path / "out")
    base = status.status_document(world.record("a"), world.clock())
    writer.write(base)
    seen: list[object] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.append(yaml.safe_load(writer.path("a").read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(50):
            writer.write({**base, "message": "x" * (i * 37 % 4000)})
    finally:
        stop.set()
        reader.join()
    assert seen and all(isinstance(d, dict) and d["name"] == "a" for d in seen)


def test_status_file_names_cannot_leave_the_folder(tmp_path: Path) -> None:
    writer = StatusWriter(tmp_path)
    for name in ("../a", "a/b", ""):
        with pytest.raises(ValueError):
            writer.path(name)


# ---- the lock ------------------------------------------------------------------------------

HOLD = """
import sys
from pathlib import Path
from tfdeclare.shell.lock import ControllerLock
lock = ControllerLock(Path(sys.argv[1]))
lock.acquire("daemon", source="folder specs")
print("held", flush=True)
sys.stdin.read()  # until the test closes stdin (or kills us)
"""


def hold_in_another_process(state: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_second_holder_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path)
    try:
        with pytest.raises(LockHeld) as refused:
            ControllerLock(tmp_path).acquire("apply")
        assert refused.value.holder["pid"] == holder.pid
        assert f"pid {holder.pid}" in str(refused.value) and "daemon" in str(refused.value)
        assert ControllerLock(tmp_path).holder()["source"] == "folder specs"  # type: ignore[index]
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_free_once_its_holder_dies(tmp_path: Path) -> None:
    holder = hold_in_another_process(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)  # no chance to clean up
    holder.wait()
    assert ControllerLock(tmp_path).holder() is None
    with ControllerLock(tmp_path) as lock:
        lock.acquire("apply")
        assert lock.holder()["pid"] == os.getpid()  # type: ignore[index]


def test_release_frees_it_and_children_never_inherit_it(tmp_path: Path) -> None:
    lock = ControllerLock(tmp_path)
    lock.acquire("apply")
    with pytest.raises(LockHeld):
        ControllerLock(tmp_path).acquire("daemon")  # another descriptor, even in this process
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, close_fds=False
    )
    try:
        lock.release()
        other = ControllerLock(tmp_path)
        other.acquire("daemon")  # the child still runs, and does not hold the lock
        other.release()
    finally:
        child.kill()
        child.wait()
