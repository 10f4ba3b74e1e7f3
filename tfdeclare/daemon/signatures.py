"""Commit signatures in git mode: a branch head is applied only when it is signed by someone
the config trusts (``daemon.verifyCommits``), checked by ``git verify-commit``:

- ``allowedSigners``: an SSH allowed-signers file (``ssh-keygen -Y`` format: ``EMAIL
  namespaces="git" KEY``), used through ``gpg.format=ssh``;
- ``gpgKeyring``: exported OpenPGP public keys, imported into a private keyring of the
  daemon's own (``<state-dir>/git/gnupg``); any good signature by one of them is accepted.

Only the head is checked (what would run); the repository's own configuration plays no part
(the settings are given on git's command line). A head that fails is not applied: the last
good revision keeps running and every job's status says why (``UnverifiedRevision``).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tfdeclare.daemon.gitrun import Git, GitError


@dataclass(frozen=True, slots=True)
class SignaturePolicy:
    allowed_signers: str | None = None
    gpg_keyring: str | None = None


class SignatureSetupError(Exception):
    """The keyring cannot be prepared (a user error: the config names a bad file)."""


class Verifier:
    def __init__(self, policy: SignaturePolicy, workdir: Path) -> None:
        self.policy = policy
        self.gnupg_home: Path | None = None
        if policy.gpg_keyring is not None:
            self.gnupg_home = workdir / "gnupg"
            self.gnupg_home.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.gnupg_home, 0o700)
            # Importing and checking public keys needs no gpg-agent or dirmngr: without this,
            # gpg starts an agent for this keyring that outlives the daemon.
            (self.gnupg_home / "gpg.conf").write_text("no-autostart\n")
            done = subprocess.run(
                ["gpg", "--batch", "--quiet", "--import", policy.gpg_keyring],
                env={**os.environ, "GNUPGHOME": str(self.gnupg_home)},
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise SignatureSetupError(
                    f"cannot import daemon.verifyCommits.gpgKeyring {policy.gpg_keyring}: "
                    + (done.stderr.strip().splitlines() or ["gpg failed"])[-1]
                )

    def problem(self, git: Git, commit: str) -> str | None:
        """Why ``commit`` may not be applied (None: its signature is good and trusted)."""
        env: dict[str, str] = {}
        if self.policy.allowed_signers is not None:
            args = ["-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={self.policy.allowed_signers}"]
        else:
            assert self.gnupg_home is not None
            args = ["-c", "gpg.format=openpgp", "-c", "gpg.program=gpg"]
            env["GNUPGHOME"] = str(self.gnupg_home)
        try:
            _, code, stderr = git.run(*args, "verify-commit", "--raw", commit, env=env)
        except GitError as err:  # not run, or past its deadline: not verified
            return f"its signature could not be verified: {err.message}"
        if code == 0:
            return None
        said = stderr.strip()
        if not said:
            return "it is not signed"
        if "No principal matched" in said or "NO_PUBKEY" in said or "ERRSIG" in said:
            return "it is signed by a key the config does not trust"
        if "BADSIG" in said or "Signature verification failed" in said:
            return "its signature is not valid"
        return "its signature could not be verified: " + said.splitlines()[-1][:200]
