"""The Mesos backend's framework record (``framework.FrameworkRecord``) over a real state
folder: the framework id saved before it is acted on, a removed framework by policy
(``onFrameworkRemoved``: fail, or archive the file and start anew), the client's end states
(read-only when another scheduler took over, fatal when it stopped), and the capabilities."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import (
    ClientStoppedError,
    FrameworkFailedOverError,
    TerminalError,
)
from tfdeclare.backends.mesos.framework import FrameworkRecord, older_than
from tfdeclare.backends.mesos.info import Capability


def record(root: Path, gpu_wanted: bool = False, **config: object) -> FrameworkRecord:
    return FrameworkRecord(root, MesosConfig(**config), lambda: None, gpu_wanted)  # type: ignore[arg-type]


def test_the_id_is_saved_before_it_is_acted_on(tmp_path: Path) -> None:
    made = record(tmp_path)
    made.subscribed("fw-1")
    saved = json.loads((tmp_path / "framework.json").read_text())
    assert saved["frameworkId"] == "fw-1"
    assert saved["instanceId"] == made.state.instance_id
    again = record(tmp_path)
    assert again.state.framework_id == "fw-1"
    assert again.owner == f"tfdeclare/{made.state.instance_id}"


def test_removed_with_policy_fail_is_fatal_once(tmp_path: Path) -> None:
    made = record(tmp_path)
    made.subscribed("fw-1")
    assert made.removed(now=100.0) == "fw-1"  # its tasks are gone (the master killed them)
    assert made.removed(now=101.0) is None  # reported twice (client and caller): handled once
    assert made.fatal is not None and "removed framework fw-1" in str(made.fatal)
    assert made.removed_for_good and not made.read_only
    with pytest.raises(BackendError, match=r"mesos\.onFrameworkRemoved"):
        made.usable()
    assert (tmp_path / "framework.json").exists()  # kept: an operator decides


def test_removed_with_policy_new_framework_archives_and_starts_anew(tmp_path: Path) -> None:
    made = record(tmp_path, on_framework_removed="newFramework")
    made.subscribed("fw-1")
    assert made.removed(now=100.0) == "fw-1"
    assert made.removed(now=101.0) is None  # reported twice (client and caller): handled once
    assert made.fatal is None
    assert json.loads((tmp_path / "framework.removed-100.json").read_text())["frameworkId"] == "fw-1"
    assert record(tmp_path).state.framework_id is None
    assert record(tmp_path).state.instance_id == made.state.instance_id


@pytest.mark.parametrize(
    ("error", "read_only", "fatal"),
    [
        (FrameworkFailedOverError("another scheduler"), True, "took over"),  # a substring
        (ClientStoppedError("stopped"), False, None),
        (TerminalError("bad"), False, "the Mesos client stopped: bad"),
    ],
)
def test_terminated(tmp_path: Path, error: TerminalError, read_only: bool, fatal: str | None) -> None:
    made = record(tmp_path)
    made.terminated(error)
    assert made.read_only is read_only
    if fatal is None:
        assert made.fatal is None
    else:
        assert made.fatal is not None and fatal in str(made.fatal)


def test_gpu_resources_asked_once_and_remembered(tmp_path: Path) -> None:
    made = record(tmp_path)
    assert Capability.GPU_RESOURCES not in made.info().capabilities
    assert Capability.GPU_RESOURCES in made.info(gpu=True).capabilities
    made.enable_gpu()
    assert Capability.GPU_RESOURCES in made.info().capabilities
    assert record(tmp_path).gpu_enabled
    assert record(tmp_path / "other", gpu_wanted=True).gpu_enabled  # a live GPU task in the journal


@pytest.mark.parametrize(
    ("version", "older"),
    [("1.8.1", True), ("1.8.1-rc2", True), ("1.9.0", False), ("2.0", False), ("", False)],
)
def test_older_than(version: str, older: bool) -> None:
    assert older_than(version, (1, 9)) is older
