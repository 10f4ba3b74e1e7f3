"""A volume's host folder swapped for a link to ``/etc`` between the controller's check and the
engine's mount never mounts ``/etc`` (backends/local/pinned.py): the launcher opens the checked
folder without following links and has the engine mount that opened folder, not its path
walked again. Real folders swapped by two renames every 4 ms, the controller's check
(controller/launchpaths.py), the local backend's launcher and a real Docker engine.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from tests.backend_conformance import Harness, gang, launches, look, place_soon, wait_for
from tests.conftest import worker_ports
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.backends.local.docker_runtime import container_name, container_options, owner_of
from tfdeclare.backends.local.pinned import PathChanged, open_no_follow
from tfdeclare.backends.local.record import TaskRuntime
from tfdeclare.controller.launchpaths import LaunchPaths, LaunchRefused
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.run.tasks import Slot, TaskKey, TaskLaunch
from tfdeclare.core.spec.keys import Volume
from tfdeclare.core.spec.resources import Resources

INSIDE = "MARKER-of-the-allowed-folder"
LAUNCHES = 12  # launches that pass the controller's check (of at most 300 tried)
# What the host's /etc would show: its listing has passwd; the first line of shadow, if any.
COMMAND = ["sh", "-c", "ls /data; head -n 1 /data/shadow 2>/dev/null; true"]


SWAP = """
import os, random, sys, time
d, real, link = sys.argv[1:4]
while True:  # about 4 ms each way, jittered (a fixed period can fall in step with the test's)
    os.rename(d, real); os.rename(link, d)  # d leads to /etc now
    time.sleep(random.uniform(0.001, 0.007))
    os.rename(d, link); os.rename(real, d)  # d is the real folder again
    time.sleep(random.uniform(0.001, 0.007))
"""


class Swapper:
    """``allowed/d`` swapped between a real folder and a link to ``/etc`` every 4 ms, by two
    renames each way (what anyone who may write ``allowed`` can do), by another process."""

    def __init__(self, allowed: Path) -> None:
        self.d, self.real, self.link = allowed / "d", allowed / "real", allowed / "link"
        self.real.mkdir()
        (self.real / INSIDE).write_text("inside\n")
        self.link.symlink_to("/etc")
        self.real.rename(self.d)

    def __enter__(self) -> Swapper:
        argv = [sys.executable, "-c", SWAP, str(self.d), str(self.real), str(self.link)]
        self.process = subprocess.Popen(argv)
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()


def test_a_folder_opened_without_following_links_refuses_a_link_anywhere(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_text("x")
    (tmp_path / "to-a").symlink_to(tmp_path / "a")
    (tmp_path / "a" / "to-b").symlink_to(tmp_path / "a" / "b")
    for fine in (tmp_path / "a" / "b", tmp_path / "a" / "f", tmp_path / "a" / "b" / "."):
        os.close(open_no_follow(str(fine)))
    for swapped in (tmp_path / "to-a" / "b", tmp_path / "a" / "to-b", tmp_path / "a" / "b" / ".." / "f"):
        with pytest.raises(PathChanged):
            os.close(open_no_follow(str(swapped)))
    with pytest.raises(FileNotFoundError):
        open_no_follow(str(tmp_path / "a" / "missing"))


@pytest.mark.slow
@pytest.mark.docker
def test_a_volume_swapped_for_a_link_after_its_check_never_mounts_what_the_link_leads_to(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    allowed = tmp_path / "host"
    allowed.mkdir()
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    state = tmp_path / "state"
    harness = Harness(
        lambda: LocalBackend(state, capacity, runtime=LocalRuntime.DOCKER), tmp_path, image=base_image
    )
    backend = harness.backend()
    checks = LaunchPaths({str(state): "tfdeclare's own folder"}, (str(allowed),))
    outcomes = dict.fromkeys(("refused by the check", "launched", "refused at the mount", "ran"), 0)
    logs = []
    ours = {"label": f"tfdeclare.owner={owner_of(state / 'local')}"}
    try:
        with Swapper(allowed) as swapper:
            for _ in range(300):
                if outcomes["launched"] >= LAUNCHES and outcomes["ran"] > 0:
                    break
                placement = place_soon(backend, gang("swap", 1))
                (task,) = launches(harness, placement, COMMAND)
                task = replace(task, volumes=(Volume(str(swapper.d), "/data"),))
                time.sleep(random.uniform(0, 0.01))  # at any point of the swapper's cycle
                try:
                    task = checks.checked(task, None, host_paths_here=True)
                except LaunchRefused:
                    outcomes["refused by the check"] += 1  # a link right then: the static case
                    backend.release(placement)
                    continue
                outcomes["launched"] += 1
                backend.launch(placement, [task])
                seen = wait_for(backend, lambda ts, i=task.task_id: i in ts and ts[i].state.ended, 60)
                look(backend)  # its output kept in the log, its container removed
                log = backend.read_log(task.task_id).data.decode(errors="replace")
                logs.append(log)
                if "changed since it was checked" in (seen[task.task_id].message or "") + log:
                    outcomes["refused at the mount"] += 1
                elif INSIDE in log:
                    outcomes["ran"] += 1
        leaked = [log for log in logs if "passwd" in log or "root:" in log]
        assert not leaked, f"a container saw the host's /etc ({outcomes}): {leaked[0]}"
        assert outcomes["launched"] >= LAUNCHES and outcomes["ran"] > 0, outcomes
        print(outcomes)
    finally:
        harness.close()
        for container in docker_client.containers.list(all=True, filters=ours, ignore_removed=True):
            container.remove(force=True)
        for volume in docker_client.volumes.list(filters=ours):
            volume.remove(force=True)


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_made_but_never_started_is_made_anew_never_started_with_stale_pins(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """A launcher that died between making and starting a container leaves volumes naming its
    descriptors (``/proc/<its pid>/fd/<n>``), which another process may hold by then, open on
    anything. The next controller removes that container and makes it anew, pinned again."""
    allowed = tmp_path / "host"
    (allowed / "d").mkdir(parents=True)
    (allowed / "d" / INSIDE).write_text("inside\n")
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    state = tmp_path / "state"
    harness = Harness(
        lambda: LocalBackend(state, capacity, runtime=LocalRuntime.DOCKER), tmp_path, image=base_image
    )
    ours = {"label": f"tfdeclare.owner={owner_of(state / 'local')}"}
    # Another process, whose pid and descriptor the dead launcher's volume names now: /etc.
    impostor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, time; print(os.open('/etc', os.O_RDONLY), flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert impostor.stdout is not None
        stale = f"/proc/{impostor.pid}/fd/{int(impostor.stdout.readline())}"
        crashed = harness.backend()
        assert isinstance(crashed, LocalBackend)
        placement = place_soon(crashed, gang("stale", 1))
        (task,) = launches(harness, placement, COMMAND)
        task = replace(task, volumes=(Volume(str(allowed / "d"), "/data"),))
        folder = crashed._write_folder(task, crashed.drivers[TaskRuntime.DOCKER])
        assert folder is not None
        crashed.release(placement)
        crashed.close()
        # What the dead launcher left: its container made, not started, its volume stale.
        name = container_name(owner_of(state / "local"), task.task_id)
        volume = docker_client.volumes.create(
            f"{name}-m9-stale",
            driver="local",
            driver_opts={"type": "none", "o": "bind", "device": stale},
            labels={"tfdeclare.owner": owner_of(state / "local"), "tfdeclare.container": name},
        )
        options = container_options(folder.task, owner_of(state / "local"))
        options["mounts"] = [
            m if m["Target"] != "/data" else Mount("/data", volume.name, type="volume", read_only=True)
            for m in options["mounts"]
        ]
        docker_client.containers.create(**options)

        after = harness.backend()
        wait_for(after, lambda ts: ts[task.task_id].state.ended, 60)
        look(after)
        log = after.read_log(task.task_id).data.decode(errors="replace")
        assert "made but never started" in log, log
        assert INSIDE in log and "passwd" not in log, log
        assert docker_client.volumes.list(filters=ours) == [], "its volumes removed with it"
    finally:
        impostor.kill()
        impostor.wait()
        harness.close()
        for container in docker_client.containers.list(all=True, filters=ours, ignore_removed=True):
            container.remove(force=True)
        for each in docker_client.volumes.list(filters=ours):
            each.remove(force=True)


def test_a_path_that_cannot_be_resolved_as_it_is_swapped_is_refused_not_an_error(tmp_path: Path) -> None:
    """``realpath`` meets a link that is a folder again when it reads it (EINVAL): the launch
    is refused like any other, so the pass goes on and releases the placement."""
    (tmp_path / "host" / "d").mkdir(parents=True)

    def swapped_as_read(path: str) -> str:
        if path.endswith("/d"):
            raise OSError(22, "Invalid argument", path)
        return os.path.realpath(path)

    checks = LaunchPaths({}, (str(tmp_path / "host"),), resolve=swapped_as_read)
    launch = replace(
        TaskLaunch(
            task_id="j.u.worker-0.1", job="j", key=TaskKey(Role.WORKER, 0), attempt=0, spec_hash="s",
            config_hash="c", argv=("true",), env=(), resources=Resources(0.1, 64, 0),
            slot=Slot(TaskKey(Role.WORKER, 0), "127.0.0.1", 1),
        ),
        volumes=(Volume(str(tmp_path / "host" / "d"), "/data"),),
    )  # fmt: skip
    with pytest.raises(LaunchRefused, match=r"worker-0: a folder it uses .*/host/d could not be resolved"):
        checks.checked_all([launch], None, host_paths_here=True)


@pytest.mark.slow
@pytest.mark.docker
def test_the_pinned_folders_volumes_go_with_their_container_also_one_removed_outside(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    state = tmp_path / "state"
    harness = Harness(
        lambda: LocalBackend(state, capacity, runtime=LocalRuntime.DOCKER), tmp_path, image=base_image
    )
    backend = harness.backend()
    ours = {"label": f"tfdeclare.owner={owner_of(state / 'local')}"}
    try:
        placement = place_soon(backend, gang("outside", 2))
        tasks = launches(harness, placement, ["sleep", "60"])
        backend.launch(placement, tasks)
        ids = [t.task_id for t in tasks]
        wait_for(backend, lambda ts: all(ts[i].state is TaskState.RUNNING for i in ids), 60)
        assert len(docker_client.volumes.list(filters=ours)) >= 2, "its folders pinned"
        (outside, stopped) = (container_name(owner_of(state / "local"), i) for i in ids)
        docker_client.containers.get(outside).remove(force=True)  # `docker rm -f`, not tfdeclare
        backend.stop([ids[1]], 1.0)
        wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids), 60)
        look(backend)  # their ends recorded, what is left of them removed
        for name in (outside, stopped):
            left = docker_client.volumes.list(filters={"label": f"tfdeclare.container={name}"})
            assert left == [], f"{name} left {[v.name for v in left]}"
    finally:
        harness.close()
        for container in docker_client.containers.list(all=True, filters=ours, ignore_removed=True):
            container.remove(force=True)
        for each in docker_client.volumes.list(filters=ours):
            each.remove(force=True)
