"""``Git``: how the git source runs git. Every command is one short-lived process, bounded,
alone in its process group, asking no one anything:

- **Bounded**: each has a deadline (``timeout_s``; the network's, ``daemon.gitTimeoutSeconds``,
  for clone, fetch and push); past it the whole process group is killed (git and the helpers it
  started, ``git-remote-https``, ``ssh``, which hold its pipes) and ``GitError`` says "timed out
  after N s". ``stop()`` kills every group still running and refuses new commands (the
  daemon's stop: nothing of it outlives the daemon).
- **Never asking**: no terminal (a session of its own, standard input closed), no prompt
  (``GIT_TERMINAL_PROMPT=0``, empty ``GIT_ASKPASS``/``SSH_ASKPASS``), ssh in batch mode with
  a connect timeout (unless the user set ``GIT_SSH_COMMAND``, ``GIT_SSH`` or
  ``core.sshCommand``), HTTP aborted when slower than ``LOW_SPEED_BYTES`` a second for
  ``LOW_SPEED_S``. Credentials come from the URL or the user's credential helpers.
- **What it says**: git's own ``fatal:``/``error:`` lines (its last line else), in English
  (``LC_ALL=C``), every URL in them without credentials (``core.urls``).

No persistent process (GitPython's ``cat-file`` pair per ``Repo``, which leaked a process and
four descriptors per sync): the daemon's git work is a handful of plumbing commands a pass.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from tfdeclare.core.urls import hide_credentials

NETWORK_TIMEOUT_S = 120.0  # clone, fetch, push: the default of daemon.gitTimeoutSeconds
LOCAL_TIMEOUT_S = 120.0  # a command that reads or writes the clone only (a slow disk, a huge tree)
LOW_SPEED_BYTES = 1000  # http.lowSpeedLimit: slower than this (bytes a second) ...
LOW_SPEED_S = 60  # ... for this long (http.lowSpeedTime), and git gives up on an HTTP transfer
SSH_CONNECT_TIMEOUT_S = 30
_REAP_S = 5.0  # the wait for a killed group's pipes to close


class GitError(Exception):
    """A git command failed (``message``: what git said), timed out, or could not start."""

    def __init__(self, message: str, *, timed_out: bool = False, started: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out
        self.started = started  # False: git could not be run at all (no git, EMFILE, ENOMEM)


def problem(stderr: str, code: int) -> str:
    """What git said went wrong: its ``fatal:``/``error:`` lines, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line.split(":", 1)[1].strip() for line in lines if line.startswith(("fatal:", "error:"))]
    if said:
        return hide_credentials("; ".join(dict.fromkeys(said)))
    return hide_credentials(lines[-1]) if lines else f"git failed (exit code {code})"


def _user_ssh_command() -> bool:
    """Whether the user chose how git runs ssh (their own settings are then left as they are)."""
    if os.environ.get("GIT_SSH_COMMAND") or os.environ.get("GIT_SSH"):
        return True
    try:  # the system's and the user's config (run from / so that no repository's own counts)
        done = subprocess.run(
            ["git", "config", "--get", "core.sshCommand"],
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(done.stdout.strip())


def environment(user_ssh: bool) -> dict[str, str]:
    """The variables every git command runs with, over the daemon's own."""
    env = {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GCM_INTERACTIVE": "never",
        "GIT_HTTP_LOW_SPEED_LIMIT": str(LOW_SPEED_BYTES),
        "GIT_HTTP_LOW_SPEED_TIME": str(LOW_SPEED_S),
        "LC_ALL": "C",
        "LANGUAGE": "C",
    }
    if not user_ssh:
        env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={SSH_CONNECT_TIMEOUT_S}"
    return env


class Git:
    """Runs git on one repository (``git_dir``, given explicitly: never one found by looking
    up from a folder) or none; ``network_timeout_s`` bounds clone, fetch and push."""

    def __init__(self, git_dir: Path, network_timeout_s: float) -> None:
        self.git_dir = git_dir
        self.network_timeout_s = network_timeout_s
        self._env = {**os.environ, **environment(_user_ssh_command())}
        self._running: set[subprocess.Popen[bytes]] = set()
        # reentrant: ``stop`` runs in a signal handler, maybe of the thread that holds it
        self._lock = threading.RLock()
        self._stopped = False

    def __call__(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        repository: bool = True,
        cwd: Path | None = None,
    ) -> str:
        """Run ``git ARGS`` (on the repository unless ``repository`` is False); its standard
        output without the last line break. Raises ``GitError``."""
        out, code, err = self.run(
            *args, stdin=stdin, env=env, network=network, repository=repository, cwd=cwd
        )
        if code != 0:
            raise GitError(problem(err, code))
        return out

    def run(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        repository: bool = True,
        cwd: Path | None = None,
    ) -> tuple[str, int, str]:
        """Run ``git ARGS``: (standard output, exit code, standard error). Raises ``GitError``
        only when it could not run or ran past its deadline."""
        out, code, err = self.run_bytes(
            *args, stdin=stdin, env=env, network=network, repository=repository, cwd=cwd
        )
        return out.decode("utf-8", "replace").removesuffix("\n"), code, err

    def run_bytes(
        self,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        network: bool = False,
        repository: bool = True,
        cwd: Path | None = None,
    ) -> tuple[bytes, int, str]:
        """``run`` with the standard output as git wrote it (paths are bytes)."""
        timeout = self.network_timeout_s if network else LOCAL_TIMEOUT_S
        command = ["git", *([f"--git-dir={self.git_dir}"] if repository else []), *args]
        with self._lock:
            if self._stopped:
                raise GitError("stopped", started=False)
            try:
                child = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env={**self._env, **(env or {})},
                    start_new_session=True,  # its own group, no terminal to prompt on
                )
            except OSError as failed:  # EMFILE, ENFILE, ENOMEM, no git: not the clone's fault
                raise GitError(f"cannot run git: {failed.strerror or failed}", started=False) from None
            self._running.add(child)
        try:
            try:
                out, err = child.communicate(stdin, timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill(child)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.communicate(timeout=_REAP_S)
                raise GitError(f"timed out after {timeout:g} s", timed_out=True) from None
        finally:
            with self._lock:
                self._running.discard(child)
            for pipe in (child.stdin, child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()
            if child.returncode is None:  # its pipes were held by something outside its group
                self._kill(child)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(_REAP_S)
        if self._stopped:
            raise GitError("stopped")
        return (out, child.returncode, err.decode("utf-8", "replace"))

    @staticmethod
    def _kill(child: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)  # git and every helper it started

    def stop(self) -> None:
        """Kill every git command running now, whole, and refuse new ones."""
        with self._lock:
            self._stopped = True
            running = list(self._running)
        for child in running:
            self._kill(child)
