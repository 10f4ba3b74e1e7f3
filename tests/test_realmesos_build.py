"""The real-Mesos build's cache is shared by every checkout of the machine (issue 33): no
checkout's tests may run another's Python, and a rebuild never replaces a file under a running
cluster. The heavy steps (download, compiling) are replaced by small stand-ins here; the
folder logic and the wrapper run for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.realmesos import build as builder


def _fake_build(folder: Path) -> None:
    """What compiling leaves, in miniature: a containerizer and the executor."""
    (folder / "mesos-containerizer").write_text("#!/bin/sh\necho containerizer\n")
    (folder / "mesos-containerizer").chmod(0o755)


@pytest.fixture
def light(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("TFDECLARE_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(builder, "missing_libraries", lambda: [])
    monkeypatch.setattr(builder, "fetch_tarball", lambda folder: folder / "tarball")
    monkeypatch.setattr(builder, "extract_libmesos", lambda tarball, folder: None)
    monkeypatch.setattr(builder, "compile_programs", _fake_build)
    monkeypatch.setattr(builder, "check_runs", lambda folder: None)
    monkeypatch.setattr(builder.platform, "system", lambda: "Linux")
    monkeypatch.setattr(builder.platform, "machine", lambda: "x86_64")
    return tmp_path


def test_each_cluster_runs_the_executor_with_its_own_python(light: Path) -> None:
    build = builder.build()
    assert not (build / "mesos-executor").exists(), "the shared build names no interpreter"
    (build / "executor.py").write_text("import sys; print(sys.executable, *sys.argv[1:])\n")
    other = light / "other-checkout" / "python"
    other.parent.mkdir()
    other.symlink_to(sys.executable)
    mine = builder.launcher_dir(build, light / "cluster-a" / "launcher")
    theirs = builder.launcher_dir(build, light / "cluster-b" / "launcher", python=str(other))
    ran = subprocess.run([mine / "mesos-executor", "--x"], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == [sys.executable, "--x"]
    ran = subprocess.run([theirs / "mesos-executor"], capture_output=True, text=True, check=True)
    assert ran.stdout.split() == [str(other)]
    # the Docker containerizer's executor the same way (docker_executor.py of the build)
    assert not (build / "mesos-docker-executor").exists()
    (build / "docker_executor.py").write_text("import sys; print('docker', sys.executable, *sys.argv[1:])\n")
    ran = subprocess.run(
        [theirs / "mesos-docker-executor", "--y"], capture_output=True, text=True, check=True
    )
    assert ran.stdout.split() == ["docker", str(other), "--y"]
    assert (mine / "mesos-containerizer").resolve() == (build / "mesos-containerizer").resolve()
    builder.launcher_dir(build, mine)  # made again (a cluster restarted): no error, same result
    assert not list(mine.glob(".mesos-*executor.tmp"))


def test_a_rebuild_goes_beside_the_build_a_cluster_runs(light: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = builder.build()
    launcher = builder.launcher_dir(first, light / "running" / "launcher")
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    assert builder.build() == first, "current: nothing is rebuilt"

    monkeypatch.setattr(builder, "sources_digest", lambda: "f" * 64)  # a checkout with other sources
    second = builder.build()

    assert second != first and builder.is_current(second)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before, "the running build is untouched"
    assert (launcher / "mesos-containerizer").resolve().exists()
    assert not [p for p in second.parent.iterdir() if p.name.startswith(".build-")]


def test_a_folder_holding_another_build_is_moved_aside_not_changed(light: Path) -> None:
    folder = light / "explicit"
    folder.mkdir()
    (folder / "stamp").write_text("an older build\n")
    (folder / "mesos-containerizer").write_text("old\n")
    assert builder.build(folder) == folder and builder.is_current(folder)
    [aside] = [p for p in light.iterdir() if p.name.startswith("explicit.replaced-")]
    assert (aside / "mesos-containerizer").read_text() == "old\n"
