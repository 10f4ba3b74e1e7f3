"""``make demo``'s own steps (the Makefile's recipe, run by make) with quick jobs instead of the
TensorFlow examples: it uses tfdeclare's default folders, so a plain ``tfdeclare status``
afterwards shows its jobs; it prints how to look at them; a second run starts its own jobs
from scratch and leaves other jobs in the folders alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, cli, job_yaml, kill_leftovers

VENV = Path(sys.executable).parent.parent  # the environment running the tests (make's .venv)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _make_demo(folder: Path) -> subprocess.CompletedProcess[str]:
    """The Makefile's `demo` target run in ``folder`` (its specs/), with this environment as
    the venv and without remaking it (``-o``: the stamp counts as up to date)."""
    if shutil.which("make") is None:
        pytest.fail("make is needed")
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(REPO / "Makefile"), "-o", f"{VENV}/.installed",
         f"VENV={VENV}", "demo"],
        cwd=folder, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_make_demo_leaves_its_jobs_where_status_looks_and_says_how_to_look(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    for name in ("quick-a", "quick-b"):
        (tmp_path / "specs" / f"{name}.yaml").write_text(
            job_yaml(name, workers=2, command='[python, -c, "print(42)"]')
        )
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "mine.yaml").write_text(job_yaml("mine", command="[sleep, '60']"))
    try:
        assert cli("apply", "mine", cwd=tmp_path).returncode == 0  # a job of the user's own
        first = _make_demo(tmp_path)
        assert first.returncode == 0, first.stdout + first.stderr
        tfd = f"{VENV}/bin/tfdeclare"
        assert (
            "The demo's jobs (quick-a quick-b) are in .tfdeclare/ and status/ here, tfdeclare's "
            f"defaults. To look at them:\n  {tfd} status\n  {tfd} status quick-a\n  {tfd} logs quick-a\n"
            f"  {tfd} logs quick-a --task worker-0\nTo remove them: {tfd} delete quick-a quick-b\n"
        ) in first.stdout

        shown = cli("status", cwd=tmp_path)  # no option: the demo's jobs are there
        rows = {line.split()[0]: line.split()[1] for line in shown.stdout.splitlines()[1:]}
        assert rows == {"quick-a": "Succeeded", "quick-b": "Succeeded", "mine": "Running"}, shown.stdout
        assert cli("logs", "quick-a", "--task", "worker-1", cwd=tmp_path).stdout == "42\n"
        started = (tmp_path / "status" / "quick-a.yaml").read_text()

        again = _make_demo(tmp_path)  # from scratch: its jobs run again, the user's job stays
        assert again.returncode == 0, again.stdout + again.stderr
        # the user's job was applied from another file: outside the demo's paths, not an orphan of them
        assert "quick-a will be created" in again.stdout and "1 outside the paths given" in again.stdout
        assert "? mine" not in again.stdout and "mine will be" not in again.stdout
        assert (tmp_path / "status" / "quick-a.yaml").read_text() != started
        assert "Running" in cli("status", "mine", cwd=tmp_path).stdout
    finally:
        cli("delete", "--all", cwd=tmp_path)
        kill_leftovers(tmp_path)


def test_delete_ignore_not_found_deletes_what_is_there_and_names_no_error(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "a.yaml").write_text(job_yaml("here", command="[sleep, '60']"))
    try:
        assert cli("apply", "specs", cwd=tmp_path).returncode == 0
        refused = cli("delete", "here", "gone", cwd=tmp_path)
        assert refused.returncode == 1 and "no job named 'gone'" in refused.stderr
        assert cli("apply", "specs", cwd=tmp_path).returncode == 0
        quiet = cli("delete", "gone", "here", "--ignore-not-found", "-o", "json", cwd=tmp_path)
        assert quiet.returncode == 0, quiet.stderr
        assert (
            '"deleted": [\n    "here"\n  ]' in quiet.stdout
            and '"missing": [\n    "gone"\n  ]' in quiet.stdout
        )
        assert cli("status", cwd=tmp_path).stdout.startswith("No jobs in state folder ")
    finally:
        kill_leftovers(tmp_path)
