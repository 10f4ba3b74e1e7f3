"""Spec file discovery and the warm caches: what is read, what is skipped, and that a cache
never serves stale content."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import job_yaml
from tfdeclare.shell.sources import SpecFiles


def _age(path: Path, seconds: float = 10.0) -> None:
    """Move a file's mtime out of the racy window, as if it was written a while ago."""
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_discovery_skips_hidden_excluded_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(job_yaml("a"))
    (tmp_path / "b.yml").write_text(job_yaml("b"))
    (tmp_path / ".hidden.yaml").write_text(job_yaml("hidden"))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.yaml").write_text(job_yaml("git"))
    (tmp_path / "status").mkdir()
    (tmp_path / "status" / "a.yaml").write_text("kind: TFJobStatus\n")
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "c.yaml").write_text(job_yaml("c"))
    (tmp_path / "notes.txt").write_text("x")
    os.symlink(tmp_path / "a.yaml", tmp_path / "again.yaml")  # the same file twice counts once
    desired = SpecFiles([tmp_path], exclude=[tmp_path / "status"]).load()
    assert sorted(desired.jobs) == ["a", "b", "c"]
    assert not desired.diagnostics


def test_warm_loads_reuse_unchanged_files_and_see_changes(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(job_yaml("a", workers=1))
    _age(path)
    files = SpecFiles([tmp_path])
    first = files.load()
    assert files.load() is first, "nothing changed: the same desired state"
    path.write_text(job_yaml("a", workers=2))  # same size? no matter: mtime and inode key it
    _age(path, 5)
    second = files.load()
    assert second is not first and second.jobs["a"].spec.count(second.jobs["a"].spec.replicas[0].role) == 2


def test_racy_window_rereads_a_file_changed_within_the_same_mtime(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(job_yaml("a", workers=1))
    files = SpecFiles([tmp_path])
    files.load()
    stat = path.stat()
    text = path.read_text()
    with open(path, "r+") as handle:  # in place: same size, same inode, mtime forced back
        handle.write(text.replace("count: 1", "count: 3"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_ino == stat.st_ino and path.stat().st_size == stat.st_size
    desired = files.load()
    assert desired.jobs["a"].canonical["spec"]["replicas"]["worker"]["count"] == 3


def test_told_what_changed_only_those_paths_are_looked_at(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name))
        _age(tmp_path / f"{name}.yaml")
    files = SpecFiles([tmp_path])
    assert sorted(files.load().jobs) == ["a", "b"]
    (tmp_path / "c.yaml").write_text(job_yaml("c"))
    (tmp_path / "b.yaml").unlink()
    (tmp_path / "a.yaml").write_text(job_yaml("a", workers=4))
    desired = files.load({str(tmp_path / "c.yaml"), str(tmp_path / "b.yaml"), str(tmp_path / "a.yaml")})
    assert sorted(desired.jobs) == ["a", "c"]
    assert desired.jobs["a"].canonical["spec"]["replicas"]["worker"]["count"] == 4
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.yaml").write_text(job_yaml("d"))
    assert sorted(files.load({str(tmp_path / "sub")}).jobs) == ["a", "c", "d"], "a folder change rescans"
    assert sorted(files.load().jobs) == ["a", "c", "d"]


def test_told_changes_that_touch_other_files_fall_back_to_a_full_load(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name))
        _age(tmp_path / f"{name}.yaml")
    files = SpecFiles([tmp_path])
    files.load()
    (tmp_path / "b.yaml").write_text(job_yaml("a"))  # now two files define "a"
    duplicated = files.load({str(tmp_path / "b.yaml")})
    assert duplicated.jobs == {} and {d.code.value for d in duplicated.diagnostics} == {"duplicate-name"}
    (tmp_path / "b.yaml").write_text(job_yaml("b").replace("count: 1", "count: x"))
    broken = files.load({str(tmp_path / "b.yaml")})
    assert sorted(broken.jobs) == ["a"] and "b.yaml" in str(broken.invalid_files)
    (tmp_path / "b.yaml").write_text(job_yaml("b"))
    fixed = files.load({str(tmp_path / "b.yaml")})
    assert sorted(fixed.jobs) == ["a", "b"] and not fixed.diagnostics


def test_a_full_load_after_a_patch_sees_the_last_file_go(tmp_path: Path) -> None:
    """A patched state has no per-file results to compare: a full load that finds no file at
    all is a new, empty state (it returned the stale one, so the daemon never saw the last
    file deleted)."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name))
        _age(tmp_path / f"{name}.yaml")
    files = SpecFiles([tmp_path])
    files.load()
    (tmp_path / "a.yaml").unlink()
    assert sorted(files.load({str(tmp_path / "a.yaml")}).jobs) == ["b"]
    assert files.load(set()) is files.load(set()), "told nothing changed: the same state"
    (tmp_path / "b.yaml").unlink()
    assert files.load().jobs == {}


def test_a_file_without_a_job_is_never_patched_in(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(job_yaml(name))
        _age(tmp_path / f"{name}.yaml")
    files = SpecFiles([tmp_path])
    files.load()
    (tmp_path / "a.yaml").write_text("")
    emptied = files.load({str(tmp_path / "a.yaml")})
    assert sorted(emptied.jobs) == ["b"] and emptied.empty_files == {str(tmp_path / "a.yaml")}
    assert [d.code.value for d in emptied.diagnostics] == ["no-job-document"]


def test_the_config_file_is_passed_over_by_full_loads_rescans_and_told_changes(tmp_path: Path) -> None:
    """The daemon's folder (``--specs .``) holding the config in effect: neither a full load,
    a rescan after the config was edited, nor a file event naming it reads it as a spec."""
    config = tmp_path / "tfdeclare.yaml"
    config.write_text("statusDir: status\n")
    (tmp_path / "a.yaml").write_text(job_yaml("a"))
    for path in (config, tmp_path / "a.yaml"):
        _age(path)
    files = SpecFiles([tmp_path], skip_files=[Path(os.path.relpath(config))], clock=lambda: time.time() + 10)
    first = files.load()
    assert sorted(first.jobs) == ["a"] and not first.diagnostics
    config.write_text("statusDir: elsewhere\nbackend: local\n")
    _age(config)
    assert files.load() is first, "a rescan: the config's edit is no change of the specs"
    assert files.load(changed=[str(config)]) is first, "told: the same"
    assert SpecFiles([tmp_path]).load().diagnostics, "without skip_files it is read, and fails"
    assert SpecFiles([config], skip_files=[config]).load().diagnostics, "named as a spec: read"


def test_with_a_base_every_problem_path_is_relative_to_it(tmp_path: Path) -> None:
    """Git mode reads a snapshot inside the state folder (``base``): a path given that is gone,
    a dangling link, a folder that cannot be listed are named as the repository has them."""
    snapshot = tmp_path / "state" / "git" / "current"
    (snapshot / "locked").mkdir(parents=True)
    (snapshot / "dangling").symlink_to(snapshot / "nowhere")
    given = [snapshot / "jobs", snapshot / "dangling", snapshot / "locked"]
    os.chmod(snapshot / "locked", 0)
    try:
        listed = os.access(snapshot / "locked", os.R_OK)  # as root, a folder can always be listed
        diagnostics = SpecFiles(given, base=snapshot).load().diagnostics
    finally:
        os.chmod(snapshot / "locked", 0o755)
    paths = sorted(d.path for d in diagnostics if d.is_error)
    assert paths == ["dangling", "jobs"] + ([] if listed else ["locked"])
    assert all(str(tmp_path) not in d.format() for d in diagnostics)
    whole = SpecFiles([snapshot / "jobs"], base=snapshot / "jobs").load().diagnostics
    assert [d.path for d in whole] == ["."], "the base itself"
