"""A full rescan without file events (``SpecFiles.load()`` after a load, ``shell.stamps``)
sees every change exactly as a full load of the same folder does: a table of changes, each
compared with a fresh ``SpecFiles`` over the same files, and whether the rescan needed the
full load (a link, the same file twice, a file with an error) or read only what changed.

The clock is injected (``SpecFiles(clock=...)``): the files are written now, and loaded as
if ten seconds later, outside the racy window, unless a case says otherwise."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import job_yaml
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan import planner
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.observed import ObservedJob
from tfdeclare.core.plan.planner import JobPlan, PlanCache, plan
from tfdeclare.core.spec.loader import LoadedJob
from tfdeclare.shell import sources
from tfdeclare.shell.sources import SpecFiles


class Watched:
    """A warm ``SpecFiles`` over ``specs`` (excluding ``specs/state``) that counts its full
    loads and the files it reads."""

    def __init__(self, specs: Path, monkeypatch: pytest.MonkeyPatch, offset: float = 10.0) -> None:
        self.specs, self.offset = specs, offset
        self.files = SpecFiles([specs], exclude=[specs / "state"], clock=self.clock)
        self.full_loads, self.reads = 0, list[str]()
        discover = self.files._discover

        def counted(*args: object) -> object:
            self.full_loads += 1
            return discover(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(self.files, "_discover", counted)
        read = sources._read

        def counted_read(path: str, size: int) -> bytes:
            self.reads.append(path)
            return read(path, size)

        monkeypatch.setattr(sources, "_read", counted_read)

    def clock(self) -> float:
        return time.time() + self.offset

    def load(self) -> DesiredState:
        self.full_loads, self.reads = 0, []
        return self.files.load()


def reference(specs: Path) -> DesiredState:
    """What a full load of the folder as it is now gives."""
    return SpecFiles([specs], exclude=[specs / "state"], clock=lambda: time.time() + 10).load()


def in_place(path: Path, old: str, new: str) -> None:
    """Rewrite ``path`` in place (same inode), ``old`` replaced by ``new``."""
    text = path.read_text()
    assert old in text
    with open(path, "r+") as handle:
        handle.write(text.replace(old, new))
        handle.truncate()


def link_a_to_b(specs: Path) -> None:
    (specs / "a.yaml").unlink()
    os.symlink(specs / "b.yaml", specs / "a.yaml")


def rename(specs: Path) -> None:
    os.rename(specs / "a.yaml", specs / "renamed.yaml")


def touch(specs: Path) -> None:
    later = time.time() + 5
    os.utime(specs / "a.yaml", (later, later))


def hard_link(specs: Path) -> None:
    os.link(specs / "a.yaml", specs / "again.yaml")


def gone_folder(specs: Path) -> None:
    shutil.rmtree(specs / "deep")


def _other_links(specs: Path) -> None:
    os.symlink(specs / "deep", specs / "shortcut")  # a folder's link: never followed
    os.symlink(specs / "notes.txt", specs / "readme")


def _link_instead(path: Path, target: Path) -> None:
    """``path`` becomes a link to ``target`` (one a deploy tool swaps in before its target
    exists, or a loop): not a removal of its jobs."""
    path.unlink()
    os.symlink(target, path)


def _replace(path: Path, text: str) -> None:
    temp = path.with_name(".tmp-save")
    temp.write_text(text)
    os.replace(temp, path)


def _new_folder(folder: Path, name: str) -> None:
    folder.mkdir()
    (folder / f"{name}.yaml").write_text(job_yaml(name))


# (what changes, the change, whether the rescan takes the full load)
CASES: list[tuple[str, Callable[[Path], object], bool]] = [
    ("content edit keeping the size", lambda d: in_place(d / "a.yaml", "count: 1", "count: 3"), False),
    ("content edit changing the size", lambda d: in_place(d / "a.yaml", "count: 1", "count: 12"), False),
    ("touch of the mtime only", touch, False),
    ("chmod only", lambda d: os.chmod(d / "a.yaml", 0o600), False),
    ("rename", rename, False),
    ("new file", lambda d: (d / "n.yaml").write_text(job_yaml("n")), False),
    ("new .yml file", lambda d: (d / "n.yml").write_text(job_yaml("n")), False),
    ("deleted file", lambda d: (d / "b.yaml").unlink(), False),
    (
        "replaced by a new file (editor's save)",
        lambda d: _replace(d / "a.yaml", job_yaml("a", workers=2)),
        False,
    ),
    ("new hidden file", lambda d: (d / ".n.yaml").write_text(job_yaml("n")), False),
    ("new file with another suffix", lambda d: (d / "n.txt").write_text(job_yaml("n")), False),
    ("new file in a hidden folder", lambda d: (d / ".git" / "n.yaml").write_text(job_yaml("n")), False),
    ("new file in the excluded folder", lambda d: (d / "state" / "n.yaml").write_text(job_yaml("n")), False),
    ("new file in a sub-folder", lambda d: (d / "deep" / "er" / "n.yaml").write_text(job_yaml("n")), False),
    ("new sub-folder with a file", lambda d: _new_folder(d / "new", "n"), False),
    ("sub-folder removed", gone_folder, False),
    ("new links that are no spec files", _other_links, False),
    ("folder named like a spec file", lambda d: (d / "f.yaml").mkdir(), False),
    ("file replaced by a link inside", link_a_to_b, True),
    ("new link to a file outside", lambda d: os.symlink(d.parent / "outside.yaml", d / "o.yaml"), True),
    ("the same file twice (a hard link)", hard_link, True),
    ("a job defined twice", lambda d: (d / "n.yaml").write_text(job_yaml("a")), True),
    ("a file with an error", lambda d: in_place(d / "a.yaml", "count: 1", "count: x"), True),
    ("a file emptied", lambda d: (d / "a.yaml").write_text(""), True),
    ("file replaced by a dangling link", lambda d: _link_instead(d / "a.yaml", d / "missing.yaml"), True),
    ("file replaced by a link to itself", lambda d: _link_instead(d / "a.yaml", d / "a.yaml"), True),
    ("nothing", lambda d: None, False),
]


@pytest.fixture
def specs(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    (folder / "deep" / "er").mkdir(parents=True)
    (folder / ".git").mkdir()
    (folder / "state").mkdir()
    (folder / "a.yaml").write_text(job_yaml("a"))
    (folder / "b.yaml").write_text(job_yaml("b"))
    (folder / "deep" / "c.yml").write_text(job_yaml("c"))
    (folder / "deep" / "er" / "d.yaml").write_text(job_yaml("d"))
    (folder / "notes.txt").write_text("x")
    (tmp_path / "outside.yaml").write_text(job_yaml("o"))
    return folder


@pytest.mark.parametrize(("change", "full"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_rescan_sees_each_change_as_a_full_load_does(
    specs: Path, change: Callable[[Path], object], full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm = Watched(specs, monkeypatch)
    first = warm.load()
    assert sorted(first.jobs) == ["a", "b", "c", "d"] and not first.diagnostics
    assert warm.load() is first and warm.reads == [] and warm.full_loads == 0
    change(specs)
    rescanned = warm.load()
    full_loads, reads = warm.full_loads, list(warm.reads)
    expected = reference(specs)
    assert rescanned == expected
    assert rescanned.diagnostics == expected.diagnostics  # the same words, file and line
    assert full_loads == int(full)
    if not full:
        assert len(reads) <= 1, "only the changed file is read"
    again = warm.load()
    assert again == rescanned and warm.reads == []
    if not full:
        assert again is rescanned and warm.full_loads == 0, "nothing changed since: the same state"


def _entries(specs: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every path below ``specs`` (links not followed) with what a change of it changes."""
    found = {}
    for folder, dirs, names in os.walk(specs):
        for name in [*dirs, *names]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            found[path] = (info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns)
    return found


@pytest.mark.parametrize("change", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_load_told_which_paths_changed_sees_each_change_as_a_full_load_does(
    specs: Path, change: Callable[[Path], object]
) -> None:
    """The daemon's file events name the paths that changed (a file, a link, a folder): the
    load told them patches the last state or reads everything, and either way gives what a
    full load gives (a dangling link was taken for a removed file, and its jobs for deleted)."""
    files = SpecFiles([specs], exclude=[specs / "state"], clock=lambda: time.time() + 10)
    first = files.load()
    assert sorted(first.jobs) == ["a", "b", "c", "d"] and not first.diagnostics
    before = _entries(specs)
    change(specs)
    after = _entries(specs)
    changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
    told = files.load(changed)
    expected = reference(specs)
    assert told == expected
    assert told.diagnostics == expected.diagnostics


def test_a_file_within_the_racy_window_is_read_again_though_its_stamp_says_nothing(
    specs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change made within the file system's time granularity of the last look keeps every
    stamp; the file was then within the racy window, so the rescan reads it again anyway.
    (The same tick is staged by giving the stamp the file's new change time.)"""
    warm = Watched(specs, monkeypatch, offset=0.5)  # the files were written just now
    warm.load()
    path = specs / "a.yaml"
    in_place(path, "count: 1", "count: 3")
    folder = warm.files._stamps.folders[str(specs)]  # type: ignore[union-attr]
    folder.files[str(path)] = path.stat().st_ctime_ns  # as if the change had kept the stamp
    rescanned = warm.load()
    assert rescanned.jobs["a"].canonical["spec"]["replicas"]["worker"]["count"] == 3
    assert rescanned == reference(specs) and warm.full_loads == 0


def test_a_clock_that_went_back_takes_the_full_load(specs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warm = Watched(specs, monkeypatch)
    first = warm.load()
    warm.offset = 5.0
    assert warm.load() == first and warm.full_loads == 1


def test_a_rescan_that_finds_nothing_re_plans_nothing(specs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner reuses its last plan for the same desired state and the same (or an equal)
    observed state; another observed state (the backend's next answer) is planned again."""
    warm = Watched(specs, monkeypatch)
    desired = warm.load()
    observed = {n: ObservedJob(n, j.canonical, j.spec_hash, Phase.RUNNING) for n, j in desired.jobs.items()}
    cache = PlanCache()
    first = plan(desired, observed, None, cache, now=1.0)
    planned: list[str] = []
    real = planner._plan_present

    def present(loaded: LoadedJob, current: ObservedJob | None) -> JobPlan:
        planned.append(loaded.name)
        return real(loaded, current)

    monkeypatch.setattr(planner, "_plan_present", present)
    again = plan(warm.load(), observed, None, cache, now=2.0)
    assert again.jobs == first.jobs and again.now == 2.0 and planned == []
    in_place(specs / "b.yaml", "count: 1", "count: 2")
    changed = plan(warm.load(), observed, None, cache, now=3.0)
    assert planned == ["b"] and changed.jobs == plan(reference(specs), observed, None, now=3.0).jobs
    equal = {n: ObservedJob(n, j.canonical, j.spec_hash, Phase.RUNNING) for n, j in desired.jobs.items()}
    equal["b"] = observed["b"]
    planned.clear()
    plan(warm.load(), equal, None, cache, now=4.0)
    assert planned == [], "an equal observed state (the daemon's, made each pass): nothing planned"
    other = {**equal, "c": replace(equal["c"], phase=Phase.FAILED)}
    made = plan(warm.load(), other, None, cache, now=5.0)
    assert sorted(planned) == ["a", "c", "d"], "another observed state: a full plan (b's inputs are the same)"
    assert made.jobs == plan(reference(specs), other, None, now=5.0).jobs
