"""The emulator's containerizers on a real Docker engine: what `docker run` gets from a
TaskInfo (checked by `docker inspect` and by the task itself), the TASK_* states and
messages of the upstream executors, and the TaskInfos a real agent refuses."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import eventually
from tests.test_mesos_emulator_helpers import FAST, Subscriber, command_task, subscribe

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MIB = 1024 * 1024


@pytest.fixture
def emulator(docker_client: Any, tmp_path: Path) -> Iterator[Emulator]:
    with Emulator(**FAST, containerizers=("docker", "mesos"), sandbox_root=str(tmp_path / "agent")) as emu:
        yield emu
        assert emu.check_invariants() == []


@pytest.fixture
def subscribers() -> Iterator[list[Subscriber]]:
    made: list[Subscriber] = []
    yield made
    for sub in made:
        sub.close()


@pytest.fixture(scope="session")
def entrypoint_image(docker_client: Any, base_image: str) -> str:
    """The base image with an ENTRYPOINT and a WORKDIR, to tell the containerizers apart."""
    tag = f"tfdeclare-test-entrypoint:{base_image.split(':')[1]}"
    try:
        docker_client.images.get(tag)
    except Exception:  # docker.errors.ImageNotFound
        container = docker_client.containers.create(base_image, ["true"])
        try:
            repository, version = tag.split(":")
            container.commit(
                repository=repository,
                tag=version,
                changes=[
                    'ENTRYPOINT ["/bin/echo", "from-the-entrypoint"]',
                    "WORKDIR /srv",
                    "ENV FROM_IMAGE=yes",
                ],
            )
        finally:
            container.remove(force=True)
    return tag


def docker_task(
    task_id: str, offer: dict[str, Any], image: str, argv: list[str], **kwargs: Any
) -> dict[str, Any]:
    """A DOCKER task running ``argv`` after the image's entrypoint (``shell: false``)."""
    docker: dict[str, Any] = {"image": image, **kwargs.pop("docker", {})}
    container: dict[str, Any] = {"type": "DOCKER", "docker": docker, **kwargs.pop("container", {})}
    task = command_task(task_id, offer, argv[0], shell=False, arguments=argv[1:], **kwargs)
    task["container"] = container
    return task


def mesos_task(
    task_id: str, offer: dict[str, Any], image: str, argv: list[str], **kwargs: Any
) -> dict[str, Any]:
    """A MESOS task with a Docker image; ``argv`` is the whole argv (the command executor's)."""
    container: dict[str, Any] = {
        "type": "MESOS",
        "mesos": {"image": {"type": "DOCKER", "docker": {"name": image}}},
        **kwargs.pop("container", {}),
    }
    task = command_task(task_id, offer, argv[0], shell=False, arguments=argv, **kwargs)
    task["container"] = container
    return task


def run_to(sub: Subscriber, task_id: str, state: str, timeout: float = 30.0) -> dict[str, Any]:
    """Acknowledge updates of ``task_id`` until one in ``state`` (returned, acknowledged)."""
    while True:
        status = sub.update(task_id, timeout=timeout)
        if "uuid" in status:
            sub.ack(status)
        if status["state"] == state:
            return status
        assert status["state"] in ("TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"), status


def container_of(emulator: Emulator, task_id: str) -> str:
    return "mesos-" + str(emulator.tasks()[task_id]["container_id"])


def sandbox_of(emulator: Emulator, task_id: str) -> Path:
    """The task's latest run (also after its end was acknowledged and the task forgotten)."""
    root = Path(str(emulator.config.sandbox_root))
    (found,) = root.glob(f"slaves/*/frameworks/*/executors/{task_id}/runs/latest")
    return found.resolve()


def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    return str(
        eventually(lambda: path.exists() and path.read_text().endswith("\n") and path.read_text(), timeout)
    )


def test_docker_containerizer_maps_env_workdir_volumes_limits_and_host_network(
    emulator: Emulator,
    subscribers: list[Subscriber],
    docker_client: Any,
    entrypoint_image: str,
    tmp_path: Path,
) -> None:
    readable, writable = tmp_path / "ro", tmp_path / "rw"
    readable.mkdir()
    writable.mkdir()
    (readable / "in.txt").write_text("host data\n")
    script = (
        'exec > /mnt/mesos/sandbox/report.json.tmp; python3 -c "'
        "import json, os, socket; e = os.environ; print(json.dumps({"
        "'greeting': e.get('GREETING'), 'sandbox': e.get('MESOS_SANDBOX'), 'name': e.get('MESOS_CONTAINER_NAME'),"
        "'role': e.get('MESOS_ALLOCATION_ROLE'), 'image_env': e.get('FROM_IMAGE'), 'cwd': os.getcwd(),"
        "'read': open('/data/in.txt').read(), 'ro': os.access('/data', os.W_OK), 'host': socket.gethostname(),"
        "'netns': os.readlink('/proc/self/ns/net')}))\" && "
        "echo written > /out/proof && mv /mnt/mesos/sandbox/report.json.tmp /mnt/mesos/sandbox/report.json && "
        "sleep 60"
    )
    sub = subscribe(emulator, subscribers, capabilities=["TASK_KILLING_STATE"])
    offer = sub.offers()[0]
    task = docker_task(
        "mapped",
        offer,
        entrypoint_image,
        ["sh", "-c", script],  # after the image's entrypoint: `echo from-the-entrypoint sh -c ...`
        cpus=0.75,
        mem=96,
        env={"GREETING": "grüß dich"},
        docker={
            "parameters": [
                {"key": "entrypoint", "value": ""},
                {"key": "workdir", "value": "/mnt/mesos/sandbox"},
            ]
        },
        container={
            "volumes": [
                {"host_path": str(readable), "container_path": "/data", "mode": "RO"},
                {"host_path": str(writable), "container_path": "/out", "mode": "RW"},
            ]
        },
    )
    sub.accept([offer["id"]["value"]], [task])
    starting = run_to(sub, "mapped", "TASK_STARTING")
    assert starting["source"] == "SOURCE_EXECUTOR"
    running = run_to(sub, "mapped", "TASK_RUNNING")
    name = container_of(emulator, "mapped")
    assert running["container_status"]["container_id"]["value"] == name.removeprefix("mesos-")
    sandbox = sandbox_of(emulator, "mapped")
    report = json.loads(wait_for_file(sandbox / "report.json"))
    assert report == {
        "greeting": "grüß dich",
        "sandbox": "/mnt/mesos/sandbox",
        "name": name,
        "role": "*",
        "image_env": "yes",
        "cwd": "/mnt/mesos/sandbox",
        "read": "host data\n",
        "ro": False,
        "host": socket.gethostname(),
        "netns": os.readlink("/proc/self/ns/net"),
    }
    assert (writable / "proof").read_text() == "written\n"
    inspected = docker_client.api.inspect_container(name)
    host_config = inspected["HostConfig"]
    assert host_config["CpuShares"] == 768 and host_config["Memory"] == 96 * MIB
    assert host_config["NetworkMode"] == "host"
    assert sorted(host_config["Binds"]) == sorted(
        [f"{readable}:/data:ro", f"{writable}:/out:rw", f"{sandbox}:/mnt/mesos/sandbox"]
    )
    # kill: `docker stop -t 1` (the grace period in whole seconds); the shell is PID 1 and
    # ignores SIGTERM, so the engine kills it after the second.
    sub.kill("mapped", grace=1.5)
    assert sub.update("mapped")["state"] == "TASK_KILLING"
    killed = run_to(sub, "mapped", "TASK_KILLED")
    assert killed["message"] == "Container exited with status 137"
    eventually(
        lambda: not docker_client.containers.list(ignore_removed=True, all=True, filters={"name": name})
    )  # removed


def test_docker_containerizer_keeps_the_entrypoint_and_reports_exit_codes(
    emulator: Emulator, subscribers: list[Subscriber], entrypoint_image: str, base_image: str
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    tasks = [
        docker_task("entrypoint", offer, entrypoint_image, ["a", "b"]),
        docker_task("three", offer, base_image, ["sh", "-c", "exit 3"]),
        command_task("shell", offer, "echo $0 > /mnt/mesos/sandbox/shell.txt"),
    ]
    tasks[2]["container"] = {
        "type": "DOCKER",
        "docker": {"image": entrypoint_image},
    }  # shell: /bin/sh entrypoint
    sub.accept([offer["id"]["value"]], tasks)
    finished = run_to(sub, "entrypoint", "TASK_FINISHED")
    assert finished["message"] == "Container exited with status 0"
    assert (sandbox_of(emulator, "entrypoint") / "stdout").read_text() == "from-the-entrypoint a b\n"
    failed = run_to(sub, "three", "TASK_FAILED")
    assert failed["message"] == "Container exited with status 3" and "reason" not in failed
    run_to(sub, "shell", "TASK_FINISHED")
    assert (sandbox_of(emulator, "shell") / "shell.txt").read_text() == "/bin/sh\n"
    offer = sub.offers()[0]
    overdue = docker_task("overdue", offer, base_image, ["sleep", "60"])
    overdue["max_completion_time"] = {"nanoseconds": 500_000_000}
    sub.accept([offer["id"]["value"]], [overdue])
    timed_out = run_to(sub, "overdue", "TASK_FAILED")
    assert timed_out["reason"] == "REASON_MAX_COMPLETION_TIME_REACHED"
    assert timed_out["message"] == "Container exited with status 137"  # docker stop -t 0


def test_bridge_and_user_networks(
    emulator: Emulator, subscribers: list[Subscriber], docker_client: Any, base_image: str
) -> None:
    network = docker_client.networks.create(f"tfd-emu-{uuid.uuid4().hex[:8]}", driver="bridge")
    try:
        sub = subscribe(emulator, subscribers)
        offer = sub.offers()[0]
        probe = ["sh", "-c", "readlink /proc/self/ns/net > /mnt/mesos/sandbox/netns; sleep 60"]
        tasks = [
            docker_task("bridge", offer, base_image, probe, docker={"network": "BRIDGE"}),
            docker_task(
                "user",
                offer,
                base_image,
                probe,
                docker={"network": "USER"},
                container={"network_infos": [{"name": network.name}]},
            ),
        ]
        sub.accept([offer["id"]["value"]], tasks)
        bridge = run_to(sub, "bridge", "TASK_RUNNING")
        # the container's address on the engine's bridge; with --bridge=none (the tests' engine)
        # it has none and the agent's IP is filled in
        networks = docker_client.api.inspect_container(container_of(emulator, "bridge"))["NetworkSettings"]
        on_bridge = (networks["Networks"].get("bridge") or {}).get("IPAddress") or "127.0.0.1"
        assert bridge["container_status"]["network_infos"][0]["ip_addresses"][0]["ip_address"] == on_bridge
        user = run_to(sub, "user", "TASK_RUNNING")
        address = user["container_status"]["network_infos"][0]["ip_addresses"][0]["ip_address"]
        network.reload()
        assert address != "127.0.0.1"
        assert [c["IPv4Address"].split("/")[0] for c in network.attrs["Containers"].values()] == [address]
        for task_id, mode in (("bridge", "bridge"), ("user", network.name)):
            netns = wait_for_file(sandbox_of(emulator, task_id) / "netns").strip()
            assert netns != os.readlink("/proc/self/ns/net"), task_id
            inspected = docker_client.api.inspect_container(container_of(emulator, task_id))
            assert inspected["HostConfig"]["NetworkMode"] == mode
            sub.kill(task_id, grace=0)
            assert run_to(sub, task_id, "TASK_KILLED")["message"] == "Container exited with status 137"
        emulator.wait_for(lambda e: not e.processes(), timeout=10)
    finally:
        network.remove()


def test_mesos_containerizer_runs_the_command_in_the_image_filesystem(
    emulator: Emulator,
    subscribers: list[Subscriber],
    docker_client: Any,
    entrypoint_image: str,
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "in.txt").write_text("mounted\n")
    script = (
        "import json, os, signal, time; e = os.environ; "
        "report = {'sandbox': e['MESOS_SANDBOX'], 'cwd': os.getcwd(), 'image_env': e.get('FROM_IMAGE'),"
        " 'greeting': e.get('GREETING'), 'rel': open('/mnt/mesos/sandbox/rel/in.txt').read(),"
        " 'abs': open('/abs/in.txt').read(), 'mntns': os.readlink('/proc/self/ns/mnt')}; "
        "tmp = '/mnt/mesos/sandbox/report.tmp'; open(tmp, 'w').write(json.dumps(report) + '\\n'); "
        "os.rename(tmp, '/mnt/mesos/sandbox/report.json'); time.sleep(60)"
    )
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    task = mesos_task(
        "image",
        offer,
        entrypoint_image,
        ["python3", "-c", script],
        cpus=0.5,
        mem=128,
        env={"GREETING": "hi"},
        container={
            "volumes": [
                {"host_path": str(shared), "container_path": "rel", "mode": "RO"},
                {"host_path": str(shared), "container_path": "/abs", "mode": "RO"},
            ]
        },
    )
    sub.accept([offer["id"]["value"]], [task])
    run_to(sub, "image", "TASK_RUNNING")
    report = json.loads(wait_for_file(sandbox_of(emulator, "image") / "report.json"))
    assert report["sandbox"] == "/mnt/mesos/sandbox"
    assert report["cwd"] == "/srv"  # the image's WorkingDir (docker/runtime isolator)
    assert (report["image_env"], report["greeting"]) == ("yes", "hi")
    assert report["rel"] == report["abs"] == "mounted\n"
    assert report["mntns"] != os.readlink("/proc/self/ns/mnt")
    inspected = docker_client.api.inspect_container(container_of(emulator, "image"))
    assert inspected["HostConfig"]["CpuShares"] == 512 and inspected["HostConfig"]["Memory"] == 128 * MIB
    assert inspected["Config"]["Entrypoint"] == ["python3"]  # the image's entrypoint is not used
    sub.kill("image", grace=5)
    killed = run_to(sub, "image", "TASK_KILLED")
    assert killed["message"] == "Command terminated with signal Terminated"  # SIGTERM reached it


def test_refusals_fail_the_task_as_the_agent_does(
    emulator: Emulator, subscribers: list[Subscriber], base_image: str, tmp_path: Path
) -> None:
    sub = subscribe(emulator, subscribers)
    offer = sub.offers()[0]
    missing = "tfdeclare-test-missing:never"
    tasks = [
        docker_task("pull", offer, missing, ["true"]),
        mesos_task("provision", offer, missing, ["true"]),
        mesos_task(
            "relative",
            offer,
            base_image,
            ["true"],
            container={
                "volumes": [
                    {
                        "source": {"type": "HOST_PATH", "host_path": {"path": "data"}},
                        "container_path": "/d",
                        "mode": "RW",
                    }
                ]
            },
        ),
        mesos_task(
            "absent",
            offer,
            base_image,
            ["true"],
            container={
                "volumes": [{"host_path": str(tmp_path / "absent"), "container_path": "/d", "mode": "RO"}]
            },
        ),
        {**mesos_task("noexec", offer, base_image, ["-"]), "command": {"shell": False}},
        command_task(
            "hostfs",
            offer,
            "true",
            extra={
                "container": {
                    "type": "MESOS",
                    "volumes": [{"host_path": str(tmp_path), "container_path": "/no/such/dir", "mode": "RO"}],
                }
            },
        ),
    ]
    sub.accept([offer["id"]["value"]], tasks)
    expected = {
        "pull": f"Failed to run 'docker -H {os.environ['DOCKER_HOST']} pull {missing}': exited with status 1; stderr=",
        "provision": f"Failed to provision image '{missing}': Failed to run 'docker -H",
        "relative": "Path 'data' in HOST_PATH volume is not absolute",
        "absent": f"Path '{tmp_path / 'absent'}' in HOST_PATH volume does not exist",
        "noexec": "Failed to determine the launch command: No executable is found",
        "hostfs": "Mount point '/no/such/dir' is an absolute path. It must exist if the container shares the host filesystem",
    }
    for task_id, message in expected.items():
        status = sub.update(task_id, timeout=30)
        assert (status["state"], status["source"]) == ("TASK_FAILED", "SOURCE_AGENT"), status
        assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
        assert status["message"].startswith("Failed to launch container: " + message), status
        sub.ack(status)
    # RunOptions::create refuses inside the executor: STARTING, then FAILED without a reason
    offer = sub.offers()[0]
    both_relative = docker_task(
        "both",
        offer,
        base_image,
        ["true"],
        container={"volumes": [{"host_path": "a", "container_path": "b", "mode": "RW"}]},
    )
    sub.accept([offer["id"]["value"]], [both_relative])
    assert run_to(sub, "both", "TASK_STARTING")["source"] == "SOURCE_EXECUTOR"
    failed = run_to(sub, "both", "TASK_FAILED")
    assert failed["message"] == (
        "Failed to create docker run options: Both host_path 'a' and container_path 'b' of a volume are relative"
    )
    assert failed["source"] == "SOURCE_EXECUTOR" and "reason" not in failed


def test_an_agent_without_the_docker_containerizer_cannot_launch_docker_tasks(
    docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    with Emulator(**FAST, containerizers=("mesos",), sandbox_root=str(tmp_path / "agent")) as emulator:
        made: list[Subscriber] = []
        try:
            sub = subscribe(emulator, made)
            offer = sub.offers()[0]
            sub.accept([offer["id"]["value"]], [docker_task("docker", offer, base_image, ["true"])])
            status = sub.update("docker", timeout=10)
            assert (status["state"], status["source"]) == ("TASK_FAILED", "SOURCE_AGENT")
            assert status["reason"] == "REASON_EXECUTOR_TERMINATED"
            assert status["message"] == "Abnormal executor termination: unknown container"
        finally:
            for sub in made:
                sub.close()


def test_a_missing_docker_cli_fails_the_launch_with_the_agent_message(tmp_path: Path) -> None:
    with Emulator(
        **FAST,
        containerizers=("docker",),
        docker=str(tmp_path / "no-docker"),
        sandbox_root=str(tmp_path / "a"),
    ) as emulator:
        made: list[Subscriber] = []
        try:
            sub = subscribe(emulator, made)
            offer = sub.offers()[0]
            sub.accept([offer["id"]["value"]], [docker_task("task", offer, "img", ["true"])])
            status = sub.update("task", timeout=10)
            assert status["reason"] == "REASON_CONTAINER_LAUNCH_FAILED"
            assert status["message"].startswith(
                f"Failed to launch container: Failed to run '{tmp_path / 'no-docker'} -H "
            ), status
            assert (
                "pull img:latest': exited with status 127; stderr='Failed to create subprocess"
                in status["message"]
            )
        finally:
            for sub in made:
                sub.close()
