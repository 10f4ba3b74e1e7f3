"""Git and folder sources against a hostile repository: links that leave it are refused, and
with ``daemon.verifyCommits`` only heads signed by a trusted key are applied (real keys from
``ssh-keygen`` and ``gpg``, real repositories over ``file://``, the real daemon loop)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import cli
from tests.controller_world import World, daemon_running, job_text
from tfdeclare.core.diagnostics import Code
from tfdeclare.core.enums import Reason
from tfdeclare.daemon.service import DaemonOptions
from tfdeclare.daemon.signatures import SignaturePolicy
from tfdeclare.daemon.sources import GitSettings, GitSource, SourceError
from tfdeclare.shell.sources import SpecFiles, spec_sources

IDENTITY = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **IDENTITY, **(env or {})},
    ).stdout.strip()


class Repo:
    def __init__(self, root: Path) -> None:
        self.remote = root / "remote.git"
        self.work = root / "work"
        git(root, "init", "-q", "--bare", "-b", "main", str(self.remote))
        git(root, "clone", "-q", str(self.remote), str(self.work))
        (self.work / "jobs").mkdir()

    @property
    def url(self) -> str:
        return f"file://{self.remote}"

    def commit(self, files: dict[str, str], *sign: str, env: dict[str, str] | None = None) -> str:
        for name, text in files.items():
            path = self.work / "jobs" / name
            if text.startswith("->"):
                path.unlink(missing_ok=True)
                path.symlink_to(text[2:].strip())
            else:
                path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, *sign, "commit", "-q", *(["-S"] if sign else []), "-m", "change", env=env)
        git(self.work, "push", "-q", "--force", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")


def rejection(source: GitSource) -> tuple[str, str]:
    """The head the source did not apply, and why."""
    assert source.rejected is not None
    return source.rejected


def ssh_key(folder: Path, name: str) -> Path:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def ssh_signing(key: Path) -> tuple[str, ...]:
    return ("-c", "gpg.format=ssh", "-c", f"user.signingkey={key}")


def test_folder_mode_refuses_spec_files_that_link_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(job_text("outside"))
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "inside.yaml").write_text(job_text("inside"))
    (specs / "x.yaml").symlink_to(outside)
    (specs / "same.yml").symlink_to(specs / "inside.yaml")  # inside: followed (and counted once)
    desired = SpecFiles([specs]).load()
    assert sorted(desired.jobs) == ["inside"]
    (problem,) = desired.read_errors
    assert (
        problem.path.endswith("x.yaml")
        and f"a link to {outside}, outside the folder: refused" in problem.message
    )
    result = cli("validate", "specs", cwd=tmp_path)
    assert result.returncode == 1 and "specs/x.yaml:1: error: a link to" in result.stderr
    assert cli("validate", "specs/x.yaml", cwd=tmp_path).returncode == 0  # named by the user: read


def test_git_mode_refuses_a_committed_link_out_of_the_repository(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    host_file = tmp_path / "host.yaml"
    host_file.write_text(job_text("host"))
    repo.commit(
        {"a.yaml": job_text("a"), "x.yaml": f"-> {host_file}", "y.yaml": "-> ../../../../../../etc/passwd"}
    )
    source = GitSource(GitSettings(repo.url), tmp_path / "state" / "git")
    source.sync()
    desired = SpecFiles([source.specs_path], base=source.current).load()
    assert sorted(desired.jobs) == ["a"]
    refused = {d.path: d.message for d in desired.diagnostics if d.code is Code.READ_ERROR}
    assert set(refused) == {"jobs/x.yaml", "jobs/y.yaml"}
    assert str(host_file) in refused["jobs/x.yaml"] and "/etc/passwd" in refused["jobs/y.yaml"]


def test_signed_heads_only_with_ssh_allowed_signers(tmp_path: Path) -> None:
    ada, mallory = ssh_key(tmp_path, "ada"), ssh_key(tmp_path, "mallory")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'ada@example.com namespaces="git" {(tmp_path / "ada.pub").read_text()}')
    repo = Repo(tmp_path)
    source = GitSource(
        GitSettings(repo.url, signatures=SignaturePolicy(str(allowed))), tmp_path / "state" / "git"
    )
    repo.commit({"a.yaml": job_text("a", extra="backoffLimit: 1")})
    with pytest.raises(SourceError, match="is not applied: it is not signed"):
        source.sync()  # no good revision yet: nothing to apply
    good = repo.commit({"a.yaml": job_text("a")}, *ssh_signing(ada))
    assert source.sync().commit == good and source.rejected is None
    cases = {
        "not signed": repo.commit({"b.yaml": job_text("b")}),
        "a key the config does not trust": repo.commit(
            {"b.yaml": job_text("b", extra="backoffLimit: 4")}, *ssh_signing(mallory)
        ),
    }
    for why, head in cases.items():
        git(repo.work, "reset", "-q", "--hard", head)
        git(repo.work, "push", "-q", "--force", "origin", "HEAD:main")
        assert source.sync().commit == good  # the last good revision stays current
        commit, message = rejection(source)
        assert commit == head and why in message and f"revision {good[:12]} keeps running" in message
        assert os.readlink(source.current).endswith(good)
    later = repo.commit({"c.yaml": job_text("c")}, *ssh_signing(ada))
    assert source.sync().commit == later and source.rejected is None
    # a restarted daemon facing an unsigned head keeps the snapshot it applied before
    unsigned = repo.commit({"d.yaml": job_text("d")})
    restarted = GitSource(
        GitSettings(repo.url, signatures=SignaturePolicy(str(allowed))), tmp_path / "state" / "git"
    )
    assert restarted.sync().commit == later and rejection(restarted)[0] == unsigned


def test_signed_heads_only_with_a_gpg_keyring(tmp_path: Path) -> None:
    if shutil.which("gpg") is None:
        missing("needs gpg (gnupg)")
    home = tmp_path / "gnupg-ada"
    home.mkdir(mode=0o700)
    try:
        _signed_heads_only_with_a_gpg_keyring(tmp_path, home)
    finally:  # signing starts Ada's gpg-agent: the test stops it
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False)
    assert _gpg_agents(tmp_path) == [], "a gpg-agent outlived the test (the daemon's keyring needs none)"


def _gpg_agents(folder: Path) -> list[str]:
    """Command lines of the gpg-agents whose home is under ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"gpg-agent") and str(folder).encode() in b" ".join(argv):
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


def _signed_heads_only_with_a_gpg_keyring(tmp_path: Path, home: Path) -> None:
    gpg_env = {"GNUPGHOME": str(home)}
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--quick-gen-key",
            "Ada <ada@example.com>",
            "ed25519",
            "sign",
            "never",
        ],
        env={**os.environ, **gpg_env},
        check=True,
        capture_output=True,
    )
    keyring = tmp_path / "trusted.gpg"
    keyring.write_bytes(
        subprocess.run(
            ["gpg", "--export"], env={**os.environ, **gpg_env}, check=True, capture_output=True
        ).stdout
    )
    repo = Repo(tmp_path)
    settings = GitSettings(repo.url, signatures=SignaturePolicy(gpg_keyring=str(keyring)))
    source = GitSource(settings, tmp_path / "state" / "git")
    good = repo.commit(
        {"a.yaml": job_text("a")},
        "-c",
        "gpg.format=openpgp",
        "-c",
        "user.signingkey=ada@example.com",
        env=gpg_env,
    )
    assert source.sync().commit == good
    unsigned = repo.commit({"b.yaml": job_text("b")})
    assert source.sync().commit == good
    assert rejection(source)[0] == unsigned and "it is not signed" in rejection(source)[1]


def test_the_daemon_keeps_the_last_good_revision_and_every_status_says_why(tmp_path: Path) -> None:
    ada = ssh_key(tmp_path, "ada")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'ada@example.com namespaces="git" {(tmp_path / "ada.pub").read_text()}')
    (tmp_path / "r").mkdir()
    repo = Repo(tmp_path / "r")
    good = repo.commit({"a.yaml": job_text("a")}, *ssh_signing(ada))
    world = World(tmp_path / "w")
    source = GitSource(
        GitSettings(repo.url, signatures=SignaturePolicy(str(allowed))), tmp_path / "w" / "state" / "git"
    )
    world.files = SpecFiles([source.specs_path], base=source.current)
    options = DaemonOptions(interval_s=3600, debounce_s=0.0, settle_s=0.0, min_sync_interval_s=0.0)
    with daemon_running(world, source, options) as daemon:
        world.controller.wait_for_pass(0, lambda: len(world.tasks("a")) == 2)
        ids = {t.task_id for t in world.tasks("a").values()}
        bad = repo.commit({"a.yaml": job_text("a", extra="backoffLimit: 9"), "b.yaml": job_text("b")})
        daemon.request_sync()
        world.controller.wait_for_pass(
            world.controller.passes, lambda: world.record("a").not_synced is not None
        )
        reason, message = world.record("a").not_synced  # type: ignore[misc]
        assert (
            reason is Reason.UNVERIFIED_REVISION
            and f"revision {bad[:12]} is not applied: it is not signed" in message
        )
        status = world.status("a") or {}
        assert status["lastAttemptedRevision"] == bad and status["revision"] == good
        assert {t.task_id for t in world.tasks("a").values()} == ids and not world.tasks("b")
        (problem,) = daemon.wait_shown(
            lambda shown: bool(shown.problems)
        ).problems  # a source problem too, until a good head comes (issue 31)
        assert (problem.path, problem.kind.value, problem.revision) == (repo.url, "unverified-commit", bad)
        assert "it is not signed" in problem.message
        fixed = repo.commit({"c.yaml": job_text("c")}, *ssh_signing(ada))
        daemon.request_sync()
        world.controller.wait_for_pass(  # the fetch runs beside the passes: a later one applies it
            world.controller.passes, lambda: world.record("a").not_synced is None and bool(world.tasks("b"))
        )
        assert (world.status("a") or {})["revision"] == fixed and world.tasks("b")
        daemon.wait_shown(lambda shown: shown.problems == ())
    # the history: the unsigned head refused once, saying why, between the two applied ones
    shown = [(e.revision.commit if e.revision else None, e.outcome.value) for e in daemon.history.recent]
    assert shown == [(fixed, "applied"), (bad, "refused"), (good, "applied")]
    assert f"revision {bad[:12]} is not applied: it is not signed" in daemon.history.recent[1].diagnostics[0]


def test_git_mode_a_path_that_becomes_a_link_out_is_refused_by_every_load(tmp_path: Path) -> None:
    """The snapshot's ``--path`` folder made a link out of the repository between two loads: a
    rescan (stamps) and a told change refuse it as the full load does, and the policy's
    source-folder rule takes no folder outside the snapshot as a root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.yaml").write_text(job_text("evil"))
    revisions = tmp_path / "revisions"
    for commit in ("c1", "c2"):
        (revisions / commit).mkdir(parents=True)
    (revisions / "c1" / "jobs").mkdir()
    (revisions / "c1" / "jobs" / "a.yaml").write_text(job_text("a"))
    (revisions / "c2" / "jobs").symlink_to(outside)
    current = tmp_path / "current"
    current.symlink_to("revisions/c1")
    files = SpecFiles([current / "jobs"], base=current, confined=True, clock=lambda: 10.0**10)
    assert sorted(files.load().jobs) == ["a"]
    (tmp_path / "next").symlink_to("revisions/c2")
    (tmp_path / "next").replace(current)
    for changed in (None, [str(current / "jobs" / "evil.yaml")]):
        desired = files.load(changed)
        assert not desired.jobs
        (refused,) = desired.read_errors
        assert refused.path == "jobs" and str(outside) in refused.message
    sources = spec_sources([current / "jobs"], current)
    assert sources.root_of(str(outside)) is None
    assert sources.root_of(str(revisions / "c2")) == str(revisions / "c2")
