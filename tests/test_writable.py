"""``shell.writable.folder_problem`` on real folders: a writable one, one not made yet, a
read-only and a full file system (tmpfs mounts, as root), and a folder root cannot write (``chattr +i``),
also where ``os.access`` would say it can. What it says is what ``/healthz`` shows (``tests/test_write_failures_shown.py``
runs those through the daemon)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.components import missing
from tfdeclare.shell.writable import MIN_FREE_BYTES, folder_problem


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (root only)."""
    folder = tmp_path / "mnt"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], check=False)
    if mounted.returncode != 0:
        missing("cannot mount a tmpfs here (not root)")  # CI runs as root
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-R", "-i", str(folder)], check=False, capture_output=True)
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_writable_folder_and_one_not_made_yet_have_no_problem(tmp_path: Path) -> None:
    assert folder_problem(tmp_path) is None
    assert folder_problem(tmp_path / "not" / "made" / "yet") is None  # judged by tmp_path
    assert not (tmp_path / "not").exists(), "the check makes no folder"
    assert os.listdir(tmp_path) == [], "and leaves no file behind"


def test_a_read_only_file_system_is_named(tmpfs: Path) -> None:
    (tmpfs / "status").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    assert folder_problem(tmpfs / "status") == f"{tmpfs / 'status'} is on a read-only file system"
    assert (
        folder_problem(tmpfs / "state" / "jobs")
        == f"{tmpfs / 'state' / 'jobs'} is on a read-only file system"
    )
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)
    assert folder_problem(tmpfs / "status") is None


def test_a_full_file_system_is_named(tmpfs: Path) -> None:
    filler = tmpfs / "filler"
    try:
        with open(filler, "wb") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError:
        pass  # full
    problem = folder_problem(tmpfs)
    assert problem is not None and problem.startswith(f"{tmpfs}: no space left on its disk ("), problem
    free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
    assert free < MIN_FREE_BYTES
    filler.unlink()
    assert folder_problem(tmpfs) is None


def test_a_folder_root_cannot_write_is_named(tmpfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.geteuid() != 0:
        missing("needs root (chattr +i)")
    folder = tmpfs / "state"
    folder.mkdir()
    marked = subprocess.run(["chattr", "+i", str(folder)], check=False, capture_output=True)
    if marked.returncode != 0:
        missing(f"chattr +i does not work here: {marked.stderr.decode().strip()}")
    with pytest.raises(PermissionError):
        (folder / "x").write_text("x")  # root can make nothing there
    assert folder_problem(folder) == f"{folder} is not writable (permission denied)"
    assert folder_problem(folder / "jobs") == f"{folder / 'jobs'} is not writable (permission denied)"
    # where access() answers yes all the same (a server that squashes root decides only when
    # asked to make a file): the file the check makes finds it
    monkeypatch.setattr(os, "access", lambda *_args, **_kwargs: True)
    assert folder_problem(folder) == f"{folder} is not writable (Operation not permitted)"
    subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert folder_problem(folder) is None
    assert os.listdir(folder) == [], "no probe file is left behind"
