"""The record database (``shell/store.py``): an older state folder's ``jobs/<name>.json`` files
are read as they are and adopted by the first write, also when that write is killed half way;
a writer killed at any moment leaves one committed state that the next reader and writer take;
a reader without the lock sees whole batches while another process writes; a damaged
database is named, never a traceback; the files stay private. Real processes, real SQLite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli
from tests.records_db import put_row
from tests.waiting import wait_until
from tfdeclare.core.enums import Phase
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell.store import DATABASE, StateError, StateStore, StoreUnreadable


def _record(name: str, message: str = "") -> JobRecord:
    canonical = {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"replicas": {"worker": {"count": 1, "command": ["true"]}}, "env": {"TOKEN": "secret"}},
    }
    record = JobRecord(
        name=name, uid="u", canonical=canonical, spec_hash=fingerprint(canonical), backend="local"
    )
    return record.evolve(message=message, phase=Phase.PENDING)


def _old_folder(state: Path, names: list[str], message: str = "old") -> None:
    """A state folder as a release before the database left it: one JSON file a job."""
    jobs = state / "jobs"
    jobs.mkdir(parents=True)
    for name in names:
        (jobs / f"{name}.json").write_text(json.dumps(_record(name, message).to_json(), indent=2))


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    """``code`` run by a Python process of its own with ``args``, from the repository."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


# ---- adopting an older state folder ------------------------------------------------------------


def test_an_older_folder_is_read_as_it_is_then_adopted_by_the_first_write(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _old_folder(state, ["a", "b", "c"])
    (state / "jobs" / "torn.json").write_text("{not json")
    reader = StateStore(state)
    assert sorted(reader.records()) == ["a", "b", "c"] and reader.records()["a"].message == "old"
    assert "torn.json" in reader.unreadable["torn"]
    assert not (state / DATABASE).exists(), "reading makes nothing"

    writer = StateStore(state, exclusive=True)
    writer.records()
    writer.save(_record("d", "new"))
    assert sorted(p.name for p in (state / "jobs").iterdir()) == ["torn.json"], "adopted, the torn one kept"
    fresh = StateStore(state)
    assert {n: r.message for n, r in fresh.records().items()} == {
        "a": "old",
        "b": "old",
        "c": "old",
        "d": "new",
    }
    assert sorted(fresh.unreadable) == ["torn"], "never dropped: still said"
    (state / "jobs" / "torn.json").write_text(json.dumps(_record("torn", "mended").to_json()))
    writer.save(_record("a", "changed"))
    assert not (state / "jobs").exists(), "the mended one adopted too, the folder gone once empty"
    assert {n: r.message for n, r in StateStore(state).records().items()} == {
        "a": "changed",
        "b": "old",
        "c": "old",
        "d": "new",
        "torn": "mended",
    }


def test_a_row_wins_over_a_file_left_by_an_adoption_cut_short(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _old_folder(state, ["a", "b"])
    StateStore(state, exclusive=True).save(_record("c"))  # adopted a and b
    (state / "jobs").mkdir()
    (state / "jobs" / "a.json").write_text(json.dumps(_record("a", "stale file").to_json()))
    assert StateStore(state).records()["a"].message == "old", "the row, not the file"
    assert StateStore(state).load("a").message == "old"  # type: ignore[union-attr]
    StateStore(state, exclusive=True).delete("a")
    assert "a" not in StateStore(state).names() and not (state / "jobs" / "a.json").exists(), "never back"


def test_an_adoption_killed_at_any_moment_loses_no_job_and_runs_none_twice(tmp_path: Path) -> None:
    names = [f"job-{i:04d}" for i in range(1500)]

    def files_left(state: Path) -> int:
        try:
            return len(os.listdir(state / "jobs"))
        except FileNotFoundError:
            return 0

    # killed at four moments of the adoption, each seen from outside: the database made (its
    # rows not yet committed, or being), the old files' removal started, half of them gone,
    # all of them gone
    moments = (
        lambda state: (state / DATABASE).exists(),
        lambda state: files_left(state) < len(names),
        lambda state: files_left(state) < len(names) // 2,
        lambda state: files_left(state) == 0,
    )
    for attempt, moment in enumerate(moments):
        state = tmp_path / f"state-{attempt}"
        _old_folder(state, names)
        child = _python(
            f"""
            from pathlib import Path
            from tfdeclare.shell.store import StateStore
            store = StateStore(Path({str(state)!r}), exclusive=True)
            print("ready", flush=True)
            for n in range(1000):
                store.delete_many(["nothing-{{}}".format(n)])
            """
        )
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        wait_until(lambda: moment(state), 60, what=f"moment {attempt} of the adoption", interval=0.001)  # noqa: B023
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        seen = StateStore(state).records()
        assert sorted(seen) == names, f"killed at moment {attempt}: every job, once"
        assert {r.message for r in seen.values()} == {"old"}
        writer = StateStore(state, exclusive=True)
        writer.save(_record("after"))
        assert sorted(writer.records()) == sorted([*names, "after"]) and not (state / "jobs").exists()


# ---- crashes, readers, damage --------------------------------------------------------------


_BATCHES = """
    import sys
    from pathlib import Path
    from tests.test_store import _record
    from tfdeclare.shell.store import StateStore
    store = StateStore(Path(sys.argv[1]), exclusive=True)
    names = ["job-{:04d}".format(i) for i in range(int(sys.argv[2]))]
    print("ready", flush=True)
    for batch in range(1, 100000):
        failed = store.save_many([_record(name, "batch {}".format(batch)) for name in names])
        assert not failed, failed
        print("committed", batch, flush=True)
"""


def _writer(state: Path, jobs: int) -> subprocess.Popen[str]:
    child = _python(_BATCHES, str(state), str(jobs))
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def test_a_writer_killed_mid_batch_leaves_one_whole_batch_that_the_next_opener_takes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for commits in (0, 1, 2, 4):  # killed in the batch after this many commits
        child = _writer(state, 800)
        assert child.stdout is not None
        for batch in range(1, commits + 1):
            assert child.stdout.readline() == f"committed {batch}\n"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        seen = StateStore(state).records()  # a reader first: it takes what the last commit left
        batches = {r.message for r in seen.values()}
        assert len(batches) <= 1, f"killed after {commits} commits: a mix of batches {sorted(batches)[:3]}"
        assert not seen or len(seen) == 800
        writer = StateStore(state, exclusive=True)
        assert writer.save_many([_record("job-0000", "after")]) == {}, "writable again at once"
        assert StateStore(state).load("job-0000").message == "after"  # type: ignore[union-attr]
        writer.close()


def test_a_reader_without_the_lock_sees_whole_batches_while_another_process_writes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    child = _writer(state, 500)
    try:
        reader = StateStore(state)
        seen: set[str] = set()
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            records = reader.records()
            assert reader.unreadable == {}
            batches = {r.message for r in records.values()}
            assert len(batches) <= 1 and (not records or len(records) == 500), sorted(batches)[:3]
            seen |= batches
            one = reader.load("job-0123")
            assert one is None or one.message.startswith("batch ")
        assert len(seen) >= 2, f"the writer went on while read: {sorted(seen)}"
    finally:
        child.kill()
        child.wait(timeout=60)


def test_deleted_jobs_leave_no_bytes_behind_and_their_space_is_given_back(tmp_path: Path) -> None:
    """A deleted job's record (its spec's environment may hold a secret) is not left in the
    file's free pages, and deleting most jobs shrinks the file (it stayed at its largest)."""
    state = tmp_path / "state"
    store = StateStore(state)
    padding = "p" * 3000  # a record of a few KiB, as a job with a real spec's is

    names = [f"job-{n:04d}" for n in range(1500)]
    assert store.save_many([_record(name, f"{padding} marker-{name}-end") for name in names]) == {}
    full = (state / DATABASE).stat().st_size
    assert store.delete_many(names[:1490]) == {}
    store.delete(names[1490])
    data = (state / DATABASE).read_bytes()
    assert (state / DATABASE).stat().st_size < full / 10, (full, len(data))
    assert b"marker-job-0000-end" not in data and b"marker-job-1490-end" not in data
    assert b"marker-job-1499-end" in data  # what is kept is kept
    journal = state / f"{DATABASE}-journal"
    assert not journal.exists() or b"marker-job-0000-end" not in journal.read_bytes()
    again = StateStore(state)  # another process's view: the jobs kept, none of the deleted
    assert sorted(again.records()) == names[1491:]
    store.close()
    again.close()


def test_a_damaged_database_is_named_and_a_damaged_row_is_its_jobs_alone(tmp_path: Path) -> None:
    project = tmp_path
    state = project / ".tfdeclare"
    store = StateStore(state, exclusive=True)
    store.save_many([_record("a"), _record("b")])
    put_row(state, "b", b"\x00\xff not json")
    reader = StateStore(state)
    assert sorted(reader.records()) == ["a"] and "job b: cannot read job record" in reader.unreadable["b"]
    with pytest.raises(StateError, match=r"records\.sqlite: job b"):
        reader.load("b")
    store.close()
    reader.close()
    for made in state.glob(f"{DATABASE}*"):
        made.unlink()
    (state / DATABASE).write_bytes(b"this is not a database, it was overwritten" * 100)
    with pytest.raises(StoreUnreadable, match=r"records\.sqlite: cannot read the job records"):
        StateStore(state).records()
    for command in (["status"], ["plan", "specs"], ["delete", "--all"]):
        (project / "specs").mkdir(exist_ok=True)
        done = cli(*command, cwd=project)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        assert f"{state / DATABASE}: cannot read the job records" in done.stderr, (command, done.stderr)


def test_the_database_is_private_whatever_the_umask_and_never_made_through_a_link(tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = os.umask(0)
    try:
        StateStore(state, exclusive=True).save(_record("a"))
    finally:
        os.umask(before)
    made = sorted(state.glob(f"{DATABASE}*"))
    assert made and all(p.stat().st_mode & 0o777 == 0o600 for p in made), [
        oct(p.stat().st_mode) for p in made
    ]
    (state / DATABASE).chmod(0o644)  # by hand, or an older copy
    StateStore(state, exclusive=True).save(_record("b"))
    assert (state / DATABASE).stat().st_mode & 0o777 == 0o600, "made private again by the next writer"
    other = tmp_path / "other"
    other.mkdir()
    target = tmp_path / "elsewhere.db"
    (other / DATABASE).symlink_to(target)
    failed = StateStore(other, exclusive=True).save_many([_record("a")])
    assert str(other / DATABASE) in str(failed["a"]) and not target.exists()
