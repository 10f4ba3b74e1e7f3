"""Issue 29, finding 6: a job's ``workingDir: sub`` swapped for a link to a folder outside the
spec folder after ``apply`` is caught when the task is launched again (a restart after a
failure): the relaunch is refused, the job's status says why (reason ``LaunchRefused``, the
task, the folder, where it leads now and the spec file), the outside folder's marker is never
read, and once the folder is fixed the job launches again. Real processes, and a real Docker
engine for the Docker runtime; the CLI as users run it.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cli, worker_ports
from tests.waiting import wait_until
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity, no_link_in
from tfdeclare.controller.launchpaths import LaunchPaths, LaunchRefused
from tfdeclare.core.enums import Role
from tfdeclare.core.run.tasks import GangRequest, Placement, Slot, SlotRequest, TaskKey, TaskLaunch
from tfdeclare.core.spec.keys import Volume
from tfdeclare.core.spec.resources import Resources

MARKER = "contents-of-a-file-outside-the-spec-folder"
# First run: note it ran, wait for the test's go, fail (restartPolicy OnFailure relaunches it).
# A relaunch prints the marker if its source folder (linked into its working folder) has one.
SCRIPT = (
    "if [ -e ran-once ]; then cat marker.txt 2>/dev/null; echo second-run; exit 0; fi; "
    "touch ran-once; while [ ! -e go ]; do sleep 0.1; done; exit 1"
)


def spec(image: str | None) -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: swapped}\nspec:\n"
        + (f"  image: {image}\n" if image else "")
        + f"  command: [sh, -c, {SCRIPT!r}]\n  workingDir: sub\n"
        "  restartPolicy: OnFailure\n  backoffLimit: 3\n"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.2, mem: 128}}\n"
    )


def status_of(root: Path) -> dict[str, Any]:
    data = yaml.safe_load((root / "status" / "swapped.yaml").read_text())
    assert isinstance(data, dict)
    return data


def every_log(root: Path) -> str:
    logs = root / ".tfdeclare" / "local" / "logs"
    return "".join(p.read_text(errors="replace") for p in logs.rglob("*.log"))


def swap_after_the_first_run(root: Path, image: str | None, runtime: str) -> None:
    specs = root / "specs"
    (specs / "sub").mkdir(parents=True)
    (specs / "sub" / "data.txt").write_text("the job's own input\n")
    outside = root / "outside"
    outside.mkdir()
    (outside / "marker.txt").write_text(MARKER + "\n")
    (root / "tfdeclare.yaml").write_text(
        f"restartBackoff: {{initialSeconds: 0.2, maxSeconds: 1}}\nlocal: {{runtime: {runtime}}}\n"
    )
    (specs / "job.yaml").write_text(spec(image))
    applied = cli("apply", "specs", cwd=root, timeout=180)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    work = root / ".tfdeclare" / "local" / "work" / "swapped" / "worker-0"
    wait_until((work / "ran-once").exists, 120, what=lambda: f"the first run; logs: {every_log(root)}")

    # someone who can write the spec folder swaps the job's folder for a link out of it
    (specs / "sub").rename(specs / "sub.real")
    os.symlink(outside, specs / "sub")
    (work / "go").touch()  # the first run fails now: OnFailure relaunches it

    # ``apply`` would refuse the spec now (the policy resolves links too); what relaunches the
    # failed task is a pass over what was applied: the daemon's, or ``status --refresh``

    def refused() -> dict[str, Any] | None:
        again = cli("status", "--refresh", cwd=root, timeout=180)
        shown = again.stdout + again.stderr
        assert again.returncode == 0 and "Traceback" not in shown, shown
        status = status_of(root)
        assert status["phase"] != "Succeeded", (status, every_log(root))
        return status if any(c["reason"] == "LaunchRefused" for c in status["conditions"]) else None

    status = wait_until(refused, 60, what=lambda: f"LaunchRefused; logs: {every_log(root)}", interval=0.3)
    message = status["message"]
    assert "worker-0: workingDir sub leads to" in message and str(outside.resolve()) in message, message
    assert "specs/job.yaml" in message and "not launched" in message, message
    # not relaunched: the slot shows its last run, failed, until a new one starts
    assert status["phase"] == "Restarting" and status["tasks"][0]["state"] == "failed", status
    shown = cli("status", "swapped", cwd=root).stdout
    assert "LaunchRefused" in shown or "not launched" in shown, shown
    stalled = {c["type"]: c for c in status["conditions"]}.get("Stalled")
    assert stalled is not None and stalled["status"] == "True", status["conditions"]
    logs = every_log(root)
    assert MARKER not in logs and "second-run" not in logs, logs
    assert status["restarts"] == 1, status

    # fixed: the next pass launches it, from the real folder
    (specs / "sub").unlink()
    (specs / "sub.real").rename(specs / "sub")
    fixed = cli("apply", "specs", "--wait", "--timeout", "60", cwd=root, timeout=180)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert status_of(root)["phase"] == "Succeeded"
    logs = every_log(root)
    assert "second-run" in logs and MARKER not in logs, logs
    assert cli("delete", "--all", cwd=root).returncode == 0


@pytest.mark.slow
def test_a_relaunched_process_task_whose_folder_was_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    swap_after_the_first_run(tmp_path, None, "process")


@pytest.mark.slow
@pytest.mark.docker
def test_a_relaunched_container_whose_folder_was_swapped_for_a_link_is_refused(
    tmp_path: Path, base_image: str
) -> None:
    swap_after_the_first_run(tmp_path, base_image, "docker")


# ---- the check itself, on real folders and links -------------------------------------------


def launch_of(source_dir: Path, working_dir: str | None, **more: Any) -> TaskLaunch:
    return TaskLaunch(
        task_id="j.u.worker-0.1", job="j", key=TaskKey(Role.WORKER, 0), attempt=0, spec_hash="s",
        config_hash="c", argv=("true",), env=(), resources=Resources(0.1, 64, 0),
        slot=Slot(TaskKey(Role.WORKER, 0), "127.0.0.1", 1), working_dir=working_dir,
        source_dir=str(source_dir), **more,
    )  # fmt: skip


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder in ("specs/sub", "state", "status", "data/in", "outside"):
        (tmp_path / folder).mkdir(parents=True)
    return tmp_path


def paths(root: Path, allowed: tuple[str, ...] | None = None) -> LaunchPaths:
    own = {str(root / "state"): "tfdeclare's own folder", str(root / "status"): "tfdeclare's own folder"}
    return LaunchPaths({**own, str(root / "engine.sock"): "the container engine's socket"}, allowed)


def swap(link: Path, target: Path) -> None:
    link.rename(link.with_name(link.name + ".real"))
    link.symlink_to(target)


def test_the_checked_folder_is_the_resolved_one_and_a_swap_into_our_folders_is_refused(tree: Path) -> None:
    specs = tree / "specs"
    checked = paths(tree).checked(launch_of(specs, "sub"), str(specs), host_paths_here=True)
    assert checked.source_folder == str(specs / "sub")
    (specs / "link").symlink_to(specs / "sub")  # a link inside the folder stays allowed, resolved
    inside = paths(tree).checked(launch_of(specs, "link"), str(specs), host_paths_here=True)
    assert inside.source_folder == str(specs / "sub")
    (specs / "sub").rename(specs / "sub.real")
    for target in (tree / "outside", tree / "state", tree):
        (specs / "sub").unlink(missing_ok=True)
        (specs / "sub").symlink_to(target)  # swapped after it was checked
        with pytest.raises(LaunchRefused, match=re.escape(f"worker-0: workingDir sub leads to {target}")):
            paths(tree).checked(launch_of(specs, "sub"), str(specs), host_paths_here=False)
    # the spec's own folder swapped (no workingDir): checked the same way
    (tree / "specs2").mkdir()
    with pytest.raises(LaunchRefused, match="its spec's folder"):
        paths(tree).checked(launch_of(tree / "state", None), str(tree / "specs2"), host_paths_here=False)


def test_volumes_and_absolute_folders_are_resolved_and_checked_on_this_machine(tree: Path) -> None:
    allowed = (str(tree / "data"),)
    volume = Volume(str(tree / "data" / "in"), "/in")
    ok = paths(tree, allowed).checked(
        launch_of(tree / "specs", None, volumes=(volume,)), None, host_paths_here=True
    )
    assert ok.volumes == (volume,)
    (tree / "data" / "link").symlink_to(tree / "data" / "in")
    linked = Volume(str(tree / "data" / "link"), "/in")
    ok = paths(tree, allowed).checked(
        launch_of(tree / "specs", None, volumes=(linked,)), None, host_paths_here=True
    )
    assert ok.volumes == (volume,), "mounted from the folder checked, links resolved"
    swap(tree / "data" / "in", tree / "outside")
    with pytest.raises(LaunchRefused, match=r"policy\.allowedHostPaths does not allow"):
        paths(tree, allowed).checked(
            launch_of(tree / "specs", None, volumes=(volume,)), None, host_paths_here=True
        )
    (tree / "data" / "in").unlink()
    (tree / "data" / "in").symlink_to(tree / "state")
    with pytest.raises(LaunchRefused, match="tfdeclare's own folder"):
        paths(tree).checked(launch_of(tree / "specs", None, volumes=(volume,)), None, host_paths_here=True)
    (tree / "engine.sock").touch()
    (tree / "data" / "sock").symlink_to(tree / "engine.sock")
    with pytest.raises(LaunchRefused, match="engine's socket"):
        paths(tree).checked(
            launch_of(tree / "specs", str(tree / "data" / "sock"), volumes=()), None, host_paths_here=True
        )
    # a backend whose hosts are elsewhere (Mesos agents): their paths are not this machine's
    far = paths(tree).checked(launch_of(tree / "specs", None, volumes=(volume,)), None, host_paths_here=False)
    assert far.volumes == (volume,)


def test_the_local_backend_refuses_a_checked_folder_that_turned_into_a_link(tmp_path: Path) -> None:
    first, last = worker_ports(3)
    backend = LocalBackend(tmp_path / "state", LocalCapacity(1, 512, 0, port_first=first, port_last=last))
    (tmp_path / "specs" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    checked = launch_of(tmp_path / "specs", "sub", source_folder=str(tmp_path / "specs" / "sub"))
    swap(tmp_path / "specs" / "sub", tmp_path / "elsewhere")  # between the check and the launch
    placed = backend.place(GangRequest("j", 0, (SlotRequest(checked.key, checked.resources),)))
    assert isinstance(placed, Placement)
    launch = replace(checked, slot=placed.slots[0])
    try:
        with pytest.raises(BackendError, match="changed as it was launched"):
            backend.launch(placed, [launch])
        assert not backend.observe()
    finally:
        backend.close()


def test_in_git_mode_the_snapshot_in_the_state_folder_is_the_root_and_nothing_above_it(tree: Path) -> None:
    snapshot = tree / "state" / "git" / "revisions" / "c0ffee"
    (snapshot / "jobs" / "sub").mkdir(parents=True)
    (tree / "state" / "local").mkdir()
    ok = paths(tree).checked(launch_of(snapshot / "jobs", "sub"), str(snapshot), host_paths_here=True)
    assert ok.source_folder == str(snapshot / "jobs" / "sub")
    assert paths(tree).checked(launch_of(snapshot / "jobs", None), str(snapshot), host_paths_here=True)
    (snapshot / "jobs" / "up").symlink_to(tree / "state" / "local")
    with pytest.raises(LaunchRefused, match="outside"):
        paths(tree).checked(launch_of(snapshot / "jobs", "up"), str(snapshot), host_paths_here=True)


def test_a_missing_source_folder_is_no_link() -> None:
    assert no_link_in(Path("/nonexistent-folder/sub"))
    assert no_link_in(Path("/"))


def test_a_batch_is_checked_as_each_launch_is_with_every_distinct_path_resolved_once(tree: Path) -> None:
    specs = tree / "specs"
    (specs / "link").symlink_to(specs / "sub")
    volume = Volume(str(tree / "data" / "in"), "/in")
    one = launch_of(specs, "link", volumes=(volume,))
    batch = [replace(one, key=TaskKey(Role.WORKER, i), task_id=f"j.u.worker-{i}.1") for i in range(50)]
    calls: list[str] = []

    def counting(path: str) -> str:
        calls.append(path)
        return os.path.realpath(path)

    counted = replace(paths(tree, (str(tree / "data"),)), resolve=counting)
    together = counted.checked_all(batch, str(specs), host_paths_here=True)
    alone = [paths(tree, (str(tree / "data"),)).checked(t, str(specs), host_paths_here=True) for t in batch]
    assert together == alone
    assert all(t.source_folder == str(specs / "sub") for t in together)
    assert sorted(calls) == sorted(set(calls)), "each distinct path resolved once for the batch"
    (specs / "link").unlink()
    (specs / "link").symlink_to(tree / "state")  # swapped before the next batch: refused
    with pytest.raises(LaunchRefused, match="worker-0: workingDir link leads to"):
        counted.checked_all(batch, str(specs), host_paths_here=False)
