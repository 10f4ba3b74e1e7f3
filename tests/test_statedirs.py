"""The per-user registry of state folders (``tfdeclare.shell.statedirs``): a folder of the
user's own, bounded, pruned, read as evidence (a damaged, oversized, linked or shared registry
is never trusted), and the other folders' records read without their locks."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from tests.records_db import put_row
from tfdeclare.core.enums import Phase
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell import statedirs
from tfdeclare.shell.store import StateStore


def _env(folder: Path) -> dict[str, str]:
    return {statedirs.ENV: str(folder)}


def _entries(folder: Path) -> list[str]:
    return [e["path"] for e in json.loads((folder / statedirs.FILE).read_text())["stateDirs"]]


def test_remembered_folders_are_kept_newest_first_bounded_and_pruned(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    folders = [tmp_path / f"s{i}" for i in range(statedirs.MAX_ENTRIES + 5)]
    for i, folder in enumerate(folders):
        folder.mkdir()
        statedirs.remember(folder, "local", float(i), _env(registry))
    kept = _entries(registry)
    assert len(kept) == statedirs.MAX_ENTRIES and kept[0] == str(folders[-1]), "the newest first, bounded"
    assert (registry.stat().st_mode & 0o777) == 0o700
    assert ((registry / statedirs.FILE).stat().st_mode & 0o777) == 0o600
    folders[-2].rmdir()  # gone: dropped at the next write
    statedirs.remember(folders[-1], "local", 1000.0, _env(registry))
    assert str(folders[-2]) not in _entries(registry)
    assert statedirs.known(folders[-1], _env(registry))[0] == str(folders[-3])


def test_a_damaged_or_oversized_registry_is_not_trusted(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir(mode=0o700)
    (registry / statedirs.FILE).write_text('{"stateDirs": [{"path": "relative/x"}, {"path": 3}, "x"]}')
    assert statedirs.known(tmp_path / "here", _env(registry)) == [], "only absolute paths count"
    (registry / statedirs.FILE).write_text("{not json")
    with pytest.raises(statedirs.RegistryError, match="is not JSON"):
        statedirs.known(tmp_path / "here", _env(registry))
    statedirs.remember(tmp_path, "local", 1.0, _env(registry))  # rewritten whole
    assert _entries(registry) == [str(tmp_path)]
    (registry / statedirs.FILE).write_bytes(b" " * (statedirs.MAX_BYTES + 1))
    with pytest.raises(statedirs.RegistryError, match="larger than"):
        statedirs.known(tmp_path / "here", _env(registry))


def test_a_registry_folder_others_can_write_or_a_linked_file_is_not_used(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    registry.mkdir(mode=0o700)
    os.chmod(registry, 0o777)
    with pytest.raises(statedirs.RegistryError, match="can be written by others"):
        statedirs.remember(tmp_path, "local", 1.0, _env(registry))
    os.chmod(registry, 0o700)
    elsewhere = tmp_path / "planted.json"
    elsewhere.write_text(json.dumps({"stateDirs": [{"path": str(tmp_path), "lastUsed": 1}]}))
    (registry / statedirs.FILE).symlink_to(elsewhere)
    with pytest.raises(statedirs.RegistryError, match="cannot read"):
        statedirs.known(tmp_path / "here", _env(registry))


def _record(name: str, **changes: object) -> JobRecord:
    canonical = {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"replicas": {"worker": {"count": 1, "command": ["true"]}}},
    }
    record = JobRecord(
        name=name, uid="u", canonical=canonical, spec_hash=fingerprint(canonical), backend="local"
    )
    return record.evolve(**changes)


@pytest.mark.parametrize("others", [0, 100], ids=["each-record-opened", "each-folder-listed-once"])
def test_elsewhere_reads_other_folders_records_without_their_lock(tmp_path: Path, others: int) -> None:
    """(With more jobs to look for than ``_LISTED_FROM``, each other folder is listed once
    instead of a record opened a job: the same ones are found.)"""
    registry, here, other = tmp_path / "registry", tmp_path / "here", tmp_path / "other"
    store = StateStore(other)
    running, deleting = _record("run", phase=Phase.RUNNING), _record("gone", deleting=True)
    done = _record("done", phase=Phase.SUCCEEDED)
    for record in (running, deleting, done, _record("changed", phase=Phase.FAILED)):
        store.save(record)
    statedirs.remember(other, "local", 1.0, _env(registry))
    statedirs.remember(here, "local", 2.0, _env(registry))
    (other / "lock").write_text("")
    with open(other / "lock", "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another controller holds it: only read, never waited on
        creates = {
            "run": running.spec_hash,
            "gone": deleting.spec_hash,
            "done": done.spec_hash,
            "changed": "another spec",
            "new": "x",
            **{f"new-{i}": "x" for i in range(others)},
        }
        assert (len(creates) > statedirs._LISTED_FROM) is (others > 0)
        found, problems = statedirs.elsewhere(creates, here, _env(registry))
    assert problems == []
    assert {(e.name, e.live) for e in found} == {("run", True), ("done", False), ("changed", True)}
    assert (
        next(e for e in found if e.name == "run").describe()
        == f"state folder {other} (backend local, Running)"
    )
    put_row(other, "run", "{not json")
    found, problems = statedirs.elsewhere(creates, here, _env(registry))
    assert len(problems) == 1 and "records.sqlite: job run: cannot read job record" in problems[0], problems
    assert {e.name for e in found} == {"done", "changed"}
    store.close()
    for leftover in other.glob("records.sqlite*"):
        leftover.unlink()
    (other / "records.sqlite").write_bytes(b"not a database at all")
    found, problems = statedirs.elsewhere(creates, here, _env(registry))
    assert found == [] and len(problems) == 1 and str(other / "records.sqlite") in problems[0], problems
