"""The local backend's Docker runtime (tfdeclare/backends/local/docker_runtime.py): what a
task's container is made of (pure, no engine: GPUs, mounts, limits, labels), and, with a real
engine, what the conformance suite does not ask: limits enforced by the engine, labels, the
container removed once its end is recorded, and adoption by a restarted controller."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import Harness, gang, launches, look, place_soon, wait_for
from tests.conftest import worker_ports
from tests.engine_proxy import EngineProxy
from tests.waiting import wait_until
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.backends.local.docker_driver import DockerDriver
from tfdeclare.backends.local.docker_runtime import (
    BindMount,
    _unix_time,
    container_name,
    container_options,
    mounts_for,
    owner_of,
)
from tfdeclare.backends.local.engine_outages import HOLD_S
from tfdeclare.backends.local.prober import probe
from tfdeclare.backends.local.record import LocalTask, TaskRuntime
from tfdeclare.core.enums import EndCause, Role, TaskState
from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey
from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind
from tfdeclare.core.spec.resources import Resources


def _spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "taskId": "j.a0.l1.worker-0",
        "job": "j",
        "role": "worker",
        "index": 0,
        "attempt": 0,
        "configHash": "c" * 16,
        "specHash": "s" * 64,
        "argv": ["python", "train.py", "a;b"],
        "env": {"TF_CONFIG": "{}"},
        "cwd": "/state/local/work/j/worker-0",
        "workDir": "/state/local/work/j/worker-0",
        "sourceDir": "/specs",
        "resources": [1.5, 2048, 0],
        "gpuDevices": [],
        "image": "tf:2",
        "user": "1000:1000",
        "volumes": [],
        "runtime": "docker",
        "host": "127.0.0.1",
        "port": 20000,
        "logPath": "/state/local/logs/j/j.a0.l1.worker-0.log",
    }
    spec.update(overrides)
    return spec


def _task(**overrides: Any) -> LocalTask:
    """A container task's record, as ``task.json`` holds it."""
    return LocalTask.from_json(_spec(**overrides))


# ---- GPUs: exactly the devices placed --------------------------------------------------------


def _gpu_backend(tmp_path: Path) -> LocalBackend:
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=16, mem_mib=65536, gpus=4, port_first=first, port_last=last)
    return LocalBackend(tmp_path / "state", capacity, runtime=LocalRuntime.DOCKER)


def _devices_of(placement: Placement) -> dict[str, list[str]]:
    """Slot -> the device ids its container's one device request names."""
    out: dict[str, list[str]] = {}
    for slot in placement.slots:
        options = container_options(_task(gpuDevices=list(slot.gpu_devices), resources=[1, 1024, 0]), "o")
        requests = options["device_requests"]
        if not requests:
            out[slot.key.name] = []
            assert options["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
            continue
        (request,) = requests
        assert request["Driver"] == "nvidia" and request["Count"] == 0, "never 'all', never a bare count"
        assert request["Capabilities"] == [["gpu"]]
        assert options["environment"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(request["DeviceIDs"])
        assert "CUDA_VISIBLE_DEVICES" not in options["environment"], "the container numbers its own"
        out[slot.key.name] = request["DeviceIDs"]
    return out


def test_gpu_tasks_request_exactly_the_host_devices_placed(tmp_path: Path) -> None:
    backend = _gpu_backend(tmp_path)
    first = backend.place(
        GangRequest(
            "first",
            0,
            (
                SlotRequest(TaskKey(Role.CHIEF, 0), Resources(1, 1024, 1)),
                SlotRequest(TaskKey(Role.WORKER, 0), Resources(1, 1024, 0)),
            ),
        )
    )
    second = backend.place(
        GangRequest(
            "second",
            0,
            (
                SlotRequest(TaskKey(Role.WORKER, 0), Resources(1, 1024, 2)),
                SlotRequest(TaskKey(Role.WORKER, 1), Resources(1, 1024, 1)),
            ),
        )
    )
    assert isinstance(first, Placement) and isinstance(second, Placement)
    assert _devices_of(first) == {"chief-0": ["0"], "worker-0": []}
    assert _devices_of(second) == {"worker-0": ["1", "2"], "worker-1": ["3"]}
    backend.release(first)
    backend.release(second)
    backend.close()


# ---- what a container is made of ------------------------------------------------------------


def test_a_container_gets_the_tasks_limits_labels_network_and_argv() -> None:
    options = container_options(_task(), "owner1")
    assert options["command"] == ["python", "train.py", "a;b"], "argv as a list, never a shell"
    assert options["name"] == container_name("owner1", "j.a0.l1.worker-0")
    assert options["network_mode"] == "host" and options["init"] is True
    assert options["nano_cpus"] == 1_500_000_000
    assert options["mem_limit"] == options["memswap_limit"] == 2048 << 20
    assert options["user"] == "1000:1000"
    assert options["working_dir"] == "/state/local/work/j/worker-0"
    assert options["environment"]["HOME"] == "/state/local/work/j/worker-0"
    assert options["labels"] == {
        "tfdeclare.owner": "owner1",
        "tfdeclare.task-id": "j.a0.l1.worker-0",
        "tfdeclare.job": "j",
        "tfdeclare.role": "worker",
        "tfdeclare.index": "0",
        "tfdeclare.attempt": "0",
        "tfdeclare.spec-hash": "s" * 64,
        "tfdeclare.config-hash": "c" * 16,
    }
    assert container_options(_task(env={"HOME": "/home/me"}), "o")["environment"]["HOME"] == "/home/me"


def test_mounts_are_the_tasks_folders_then_the_spec_volumes_read_only_unless_rw() -> None:
    volumes = [
        {"hostPath": "/data", "containerPath": "/data", "mode": "ro"},
        {"hostPath": "/ckpt", "containerPath": "/ckpt", "mode": "rw"},
    ]
    assert mounts_for("/w", "/specs", volumes) == [
        BindMount("/w", "/w", read_only=False),
        BindMount("/specs", "/specs", read_only=True),
        BindMount("/data", "/data", read_only=True),
        BindMount("/ckpt", "/ckpt", read_only=False),
    ]
    replaced = mounts_for("/w", "/specs", [{"hostPath": "/other", "containerPath": "/specs", "mode": "rw"}])
    assert replaced == [BindMount("/w", "/w", False), BindMount("/other", "/specs", False)]
    assert mounts_for("/w", None, []) == [BindMount("/w", "/w", False)]


def test_a_progress_check_of_a_container_task_looks_only_through_its_mounts(tmp_path: Path) -> None:
    """The container's path, not this machine's: a spec author must not learn through the
    Unhealthy message whether (and when) a file of the controller's machine changed that the
    container cannot see. Looked at where a mount puts it; a path no mount holds, or that a
    link (the task can make one in its folder) leads out of its mount, fails the probe unread."""
    work, data, outside = tmp_path / "work", tmp_path / "data", tmp_path / "host-only"
    for folder in (work, data, outside):
        folder.mkdir()
        (folder / "ckpt").write_text("written now")
    (work / "out").symlink_to(outside)
    task = _task(
        cwd=str(work),
        workDir=str(work),
        sourceDir=None,
        volumes=[{"hostPath": str(data), "containerPath": "/data", "mode": "rw"}],
    )

    def probed(path: str) -> str | None:
        check = HealthCheck(HealthCheckKind.PROGRESS, path=path, stalled_s=60.0)
        return probe(task, check, clock=time.time)

    assert probed("ckpt") is None, "its working folder, mounted at its own path"
    assert probed(str(work / "ckpt")) is None
    assert probed("/data/ckpt") is None, "a volume: looked at where it comes from"
    (data / "ckpt").unlink()
    assert "/data/ckpt" in (probed("/data/ckpt") or ""), "gone: a failure, as for a process"
    for unseen in (str(outside / "ckpt"), "out/ckpt", "../host-only/ckpt", "/etc/hostname"):
        assert "is not in a folder the container shares with this machine" in (probed(unseen) or ""), unseen


def test_engine_times() -> None:
    assert _unix_time("1970-01-01T00:00:10.5Z") == pytest.approx(10.5)
    assert _unix_time("2026-12-03T16:00:00.123456789Z") == pytest.approx(1796313600.123456789)
    assert _unix_time("0001-01-01T00:00:00Z") is None
    assert _unix_time("") is None


def test_the_owner_is_the_state_folder(tmp_path: Path) -> None:
    assert owner_of(tmp_path / "a") == owner_of(tmp_path / "x" / ".." / "a") != owner_of(tmp_path / "b")


# ---- with a real engine ----------------------------------------------------------------------


def _harness(tmp_path: Path, base_image: str) -> Harness:
    first, last = worker_ports()
    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=first, port_last=last)
    return Harness(
        lambda: LocalBackend(tmp_path / "state", capacity, runtime=LocalRuntime.DOCKER),
        tmp_path,
        image=base_image,
        python="python3",
    )


def _owned(docker_client: Any, owner: str, *, running: bool = False) -> list[Any]:
    """The engine's containers of this owner (the running ones, or all)."""
    return list(
        docker_client.containers.list(
            ignore_removed=True, all=not running, filters={"label": f"tfdeclare.owner={owner}"}
        )
    )


def _remove_owned(docker_client: Any, owner: str) -> None:
    for container in _owned(docker_client, owner):
        container.remove(force=True)


@contextmanager
def _owned_harness(tmp_path: Path, base_image: str, docker_client: Any) -> Iterator[tuple[Harness, str]]:
    """``_harness`` and the owner its containers are labelled with; on the way out every
    container of that owner is removed and the harness closed."""
    harness = _harness(tmp_path, base_image)
    owner = owner_of(tmp_path / "state" / "local")
    try:
        yield harness, owner
    finally:
        _remove_owned(docker_client, owner)
        harness.close()


CGROUP = (
    "import json, os\n"
    "def read(*names):\n"
    "    for name in names:\n"
    "        if os.path.exists(name):\n"
    "            return open(name).read().strip()\n"
    "print('LIMITS', json.dumps({'cpu': read('/sys/fs/cgroup/cpu.max', '/sys/fs/cgroup/cpu/cpu.cfs_quota_us'),"
    " 'mem': read('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'),"
    " 'uid': os.getuid(), 'cwd': os.getcwd(), 'work': os.environ['TFDECLARE_WORK_DIR']}), flush=True)\n"
)


@pytest.mark.slow
@pytest.mark.docker
def test_limits_are_enforced_by_the_engine_and_the_container_goes_once_recorded(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    try:
        placement = place_soon(backend, gang("limits", 1, Resources(1.5, 256, 0)))
        (task,) = launches(harness, placement, ["python3", "-c", CGROUP], resources=Resources(1.5, 256, 0))
        backend.launch(placement, [task])
        tasks = wait_for(backend, lambda ts: task.task_id in ts and ts[task.task_id].state.ended, 60)
        look(backend)  # the next pass records its end and removes the container
        assert tasks[task.task_id].state is TaskState.SUCCEEDED
        log = backend.read_log(task.task_id).data.decode()
        limits = json.loads(log.split("LIMITS ", 1)[1].splitlines()[0])
        assert limits["cpu"].split()[0] == "150000", limits  # 1.5 cpus of a 100000 us period
        assert int(limits["mem"]) == 256 << 20
        assert limits["cwd"] == limits["work"]
        name = container_name(owner_of(tmp_path / "state" / "local"), task.task_id)
        assert docker_client.containers.list(ignore_removed=True, all=True, filters={"name": name}) == [], (
            "removed once recorded"
        )
        assert tasks[task.task_id].exit_code == 0 and tasks[task.task_id].finished_at is not None
    finally:
        harness.close()


@pytest.mark.slow
@pytest.mark.docker
def test_a_restarted_controller_adopts_running_containers_without_duplicates(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    with _owned_harness(tmp_path, base_image, docker_client) as (harness, owner):
        first = harness.backend()
        placement = place_soon(first, gang("adopt", 3))
        tasks = launches(harness, placement, harness.sleeper)
        first.launch(placement, tasks)
        ids = [t.task_id for t in tasks]
        wait_for(first, lambda ts: all(ts.get(i) and ts[i].state is TaskState.RUNNING for i in ids), 60)
        first.close()
        second = harness.backend()  # a new controller over the same state
        second.launch(placement, tasks)  # a retried launch: never a second container
        adopted = wait_for(
            second, lambda ts: all(ts.get(i) and ts[i].state is TaskState.RUNNING for i in ids)
        )
        assert {adopted[i].key.index for i in ids} == {0, 1, 2}
        running = _owned(docker_client, owner, running=True)
        assert sorted(c.labels["tfdeclare.task-id"] for c in running) == sorted(ids)
        second.stop(ids, 1.0)
        ended = wait_for(second, lambda ts: all(ts[i].state.ended for i in ids), 30)
        assert {ended[i].state for i in ids} == {TaskState.STOPPED}
        look(second)  # the next pass records their ends and removes the containers
        assert _owned(docker_client, owner) == []


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.docker
def test_a_controller_killed_mid_launch_leaves_no_duplicate_and_the_next_adopts_all(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """`apply` SIGKILLed while it makes a 12-container job's containers; the next `apply`
    makes the ones that were never made, adopts the rest, and no task runs twice."""
    from tests.conftest import cli, job_yaml

    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text("local: {cpus: 64, mem: 64Gi, gpus: 0}\n")
    (tmp_path / "specs" / "j.yaml").write_text(
        job_yaml("crash", workers=12, command="[sleep, '300']", extra=f"  image: {base_image}\n")
    )
    ours = {"label": f"tfdeclare.owner={owner_of(tmp_path / '.tfdeclare' / 'local')}"}
    first = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # ignore_removed: a container being made can be listed a moment before it can be inspected
        made = lambda: len(docker_client.containers.list(all=True, filters=ours, ignore_removed=True)) >= 3  # noqa: E731
        wait_until(made, 60, what="3 containers made", interval=0.01)
        first.kill()
        first.wait()
        again = cli("apply", "specs", cwd=tmp_path)
        assert again.returncode == 0, again.stderr

        def all_running() -> str | None:  # each `status --refresh` is one more controller pass
            status = cli("status", "crash", "--refresh", "-o", "json", cwd=tmp_path).stdout
            running = docker_client.containers.list(filters=ours, ignore_removed=True)
            return status if len(running) == 12 and status.count('"state": "running"') == 12 else None

        wait_until(all_running, 60, what="12 containers running, as status says", interval=0.2)
        every = docker_client.containers.list(all=True, filters=ours, ignore_removed=True)
        slots = [(c.labels["tfdeclare.role"], c.labels["tfdeclare.index"]) for c in every]
        assert len(every) == 12 and len(set(slots)) == 12, f"a slot ran twice: {sorted(slots)}"
        assert cli("delete", "crash", cwd=tmp_path).returncode == 0
        left = lambda: docker_client.containers.list(filters=ours, ignore_removed=True)  # noqa: E731
        wait_until(
            lambda: not left(),
            60,
            what=lambda: f"delete to stop every container; left {left()}",
            interval=0.2,
        )
    finally:
        for container in docker_client.containers.list(all=True, filters=ours, ignore_removed=True):
            container.remove(force=True)


@pytest.mark.slow
@pytest.mark.docker
def test_a_task_folder_whose_container_was_never_made_is_made_by_the_next_controller(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """The crash point between writing a task's folder and making its container: what a
    controller killed there leaves is the folder alone (``_write_folder`` writes exactly that).
    The next controller makes the container, once, without counting a failure."""
    with _owned_harness(tmp_path, base_image, docker_client) as (harness, owner):
        crashed = harness.backend()
        placement = place_soon(crashed, gang("late", 1))
        (task,) = launches(harness, placement, harness.sleeper)
        assert isinstance(crashed, LocalBackend)
        made = crashed._write_folder(task, crashed.drivers[TaskRuntime.DOCKER])
        assert made is not None  # the folder, and no container
        crashed.release(placement)
        crashed.close()
        assert _owned(docker_client, owner) == []
        after = harness.backend()
        tasks = wait_for(after, lambda ts: ts[task.task_id].state is TaskState.RUNNING, 60)
        assert tasks[task.task_id].exit_code is None
        made = _owned(docker_client, owner)
        assert [c.labels["tfdeclare.task-id"] for c in made] == [task.task_id]
        assert b"container was never made" in after.read_log(task.task_id).data
        for _ in range(3):  # more passes make nothing more
            look(after)
        assert len(_owned(docker_client, owner)) == 1


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_running_before_its_launch_is_recorded_reads_tfdeclares_own_lines(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """The engine runs a container a moment before its launcher records ``launch.json`` (where
    tfdeclare's own lines end): a read in between gives those lines, not the container's
    output from offset 0 (what a test once saw as an empty log after the task ran)."""
    with _owned_harness(tmp_path, base_image, docker_client) as (harness, _owner):
        backend = harness.backend()
        assert isinstance(backend, LocalBackend)
        placement = place_soon(backend, gang("early", 1))
        (task,) = launches(harness, placement, harness.sleeper)
        driver = backend.drivers[TaskRuntime.DOCKER]
        assert isinstance(driver, DockerDriver)
        folder = backend._write_folder(task, driver)
        assert folder is not None
        folder.note("made, its launch not yet recorded")
        driver.engine.make(folder.task)  # what its launcher does just before it records the launch
        assert folder.launch() == {}
        assert b"made, its launch not yet recorded" in backend.read_log(task.task_id).data


# ---- stop errors surface; follow reads only what is new ---------------------------------------


def _behind_a_proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> EngineProxy:
    engine = os.environ["DOCKER_HOST"].removeprefix("unix://")
    proxy = EngineProxy(engine, tmp_path / "engine.sock")
    monkeypatch.setenv("DOCKER_HOST", proxy.address)  # what the backend's engine client connects to
    return proxy


@pytest.mark.slow
@pytest.mark.docker
def test_a_stop_the_engine_refuses_is_a_backend_error_and_the_task_is_killed(
    tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine answers a stop only once the container has stopped, so the backend asks
    for it on a thread; what the engine says there is not lost: the next upkeep reports it
    as a ``BackendError`` (the controller's pass lists it) and kills the container."""
    proxy = _behind_a_proxy(tmp_path, monkeypatch)
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    try:
        placement = place_soon(backend, gang("refused", 1))
        (task,) = launches(harness, placement, harness.sleeper)
        backend.launch(placement, [task])
        wait_for(backend, lambda ts: ts[task.task_id].state is TaskState.RUNNING, 60)
        proxy.refuse = lambda line: line.startswith(b"POST ") and b"/stop" in line
        backend.stop([task.task_id], 30.0)  # returns at once; the engine refuses on the thread

        def refusal() -> str | None:
            try:
                backend.tend()
            except BackendError as err:
                return str(err)
            return None

        reported = wait_until(refusal, 10, what="the refused stop reported")
        assert task.task_id in reported and "did not stop its container" in reported
        assert "refused" in reported, reported
        ended = wait_for(backend, lambda ts: ts[task.task_id].state.ended, 30)
        assert ended[task.task_id].state is TaskState.STOPPED, "killed well before its 30 s grace"
    finally:
        harness.close()
        _remove_owned(docker_client, owner_of(tmp_path / "state" / "local"))
        proxy.close()


@pytest.mark.slow
@pytest.mark.docker
def test_a_stop_with_the_engine_gone_is_a_backend_error_at_once(
    tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = _behind_a_proxy(tmp_path, monkeypatch)
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    try:
        placement = place_soon(backend, gang("gone", 1))
        (task,) = launches(harness, placement, harness.sleeper)
        backend.launch(placement, [task])
        wait_for(backend, lambda ts: ts[task.task_id].state is TaskState.RUNNING, 60)
        proxy.close()
        with pytest.raises(BackendError, match=r"cannot stop .*did not answer"):
            backend.stop([task.task_id], 1.0)
        assert isinstance(backend, LocalBackend)
        assert (backend.tasks_dir / task.task_id / "stop.json").exists(), "the request stays for later"
    finally:
        harness.close()
        _remove_owned(docker_client, owner_of(tmp_path / "state" / "local"))


LOUD_THEN_SLOW = (
    "import sys, time\n"
    "line = 'x' * 99 + '\\n'\n"
    "sys.stdout.write(line * 20000)\n"  # 2 MB at once
    "sys.stdout.flush()\n"
    "for i in range(400):\n"
    "    print('tick', i, flush=True)\n"
    "    if i % 10 == 0:\n"
    "        print('to stderr', i, file=sys.stderr, flush=True)\n"
    "    time.sleep(0.02)\n"
)


@pytest.mark.slow
@pytest.mark.docker
def test_following_a_containers_large_log_reads_only_what_is_new(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """``logs --follow`` asks for the next offset again and again: once the 2 MB written at
    first have been read (and the reads are past them by more than the 0.1 s each read asks
    again), each read takes from the engine only what came since, and the bytes handed out
    are the log, no more, no less."""
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    try:
        placement = place_soon(backend, gang("loud", 1))
        (task,) = launches(harness, placement, ["python3", "-c", LOUD_THEN_SLOW])
        backend.launch(placement, [task])
        assert isinstance(backend, LocalBackend)
        engine = backend.drivers[TaskRuntime.DOCKER].engine  # type: ignore[attr-defined]
        followed = b""
        reads = 0
        read_from_engine: list[int] = []

        def follow() -> bool:
            nonlocal followed, reads
            chunk = backend.read_log(task.task_id, len(followed))
            followed += chunk.data
            reads += 1
            if b"tick 20\n" in followed:  # caught up with the 2 MB, and past them by 0.4 s
                read_from_engine.append(engine.log_bytes_read)
            return chunk.complete

        wait_until(follow, 60, what="the log complete", interval=0.02)
        look(backend)  # the end recorded, the output kept in the log file
        assert followed == backend.read_log(task.task_id, 0, 1 << 30).data, "every byte once, in order"
        assert followed.count(b"tick ") == 400 and followed.count(b"to stderr") == 40
        assert len(read_from_engine) > 20, "followed while it wrote"
        total = read_from_engine[-1] - read_from_engine[0]
        # each read: what is new plus at most 0.1 s of what was read (about 16 KB in all, with
        # the engine's timestamps; the whole log each time, as before, would be 2 MB a read)
        assert total < 200_000, (total, len(read_from_engine))
    finally:
        harness.close()
        _remove_owned(docker_client, owner_of(tmp_path / "state" / "local"))


@pytest.mark.slow
@pytest.mark.docker
def test_a_look_records_and_removes_nothing_an_upkeep_or_close_does(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """``observe`` (what ``place`` calls) reports an ended container as ended and leaves it
    be; its end is recorded and the container removed by ``tend``, or by ``close`` when the
    controller exits right after the pass that saw it end (``apply --wait``)."""
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    name = ""
    try:
        placement = place_soon(backend, gang("quick", 1))
        (task,) = launches(harness, placement, ["python3", "-c", "print('done')"])
        backend.launch(placement, [task])
        assert isinstance(backend, LocalBackend)
        name = container_name(owner_of(tmp_path / "state" / "local"), task.task_id)
        wait_until(lambda: {t.task_id: t for t in backend.observe()}[task.task_id].state.ended, 60)
        for _ in range(3):
            (seen,) = backend.observe()
            assert seen.state is TaskState.SUCCEEDED and seen.exit_code == 0
        assert docker_client.containers.get(name).status == "exited", "a look removes nothing"
        assert not (backend.tasks_dir / task.task_id / "exit.json").exists(), "a look records nothing"
        assert b"done" in backend.read_log(task.task_id).data  # from the engine, while it is there
        backend.close()
        assert docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True) == []
        assert json.loads((backend.tasks_dir / task.task_id / "exit.json").read_text())["exitCode"] == 0
        assert b"done" in backend.read_log(task.task_id).data  # from the file now
    finally:
        harness.close()
        _remove_owned(docker_client, owner_of(tmp_path / "state" / "local"))


@pytest.mark.slow
@pytest.mark.docker
def test_an_exec_health_check_runs_in_the_tasks_container(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """Issue 34: the command runs inside the container (its file system, its working folder)
    through the engine; when it starts failing, the task is reported unhealthy."""
    script = "import os, sys; sys.exit(0 if os.path.exists('alive') and os.path.exists('/etc/debian_version') else 5)"
    check = HealthCheck(
        HealthCheckKind.EXEC,
        command=("python3", "-c", script),
        period_s=0.2,
        timeout_s=5,
        failure_threshold=2,
    )
    with _owned_harness(tmp_path, base_image, docker_client) as (harness, _):
        backend = harness.backend()
        placement = place_soon(backend, gang("probed", 1))
        (task,) = [replace(t, health_check=check) for t in launches(harness, placement, harness.sleeper)]
        work = tmp_path / "state" / "local" / "work" / "probed" / "worker-0"
        work.mkdir(parents=True)
        (work / "alive").write_text("")
        backend.launch(placement, [task])
        wait_for(backend, lambda ts: task.task_id in ts and ts[task.task_id].state is TaskState.RUNNING, 60)
        time.sleep(2.0)  # some ten checks, every one passed
        assert wait_for(backend, lambda ts: True)[task.task_id].unhealthy == ""
        (work / "alive").unlink()
        found = wait_for(backend, lambda ts: bool(ts[task.task_id].unhealthy), 30)
        assert found[task.task_id].unhealthy.endswith("last: exited 5"), found[task.task_id].unhealthy
        backend.stop([task.task_id], 1.0)
        wait_for(backend, lambda ts: ts[task.task_id].state.ended, 30)


@pytest.mark.slow
@pytest.mark.docker
def test_a_container_that_ends_while_the_engine_is_away_is_a_platform_event(
    tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the backend sees of an engine restart: the engine stops answering, its containers
    are stopped (SIGTERM, then SIGKILL, as dockerd does on its way down), and it answers
    again with them exited 137. The task is FAILED with cause EngineRestart (kept in its
    exit.json for the next controller), not the job's own failure; a container that exits
    non-zero by itself with the engine there stays the job's."""
    proxy = _behind_a_proxy(tmp_path, monkeypatch)
    harness = _harness(tmp_path, base_image)
    backend = harness.backend()
    owner = owner_of(tmp_path / "state" / "local")
    try:
        placement = place_soon(backend, gang("engine", 2))
        tasks = launches(harness, placement, harness.sleeper)
        backend.launch(placement, tasks)
        wait_for(backend, lambda ts: all(ts[t.task_id].state is TaskState.RUNNING for t in tasks), 60)
        proxy.close()  # the engine goes away ...
        with pytest.raises(BackendError):
            look(backend)
        for task in tasks:  # ... stopping its containers as it goes
            docker_client.containers.get(container_name(owner, task.task_id)).stop(timeout=0)
        proxy = EngineProxy(proxy.engine_socket, proxy.path)  # and answers again
        seen = wait_for(backend, lambda ts: all(ts[t.task_id].state.ended for t in tasks), 30)
        for task in tasks:
            assert seen[task.task_id].state is TaskState.FAILED
            assert seen[task.task_id].cause is EndCause.ENGINE_RESTART, seen[task.task_id]
            assert "Docker engine" in seen[task.task_id].message
        look(backend)  # recorded and removed
        assert isinstance(backend, LocalBackend)
        for task in tasks:
            end = json.loads((backend.tasks_dir / task.task_id / "exit.json").read_text())
            assert end["cause"] == "EngineRestart" and end["containerRemoved"]
        harness.close()
        backend = harness.backend()  # a controller started afterwards reads it back
        after = {t.task_id: t for t in look(backend)}
        assert all(after[t.task_id].cause is EndCause.ENGINE_RESTART for t in tasks)

        own = place_soon(backend, gang("own", 1))  # the engine there all along: the job's own
        (failing,) = launches(harness, own, ["python3", "-c", "raise SystemExit(3)"])
        backend.launch(own, [failing])
        ended = wait_for(backend, lambda ts: failing.task_id in ts and ts[failing.task_id].state.ended, 60)
        assert ended[failing.task_id].exit_code == 3 and ended[failing.task_id].cause is EndCause.JOB
    finally:
        harness.close()
        _remove_owned(docker_client, owner)
        proxy.close()


@pytest.mark.slow
@pytest.mark.docker
def test_a_signals_end_seen_while_a_stopping_engine_still_answers_is_not_the_jobs(
    tmp_path: Path, docker_client: Any, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real engine's order: it stops its containers (SIGTERM, then SIGKILL) while it still
    answers, the listing and the inspect of an ended container included, and closes its API
    only after the last one. A look in that window sees them ended by a signal, the engine
    "up": not judged then (reported running, its message saying why) but once the engine has
    gone away within ``HOLD_S`` of the ends: EngineRestart, not the job's. (The old driver
    took them for the job's failure on first sight, counted against backoffLimit.)"""
    proxy = _behind_a_proxy(tmp_path, monkeypatch)
    harness = _harness(tmp_path, base_image)
    backend = harness.make()  # no watch thread: the test's looks are the only asks
    owner = owner_of(tmp_path / "state" / "local")
    try:
        placement = place_soon(backend, gang("stopping", 2))
        tasks = launches(harness, placement, harness.sleeper)
        backend.launch(placement, tasks)
        wait_for(backend, lambda ts: all(ts[t.task_id].state is TaskState.RUNNING for t in tasks), 60)
        first, second = tasks
        docker_client.containers.get(container_name(owner, first.task_id)).stop(timeout=10)  # 143
        docker_client.containers.get(container_name(owner, second.task_id)).kill()  # 137
        seen = {t.task_id: t for t in look(backend)}  # the engine answers: a stopping one does
        for task in tasks:
            assert seen[task.task_id].state is TaskState.RUNNING, seen[task.task_id]
            assert "said once the Docker engine has answered" in seen[task.task_id].message
        proxy.close()  # ... and then it closes its API
        with pytest.raises(BackendError):
            look(backend)
        proxy = EngineProxy(proxy.engine_socket, proxy.path)  # and answers again
        ended = wait_for(backend, lambda ts: all(ts[t.task_id].state.ended for t in tasks), 30)
        for task in tasks:
            assert ended[task.task_id].state is TaskState.FAILED
            assert ended[task.task_id].cause is EndCause.ENGINE_RESTART, ended[task.task_id]
        assert {ended[t.task_id].exit_code for t in tasks} == {143, 137}
    finally:
        backend.close()
        _remove_owned(docker_client, owner)
        proxy.close()


@pytest.mark.slow
@pytest.mark.docker
def test_a_signals_end_is_the_jobs_once_the_engine_has_answered_past_it(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    """The hold is bounded: a container killed with the engine staying up (an operator's
    ``docker kill``) is the job's once the engine has answered ``HOLD_S`` past its end (the
    driver's clock, injected here, moves past it)."""
    harness = _harness(tmp_path, base_image)
    backend = harness.make()
    assert isinstance(backend, LocalBackend)
    driver = backend.drivers[TaskRuntime.DOCKER]
    assert isinstance(driver, DockerDriver)
    ahead = [0.0]
    driver._clock = lambda: time.time() + ahead[0]
    owner = owner_of(tmp_path / "state" / "local")
    try:
        placement = place_soon(backend, gang("killed", 1))
        (task,) = launches(harness, placement, harness.sleeper)
        backend.launch(placement, [task])
        wait_for(backend, lambda ts: ts[task.task_id].state is TaskState.RUNNING, 60)
        docker_client.containers.get(container_name(owner, task.task_id)).kill()
        held = {t.task_id: t for t in look(backend)}[task.task_id]
        assert held.state is TaskState.RUNNING and "said once" in held.message, held
        assert driver.state_token()[-1] == ()  # nothing to judge yet
        ahead[0] = HOLD_S + 1  # the watch's next listing is an answer past the hold:
        assert driver.state_token()[-1] == (task.task_id,)  # a change, so a controller looks
        ended = wait_for(backend, lambda ts: ts[task.task_id].state.ended, 30)[task.task_id]
        assert (ended.state, ended.cause, ended.exit_code) == (TaskState.FAILED, EndCause.JOB, 137)
    finally:
        backend.close()
        _remove_owned(docker_client, owner)
