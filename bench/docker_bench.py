"""Issue 13's targets for the local backend's Docker runtime (``make bench-docker``):

- ``apply`` of a 10-task job with an image until all 10 containers run (image present);
- the runner's overhead on a containerised TensorFlow job's steps (the same container, with
  the same limits, started by hand with the SDK; the two take turns block by block, as in
  ``local_bench.tf_overhead``);
- a restarted controller adopts 100 running containers: no duplicate, none lost;
- ``logs --follow`` of a running container with a large log (issue 23): what one read costs
  once caught up, against what it cost before (the whole log from the engine every read,
  still measurable as ``DockerRuntime.logs``), the two taking turns on the same container.

The engine and the images are the tests' (``tests/docker_env.py``: DOCKER_HOST, the default
socket, or the private engine, stopped at the end when this run started it; the Debian base and
the TensorFlow image, built once). Without an engine the suite reports nothing and says why.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import CLI_SCRIPT, REPO, Result, cleaned_up, run, wait_for
from bench.local_bench import add_pair, overhead_results

THROUGHPUT = REPO / "bench" / "tf_throughput.py"


def _config(workdir: Path) -> None:
    (workdir / "tfdeclare.yaml").write_text(
        "local: {runtime: docker, cpus: 64, mem: 64Gi, gpus: 0, portRange: {first: 36000, last: 37999}}\n"
    )


def _job(
    name: str, image: str, count: int, command: str, cpus: float = 0.01, mem: str = "64", extra: str = ""
) -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  image: {image}\n  command: {command}\n{extra}"
        f"  replicas:\n    worker: {{count: {count}, resources: {{cpus: {cpus}, mem: {mem}}}}}\n"
    )


def _owner(workdir: Path) -> str:
    from tfdeclare.backends.local.docker_runtime import owner_of

    return owner_of(workdir / ".tfdeclare" / "local")


def _running(client: Any, workdir: Path, job: str) -> list[Any]:
    return client.containers.list(
        ignore_removed=True, filters={"label": [f"tfdeclare.owner={_owner(workdir)}", f"tfdeclare.job={job}"]}
    )


def _clean(client: Any, workdir: Path) -> None:
    for container in client.containers.list(
        ignore_removed=True, all=True, filters={"label": f"tfdeclare.owner={_owner(workdir)}"}
    ):
        container.remove(force=True)


def apply_ten(client: Any, image: str, workdir: Path, runs: int) -> Result:
    _config(workdir)
    samples = []
    for i in range(runs):
        specs = workdir / f"specs{i}"
        specs.mkdir()
        # 0.5 cpus each: a container's CPU quota holds from its first process, so a tiny one
        # slows the start itself (at 0.01 cpus, starting one takes 1.3 s here).
        (specs / "ten.yaml").write_text(_job(f"ten{i}", image, 10, "[sleep, '120']", cpus=0.5))
        started = time.perf_counter()
        run([CLI_SCRIPT, "apply", str(specs)], workdir)
        job = f"ten{i}"
        wait_for(lambda: len(_running(client, workdir, job)) == 10, timeout=60, poll=0.02)  # noqa: B023
        samples.append(time.perf_counter() - started)
        run([CLI_SCRIPT, "delete", f"ten{i}"], workdir)
    _clean(client, workdir)
    return Result(
        "`apply` of a 10-task job with an image until all 10 containers run (image present)",
        "≤ 2 s",
        samples,
        limit=2.0,
    )


def adopt_hundred(client: Any, image: str, workdir: Path) -> Result:
    """100 containers started by one controller; a new controller (a second ``apply``, then
    ``status``) adopts them: as many running containers as tasks, none started twice."""
    _config(workdir)
    specs = workdir / "hundred"
    specs.mkdir()
    (specs / "h.yaml").write_text(_job("hundred", image, 100, "[sleep, '600']"))
    try:
        run([CLI_SCRIPT, "apply", str(specs)], workdir, timeout=600)
        wait_for(lambda: len(_running(client, workdir, "hundred")) == 100, timeout=300, poll=0.2)
        before = {c.id for c in _running(client, workdir, "hundred")}
        started = time.perf_counter()
        run([CLI_SCRIPT, "apply", str(specs)], workdir, timeout=600)  # a new controller: adopts
        seconds = time.perf_counter() - started
        status = run([CLI_SCRIPT, "status", "hundred", "-o", "json"], workdir).stdout
        after = _running(client, workdir, "hundred")
        every = client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"tfdeclare.owner={_owner(workdir)}"}
        )
        task_ids = [c.labels["tfdeclare.task-id"] for c in every]
        duplicates = len(task_ids) - len(set(task_ids)) + len({c.id for c in after} - before)
        running = status.count('"state": "running"')
        run([CLI_SCRIPT, "delete", "hundred"], workdir, timeout=600)
    finally:
        _clean(client, workdir)
    return Result(
        "a restarted controller adopts 100 running containers (`apply` again)",
        "0 duplicates",
        [seconds],
        note=f"{duplicates} duplicates, {len(after)} containers running, status lists {running} running",
        extra={"duplicates": duplicates, "running": len(after), "status_running": running},
    )


def tf_overhead(client: Any, image: str, workdir: Path, budget_s: float, min_pairs: int = 6) -> list[Result]:
    """Pairs: the TF workload in a container under tfdeclare and in the same container (image,
    host network, docker-init, 1 cpu, the same memory limit) made by hand, taking turns."""
    from docker.types import Mount

    _config(workdir)
    env = {"TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    cpu_logs, wall_logs = [], []
    started = time.monotonic()
    i = 0
    while i < min_pairs or time.monotonic() - started < budget_s:
        sync = workdir / f"sync{i}"
        sync.mkdir()
        for role in ("hand", "through"):
            os.mkfifo(sync / f"{role}.turn")
        pair_env = {**env, "BENCH_SYNC_DIR": str(sync)}
        specs = workdir / f"tf{i}"
        specs.mkdir()
        env_yaml = ", ".join(f"{k}: '{v}'" for k, v in {**pair_env, "BENCH_ROLE": "through"}.items())
        volumes = f"  volumes: [{{hostPath: {workdir}, containerPath: {workdir}, mode: rw}}, " + (
            f"{{hostPath: {THROUGHPUT.parent}, containerPath: /bench}}]\n"
        )
        (specs / "tf.yaml").write_text(
            _job(
                f"tf{i}",
                image,
                1,
                "[python, /bench/tf_throughput.py]",
                1,
                "2Gi",
                f"  env: {{{env_yaml}}}\n{volumes}",
            )
        )
        hand = client.containers.run(
            image,
            ["python", "/bench/tf_throughput.py"],
            detach=True,
            environment={**pair_env, "BENCH_ROLE": "hand"},
            network_mode="host",
            init=True,
            nano_cpus=10**9,
            mem_limit=2 << 30,
            memswap_limit=2 << 30,
            mounts=[
                Mount(str(workdir), str(workdir), type="bind"),
                Mount("/bench", str(THROUGHPUT.parent), type="bind", read_only=True),
            ],
        )
        try:
            through = subprocess.Popen(
                [CLI_SCRIPT, "apply", str(specs), "--wait", "--timeout", "600"],
                cwd=workdir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wait_for(lambda: len(list(sync.glob("ready-*"))) == 2, timeout=300, poll=0.01)  # noqa: B023
            with open(sync / "hand.turn", "wb") as turn:
                turn.write(b"t")
            code = hand.wait(timeout=600)["StatusCode"]
            hand_out = hand.logs().decode()
            if through.wait(timeout=600) != 0 or code != 0:
                raise RuntimeError(
                    f"pair {i} failed: by hand {code}, apply {through.returncode}: {hand_out[-500:]}"
                )
        finally:
            hand.remove(force=True)
        through_out = run([CLI_SCRIPT, "logs", f"tf{i}"], workdir).stdout
        run([CLI_SCRIPT, "delete", f"tf{i}"], workdir)
        add_pair(cpu_logs, wall_logs, hand_out, through_out)
        i += 1
    _clean(client, workdir)
    return overhead_results(
        "a containerised TF job's",
        "tfdeclare vs the same container by hand",
        "within noise (≤ 2 %)",
        cpu_logs,
        wall_logs,
    )


LOUD = (
    "import sys, time\n"
    "sys.stdout.write(('x' * 99 + '\\n') * 80000)\n"  # 8 MB at once
    "sys.stdout.flush()\n"
    "for i in range(3000):\n"
    "    print('tick', i, flush=True)\n"
    "    time.sleep(0.05)\n"
)


def follow_cost(image: str, workdir: Path, pairs: int) -> list[Result]:
    """One container writes 8 MB, then a line every 50 ms. Once a follower has caught up,
    pairs of reads take turns: the old read (``DockerRuntime.logs``: an inspect and the
    whole log, which every ``read_log`` of a live container did) and today's ``read_log``
    from the follower's offset (the engine's bytes counted by ``log_bytes_read``)."""
    from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
    from tfdeclare.backends.local.config import LocalRuntime
    from tfdeclare.backends.local.docker_driver import DockerDriver
    from tfdeclare.backends.local.docker_runtime import container_name
    from tfdeclare.backends.local.record import TaskRuntime
    from tfdeclare.core.enums import Role
    from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey, TaskLaunch
    from tfdeclare.core.spec.resources import Resources

    capacity = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=37500, port_last=37599)
    backend = LocalBackend(workdir / "state", capacity, runtime=LocalRuntime.DOCKER)
    key, size = TaskKey(Role.WORKER, 0), Resources(0.5, 512, 0)
    placement = backend.place(GangRequest("follow", 0, (SlotRequest(key, size),)))
    assert isinstance(placement, Placement)
    task_id = "follow.t1.worker-0"
    launch = TaskLaunch(
        task_id, "follow", key, 0, "s" * 64, "c" * 16, ("python3", "-c", LOUD), (), size,
        placement.slots[0], image=image, source_dir=str(workdir),
    )  # fmt: skip
    driver = backend.drivers[TaskRuntime.DOCKER]
    assert isinstance(driver, DockerDriver)
    engine, name = driver.engine, container_name(driver.engine.owner, task_id)
    before_s, before_bytes, after_s, after_bytes = [], [], [], []
    try:
        backend.launch(placement, [launch])
        offset = 0
        deadline = time.monotonic() + 120
        while True:  # catch up with the 8 MB, and get past them by a second
            chunk = backend.read_log(task_id, offset, 1 << 24)
            offset = chunk.next_offset
            if b"tick 20\n" in chunk.data or (offset > 8_000_000 and b"tick 2" in chunk.data):
                break
            assert time.monotonic() < deadline, "the container never wrote its log"
            time.sleep(0.05)
        for _ in range(pairs):
            started = time.perf_counter()
            whole = engine.logs(name)
            before_s.append(time.perf_counter() - started)
            before_bytes.append(len(whole[0]) if whole else 0)
            read, started = engine.log_bytes_read, time.perf_counter()
            offset = backend.read_log(task_id, offset).next_offset
            after_s.append(time.perf_counter() - started)
            after_bytes.append(engine.log_bytes_read - read)
            time.sleep(0.1)
    finally:
        backend.stop([task_id], 1.0)
        with contextlib.suppress(Exception):
            engine.remove(name)
        backend.close()
    ratio = statistics.median(before_s) / statistics.median(after_s)
    note = (
        f"before (the whole log each read): median {statistics.median(before_s) * 1000:.1f} ms and "
        f"{statistics.median(before_bytes) / 1e6:.2f} MB a read; now {statistics.median(after_bytes):.0f} "
        f"bytes a read; {ratio:.1f}x faster ({pairs} pairs taking turns)"
    )
    return [
        Result(
            "`logs --follow` of a running container with an 8 MB log: one read once caught up",
            "reads only what is new",
            [t * 1000 for t in after_s],
            unit="ms",
            note=note,
            extra={
                "before_ms": [t * 1000 for t in before_s],
                "before_bytes": before_bytes,
                "after_bytes": after_bytes,
                "ratio": ratio,
            },
        )
    ]


def main(results: list[Result], quick: bool) -> None:
    from tests import docker_env

    try:
        host = docker_env.acquire()
    except RuntimeError as err:
        docker_env.release()
        print(f"docker: no engine ({err}); nothing measured", flush=True)
        return
    try:
        _measure(results, quick, host)
    finally:
        docker_env.release()  # an engine started for this run is stopped, as after a test run


def _measure(results: list[Result], quick: bool, host: str) -> None:
    import docker

    from tests import docker_env

    os.environ["DOCKER_HOST"] = host
    client = docker.DockerClient(base_url=host, timeout=600)
    base, tensorflow = docker_env.base_image(client), docker_env.tensorflow_image(client)
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.append(apply_ten(client, base, workdir, 3 if quick else 7))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.append(adopt_hundred(client, base, workdir))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.extend(follow_cost(base, workdir, 10 if quick else 40))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.extend(tf_overhead(client, tensorflow, workdir, 30 if quick else 240))
    client.close()
