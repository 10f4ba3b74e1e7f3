"""The chaos suite (tests/chaos.py) in ``make test``: a short seeded run per backend, one
iteration of each fault kind, must break no invariant; and its checks are shown to catch what
they look for. ``make chaos`` runs the long version (100 iterations per backend)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.chaos import PROBLEMS, TASK, Chaos, Tally, report
from tests.conftest import processes_of
from tests.mesos_fixtures import eventually

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["local", "mesos"])
def test_a_short_seeded_chaos_run_breaks_no_invariant(tmp_path: Path, backend: str) -> None:
    lines: list[str] = []
    chaos = Chaos(tmp_path / "project", backend, seed=12, log=lines.append)
    try:
        tallies = chaos.run(len(chaos.faults()))
    finally:
        chaos.close()
    summary = report(backend, tallies, 0, chaos.notes)
    assert set(tallies) == set(chaos.faults()), summary
    assert all(t.iterations == 1 and t.survived == 1 for t in tallies.values()), "\n".join([*lines, summary])
    assert chaos.seen_files, "the tasks wrote their files"
    assert chaos.unfelt == 0, "every fault of the status folder stopped a write"


def test_the_checks_catch_a_duplicate_a_lost_file_and_a_corrupt_status_file(tmp_path: Path) -> None:
    chaos = Chaos(tmp_path / "project", "local", seed=1, log=lambda _: None)
    try:
        chaos.run(0)  # two jobs converged: alpha serving, delta Succeeded
        assert chaos.tallies == {}
        tally = Tally()
        live = len(chaos.live())
        job, role, index, _ = next(t for t in chaos.live() if t[0] == "alpha")
        pid, environ = next(
            (p, env)
            for p, env in processes_of(chaos.root, TASK).items()
            if (env["TFDECLARE_JOB"], env["TFDECLARE_ROLE"], env["TFDECLARE_INDEX"])
            == (job, role, str(index))
        )
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [a.decode() for a in handle.read().split(b"\0") if a]
        second = subprocess.Popen(argv, env=environ, cwd=environ["TFDECLARE_WORK_DIR"])
        try:
            eventually(lambda: len(chaos.live()) == live + 1)
            chaos.count_duplicates(tally, per_attempt=True)
        finally:
            second.kill()
            second.wait()
        assert tally.problems["duplicates"] == 1

        next(iter(sorted(chaos.seen_files))).unlink()
        (chaos.root / "status" / "alpha.yaml").write_text(
            "apiVersion: tfdeclare/v1\nkind: TFJobStatus\nname: al"
        )
        chaos.check_status_files(tally)
        assert tally.problems["corrupt_status"] == 1
        chaos.recover(tally)
        assert tally.problems["lost_task_files"] == 1
        assert sum(tally.problems[p] for p in PROBLEMS) == 3
    finally:
        chaos.close()


def test_a_status_file_deleted_while_the_check_reads_the_folder_is_not_corrupt(tmp_path: Path) -> None:
    """A background controller that a command started as it let go may finish a deletion
    while the check walks the status folder: a file listed and then gone was deleted whole
    (the long run of 2026-12-06 counted one such file as corrupt). Staged with a name that
    lists but cannot be read (a link to nothing)."""
    chaos = Chaos(tmp_path / "project", "local", seed=1, log=lambda _: None)
    try:
        (chaos.root / "status" / "gone.yaml").symlink_to(tmp_path / "nothing")
        tally = Tally()
        assert chaos.check_status_files(tally) == {}
        assert tally.problems["corrupt_status"] == 0
    finally:
        chaos.close()
