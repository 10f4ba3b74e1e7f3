"""What lies in the state and status folders is evidence, not authority (security review).

The state folder: the controller lock was opened through a link planted at ``<state-dir>/lock``
(the lock's JSON written over the file it pointed to), a link planted for a sub-folder
(``local``) had task files, logs and work folders made where it led, and a folder any user
could write was used silently. Now every command that takes the lock first checks the folder
and its own sub-folders (real folders of this user alone, no link in them) and opens the lock
with ``O_NOFOLLOW``: each is refused, exit 1, naming the path and the fix, nothing written.

The status folder (meant to be read by other tools, possibly shared): a FIFO at a status
file's name hung ``status`` and ``apply``, a link to ``/dev/zero`` made them read until memory
ran out. Now a status file is read only when it is a regular file (no link followed, no FIFO
opened for long), bounded; anything else is named in a warning and the job is shown from its
record, and ``apply`` replaces it (a rename: never written through).

Each runs the real command as a process, with a timeout (a regression fails, never hangs) and,
where the old code read ``/dev/zero``, an address-space limit (it fails, not the machine).
"""

from __future__ import annotations

import grp
import os
import pwd
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SETTINGS_ENV, job_yaml

pytestmark = pytest.mark.e2e

MEMORY_LIMIT = 2 * 1024**3  # address space of a command: plenty for these, not for /dev/zero


def run(
    *args: str, cwd: Path, timeout: float = 60, umask: int | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m tfdeclare ARGS`` as ``tests.conftest.cli`` runs it, with its address space
    limited (and ``umask`` set, when given)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        if umask is not None:
            os.umask(umask)

    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    return subprocess.run(
        [sys.executable, "-m", "tfdeclare", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "PYTHONUNBUFFERED": "1"},
        check=False,
        preexec_fn=limit,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "j.yaml").write_text(job_yaml("jc", command="['true']"))
    return tmp_path


def assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("tfdeclare: error: the state folder"), result.stderr
    for word in words:
        assert word in line, (word, line)


# ---- the state folder --------------------------------------------------------------------------


def test_a_link_planted_at_the_lock_is_refused_and_nothing_is_written_through_it(project: Path) -> None:
    state = project / "st"
    state.mkdir(mode=0o700)
    victim = project / "victim"
    victim.write_text("precious victim data\n")
    (state / "lock").symlink_to("../victim")
    result = run("--state-dir", "st", "apply", "j.yaml", cwd=project)
    assert_refused(result, f"{state / 'lock'} is a link", "remove or move")
    assert victim.read_text() == "precious victim data\n"
    assert sorted(p.name for p in state.iterdir()) == ["lock"], "nothing made in the state folder"
    assert not (project / "status").exists()


@pytest.mark.parametrize("sub", ["local", "local/work", "jobs"])
def test_a_link_planted_for_a_sub_folder_is_refused_and_nothing_is_made_where_it_leads(
    project: Path, sub: str
) -> None:
    state = project / "st"
    (state / sub).parent.mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    elsewhere = project / "elsewhere"
    elsewhere.mkdir()
    (state / sub).symlink_to(elsewhere)
    result = run("--state-dir", "st", "apply", "j.yaml", cwd=project)
    assert_refused(result, f"{state / sub} is a link")
    assert list(elsewhere.iterdir()) == [], "no task file, log or work folder made there"
    assert not (state / "lock").exists() and not (state / "records.sqlite").exists()


OTHER_GROUP = 4242  # a group id no user here has as a private group


@pytest.mark.parametrize(
    ("mode", "group"), [(0o777, None), (0o1777, None), (0o757, None), (0o775, OTHER_GROUP)]
)
def test_a_state_folder_others_can_write_is_refused_saying_how_to_fix_it(
    project: Path, mode: int, group: int | None
) -> None:
    state = project / "st"
    state.mkdir()
    state.chmod(mode)
    if group is not None:
        os.chown(state, -1, group)
    result = run("--state-dir", "st", "apply", "j.yaml", cwd=project)
    assert_refused(result, f"{state} can be written by others (mode {mode:04o})", f"chmod go-w {state}")
    assert list(state.iterdir()) == [], "not even the lock is made"
    state.chmod(0o755)  # what a default umask makes: used
    result = run("--state-dir", "st", "apply", "j.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert (state / "records.sqlite").is_file()


def test_folders_made_under_a_umask_of_002_are_the_users_own_and_used(project: Path) -> None:
    """Under umask 002 every folder tfdeclare makes is group-writable, by the user's private
    group (CI's root has one): used, run after run. A group of other users is not (a user whose
    primary group is shared gets the refusal at the second run, saying how to fix it)."""
    private = grp.getgrgid(os.getegid()).gr_name == pwd.getpwuid(os.geteuid()).pw_name
    first = run("--state-dir", "st", "apply", "j.yaml", cwd=project, umask=0o002)
    assert first.returncode == 0, first.stderr
    assert (project / "st" / "local").stat().st_mode & 0o020, "group-writable, as the umask made it"
    again = run("--state-dir", "st", "apply", "j.yaml", cwd=project, umask=0o002)
    if not private:
        assert_refused(again, "can be written by others", "chmod go-w")
        return
    assert again.returncode == 0, again.stderr
    os.chown(project / "st" / "local", -1, OTHER_GROUP)
    result = run("--state-dir", "st", "delete", "jc", cwd=project)
    assert_refused(result, f"{project / 'st' / 'local'} can be written by others")


def test_a_state_folder_given_as_a_link_the_user_made_is_checked_where_it_leads(project: Path) -> None:
    real = project / "data" / "state"
    real.mkdir(parents=True, mode=0o700)
    (project / "st").symlink_to(real)
    result = run("--state-dir", "st", "apply", "j.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    assert (real / "records.sqlite").is_file()
    real.chmod(0o777)
    assert_refused(run("--state-dir", "st", "delete", "jc", cwd=project), "can be written by others")


def test_a_sub_folder_others_can_write_is_refused(project: Path) -> None:
    state = project / "st"
    assert run("--state-dir", "st", "apply", "j.yaml", cwd=project).returncode == 0
    (state / "local").chmod(0o777)
    result = run("--state-dir", "st", "delete", "jc", cwd=project)
    assert_refused(result, f"{state / 'local'} can be written by others", f"chmod go-w {state / 'local'}")


# ---- the status folder -------------------------------------------------------------------------


def applied(project: Path) -> Path:
    """The project with its job applied (finished): its status file, and where the folder is."""
    result = run("apply", "j.yaml", cwd=project)
    assert result.returncode == 0, result.stderr
    status = project / "status"
    assert (status / "jc.yaml").is_file()
    return status


def plant(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_status_passes_over_a_fifo_or_a_link_in_the_status_folder(project: Path, kind: str) -> None:
    status = applied(project)
    plant(status / "zz.yaml", kind)
    result = run("status", cwd=project, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "jc" in result.stdout and "zz" not in result.stdout
    assert f"warning: {status / 'zz.yaml'}: cannot be read" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_status_shows_a_job_from_its_record_when_its_status_file_is_a_fifo_or_a_link(
    project: Path, kind: str
) -> None:
    status = applied(project)
    plant(status / "jc.yaml", kind)
    for args in (("status",), ("status", "jc"), ("status", "-o", "json")):
        result = run(*args, cwd=project, timeout=30)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert "jc" in result.stdout and "Succeeded" in result.stdout, result.stdout
        assert f"{status / 'jc.yaml'}: cannot be read" in result.stderr, result.stderr
        assert "jc: no readable status file; shown from its record" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero", "file"])
def test_apply_replaces_what_was_planted_at_a_status_file_never_reading_or_writing_through_it(
    project: Path, kind: str
) -> None:
    status = project / "status"
    status.mkdir()
    victim = project / "victim"
    victim.write_text("precious victim data\n")
    if kind == "file":
        (status / "jc.yaml").symlink_to(victim)
    else:
        plant(status / "jc.yaml", kind)
    result = run("apply", "j.yaml", cwd=project, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    written = status / "jc.yaml"
    assert not written.is_symlink() and written.is_file(), "replaced by a rename"
    assert "name: jc" in written.read_text()
    assert victim.read_text() == "precious victim data\n"
