"""The machine-wide folder of port locks is in the temp folder, where every user can write:
what another user plants there (links, FIFOs, hard links, a folder of their own, a lock they
hold) never has tfdeclare create or change a file elsewhere, never hangs it, and at worst
costs a port or the sharing (then said in the task's log).

Run as root (as the tests run here), with the planted files owned by ``nobody``; each test
uses a private temp folder, never the real machine-wide one other tests share.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import worker_ports
from tests.waiting import wait_until
from tfdeclare.backends.local import ports
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey, TaskLaunch
from tfdeclare.core.spec.resources import Resources

NOBODY = 65534
# Planting another user's files needs root; under CI=true (root, .ci/run) it runs, and fails
# rather than skips if it cannot.
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true", reason="plants another user's files: needs root"
)
PORT = 41234
SHARED_NAME = "tfdeclare-ports"  # the machine-wide folder's name in the temp folder


@pytest.fixture
def base() -> Iterator[Path]:
    """A temp folder every user may enter (like the machine's), private to this test."""
    folder = Path(tempfile.mkdtemp(prefix="tfd-ports-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_nobody(path: Path) -> Path:
    os.lchown(path, NOBODY, NOBODY)
    return path


def shared(base: Path, mode: int = 0o1777, owner: int = 0) -> Path:
    folder = base / SHARED_NAME
    folder.mkdir()
    folder.chmod(mode)
    os.chown(folder, owner, owner)
    return folder


def take(port: int, folder: Path) -> int:
    fd = ports.reserve(port, folder)
    assert fd is not None, f"port {port} could not be reserved"
    return fd


@ROOT_ONLY
@pytest.mark.parametrize("victim_exists", [False, True])
def test_a_planted_lock_link_creates_nothing_where_it_points(base: Path, victim_exists: bool) -> None:
    folder = shared(base)
    victim = base / "victim" / "nologin"
    victim.parent.mkdir()
    if victim_exists:
        victim.write_text("kept\n")
    subprocess.run(
        ["ln", "-s", str(victim), str(folder / f"{PORT}.lock")], user=NOBODY, group=NOBODY, check=True
    )
    assert (folder / f"{PORT}.lock").is_symlink()

    assert ports.reserve(PORT, folder) is None, "the port whose lock is a link is skipped"
    if victim_exists:
        assert victim.read_text() == "kept\n"
    else:
        assert not victim.exists(), "no file created where the link points"
    fd = take(PORT + 1, folder)  # the folder itself is still used: root's, sticky
    os.close(fd)
    assert ports.fallback(folder) is None
    assert (folder / f"{PORT + 1}.lock").is_file()


@ROOT_ONLY
def test_a_hard_link_a_fifo_or_a_folder_as_lock_file_skips_the_port_at_once(base: Path) -> None:
    folder = shared(base)
    victim = base / "victim"
    victim.write_text("kept\n")
    victim.chmod(0o600)
    os.link(victim, folder / f"{PORT}.lock")  # what protected_hardlinks would not stop for a file of theirs
    os.mkfifo(folder / f"{PORT + 1}.lock")
    as_nobody(folder / f"{PORT + 1}.lock")
    (folder / f"{PORT + 2}.lock").mkdir()
    as_nobody(folder / f"{PORT + 2}.lock")
    answers: list[object] = []
    asking = threading.Thread(
        target=lambda: answers.extend(ports.reserve(p, folder) for p in (PORT, PORT + 1, PORT + 2)),
        daemon=True,
    )
    asking.start()
    asking.join(60)  # an open that blocked on the FIFO would never return
    assert not asking.is_alive(), "a FIFO never blocks the reservation"
    assert answers == [None, None, None]
    assert victim.read_text() == "kept\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600


@ROOT_ONLY
def test_a_lock_another_user_holds_keeps_the_port_theirs_until_they_let_go(base: Path) -> None:
    folder = shared(base)
    mine = take(PORT, folder)  # a lock file of theirs, as it would be
    os.close(mine)
    as_nobody(folder / f"{PORT}.lock")
    fd = os.open(folder / f"{PORT}.lock", os.O_RDONLY)
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    holder = subprocess.Popen(["sleep", "60"], user=NOBODY, group=NOBODY, pass_fds=(fd,))
    os.close(fd)  # their process alone holds it now
    try:
        assert ports.reserve(PORT, folder) is None
    finally:
        holder.kill()
        holder.wait()
    os.close(take(PORT, folder))


@ROOT_ONLY
@pytest.mark.parametrize("how", ["link", "theirs", "not-sticky"])
def test_an_untrusted_shared_folder_falls_back_to_a_private_one(base: Path, how: str) -> None:
    evil = base / "evil"
    evil.mkdir(mode=0o777)
    as_nobody(evil)
    victim = base / "victim"
    folder = base / SHARED_NAME
    if how == "link":
        folder.symlink_to(evil)
        as_nobody(folder)
    elif how == "theirs":
        folder = shared(base, owner=NOBODY)
        (folder / f"{PORT}.lock").symlink_to(victim)
        as_nobody(folder / f"{PORT}.lock")
    else:
        folder = shared(base, mode=0o777)
    os.close(take(PORT, folder))

    assert not victim.exists() and list(evil.iterdir()) == []
    mine = base / f"{SHARED_NAME}-{os.geteuid()}"
    assert (mine / f"{PORT}.lock").is_file()
    assert stat.S_IMODE(mine.stat().st_mode) == 0o700 and mine.stat().st_uid == os.geteuid()
    why = ports.fallback(folder)
    assert why is not None and str(folder) in why and str(mine) in why


@ROOT_ONLY
def test_when_the_private_folder_is_squatted_too_a_folder_of_this_process_is_used(base: Path) -> None:
    folder = shared(base, owner=NOBODY)
    squatted = base / f"{SHARED_NAME}-{os.geteuid()}"
    squatted.symlink_to(base / "elsewhere")
    as_nobody(squatted)
    fd = take(PORT, folder)
    again = ports.reserve(PORT, folder)
    os.close(fd)
    assert again is None, "the fallback folder is the same one at the next reservation"
    assert not (base / "elsewhere").exists()
    why = ports.fallback(folder)
    assert why is not None and "no other controller" in why


def test_a_folder_made_for_the_locks_is_shared_and_sticky(base: Path) -> None:
    folder = base / SHARED_NAME
    os.close(take(PORT, folder))
    info = folder.stat()
    assert stat.S_IMODE(info.st_mode) == 0o1777 and info.st_uid == os.geteuid()
    assert ports.fallback(folder) is None
    # two controllers (one per process) see each other's reservations
    held = take(PORT, folder)
    code = f"from tfdeclare.backends.local import ports; from pathlib import Path; print(ports.reserve({PORT}, Path({str(folder)!r})))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    os.close(held)
    assert other.stdout.strip() == "None"


@ROOT_ONLY
@pytest.mark.slow
def test_the_backend_launches_anyway_and_says_so_in_the_task_log(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = shared(base, owner=NOBODY)  # the machine-wide folder, made by another user
    monkeypatch.setattr(tempfile, "tempdir", str(base))
    assert ports.ports_dir() == folder
    first, last = worker_ports(5)
    capacity = LocalCapacity(cpus=2, mem_mib=1024, gpus=0, port_first=first, port_last=last)
    backend = LocalBackend(tmp_path / "state", capacity)
    key = TaskKey(Role.WORKER, 0)
    small = Resources(0.1, 64, 0)
    try:
        placed = backend.place(GangRequest("j", 0, (SlotRequest(key, small),)))
        assert isinstance(placed, Placement)
        slot = placed.slots[0]
        launch = TaskLaunch(
            task_id="j.u.worker-0.1", job="j", key=key, attempt=0, spec_hash="s", config_hash="c",
            argv=(sys.executable, "-c", "print('ran')"), env=(), resources=small, slot=slot,
        )  # fmt: skip
        backend.launch(placed, [launch])
        wait_until(lambda: any(t.state is TaskState.SUCCEEDED for t in backend.observe()), 30)
        text = backend.read_log("j.u.worker-0.1").data.decode()
        assert "ran" in text
        assert f"port {slot.port}: the shared folder of port locks {folder} is not used" in text
        assert "owned by another user (uid 65534)" in text
        assert list(folder.iterdir()) == []
    finally:
        backend.purge("j")
        backend.close()
