"""Scale benchmark: ``python -m tests.mesos_emulator.bench --agents 1000 --tasks 10000``.

Owns the numbers quoted in the README. The emulator runs as its own process (the CLI,
simulated executor) so that the client does not share its interpreter lock; the client
is a throwaway raw subscriber plus HTTP/1.1-pipelined call connections (not tfdeclare's
client). It launches gangs of 1-64 tasks (one ACCEPT per agent), acknowledges every
update, checks the master's ground truth, tears the framework down, and reports wall
time and the emulator's CPU time per phase. It also times one allocation cycle over all
agents in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from .emulator import Cluster, Emulator

REPO = Path(__file__).resolve().parents[2]


def _records(response: httpx.Response) -> Any:
    buf = bytearray()
    for chunk in response.iter_raw():
        buf += chunk
        while (newline := buf.find(b"\n")) >= 0:
            end = newline + 1 + int(buf[:newline])
            if len(buf) < end:
                break
            yield bytes(buf[newline + 1 : end])
            del buf[:end]


class Stream:
    """A subscription read on a thread; events land in a queue."""

    def __init__(self, url: str) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stream_id = ""
        self.bytes = 0
        ready = threading.Event()

        def run() -> None:
            body = {
                "type": "SUBSCRIBE",
                "subscribe": {"framework_info": {"user": getpass.getuser(), "name": "bench"}},
            }
            timeout = httpx.Timeout(10.0, read=120.0)
            headers = {"Accept": "application/json"}
            with (
                httpx.Client(timeout=timeout) as client,
                client.stream("POST", url, json=body, headers=headers) as response,
            ):
                self.stream_id = response.headers["Mesos-Stream-Id"]
                ready.set()
                with contextlib.suppress(httpx.HTTPError):
                    for payload in _records(response):
                        self.bytes += len(payload)
                        self.events.put(json.loads(payload))

        threading.Thread(target=run, daemon=True).start()
        ready.wait(10)

    def next(self, kind: str, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            if event["type"] == kind:
                return event


class Pipeline:
    """Many requests written back to back on one keep-alive connection (HTTP pipelining)."""

    def __init__(self, host: str, port: int, stream_id: str) -> None:
        self.sock = socket.create_connection((host, port))
        self.reader = self.sock.makefile("rb")
        self.head = (
            "POST /api/v1/scheduler HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Mesos-Stream-Id: {stream_id}\r\n"
        ).replace("{host}", f"{host}:{port}")

    def post_all(self, bodies: list[dict[str, Any]]) -> list[int]:
        out = bytearray()
        for body in bodies:
            data = json.dumps(body).encode()
            out += f"{self.head}Content-Length: {len(data)}\r\n\r\n".encode() + data
        self.sock.sendall(out)
        statuses = []
        for _ in bodies:
            status = int(self.reader.readline().split()[1])
            length = 0
            while (line := self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.reader.read(length)
            statuses.append(status)
        return statuses

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _task(task_id: str, agent_id: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": task_id,
        "task_id": {"value": task_id},
        "agent_id": agent_id,
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 128}},
        ],
        "command": {"value": "simulated"},
    }


def _gangs(tasks: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    gangs: list[int] = []
    while sum(gangs) < tasks:
        gangs.append(min(rng.randint(1, 64), tasks - sum(gangs)))
    return gangs


def run_http(
    agents: int, tasks: int, ack_connections: int, seed: int, profile: str | None = None
) -> dict[str, float]:
    profiler = ["-m", "cProfile", "-o", profile] if profile else []
    argv = [
        sys.executable, *profiler, "-m", "tests.mesos_emulator", "--port", "0", "--agents", str(agents),
        "--agent-resources", "cpus:64;mem:262144;disk:0;ports:[31000-31999]",
        "--executor", "simulated", "--allocation-interval", "0.1", "--heartbeat-interval", "5",
        "--update-retry-interval", "120", "--seed", str(seed),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    results: dict[str, float] = {}
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        base = next(word for word in line.split() if word.startswith("http://"))
        host, port = base.removeprefix("http://").split(":")
        url = base + "/api/v1/scheduler"
        results["startup_s"] = time.perf_counter() - started
        cpu = _cpu_seconds(process.pid)

        def phase(name: str, since: float) -> None:
            nonlocal cpu
            results[f"{name}_wall_s"] = time.perf_counter() - since
            now = _cpu_seconds(process.pid)
            results[f"{name}_emulator_cpu_s"] = now - cpu
            cpu = now

        start = time.perf_counter()
        stream = Stream(url)
        offers: list[dict[str, Any]] = []
        stream.next("SUBSCRIBED")
        while len(offers) < agents:
            offers.extend(stream.next("OFFERS")["offers"]["offers"])
        phase("subscribe_and_offers", start)
        framework_id = offers[0]["framework_id"]
        gangs = _gangs(tasks, seed)
        results["gangs"] = len(gangs)
        if len(gangs) > len(offers):
            raise SystemExit(f"{len(gangs)} gangs need more than {len(offers)} agents")

        start = time.perf_counter()
        accepts = []
        launched = 0
        for size, offer in zip(gangs, offers, strict=False):
            infos = [_task(f"t{launched + n}", offer["agent_id"]) for n in range(size)]
            launched += size
            operations = [{"type": "LAUNCH", "launch": {"task_infos": infos}}]
            accept = {"offer_ids": [offer["id"]], "operations": operations,
                      "filters": {"refuse_seconds": 3600}}  # fmt: skip
            accepts.append({"type": "ACCEPT", "framework_id": framework_id, "accept": accept})
        pipe = Pipeline(host, int(port), stream.stream_id)
        assert set(pipe.post_all(accepts)) == {202}
        phase("accept_calls", start)

        updates: queue.Queue[dict[str, Any] | None] = queue.Queue()
        acked = [0]

        def acker() -> None:
            connection = Pipeline(host, int(port), stream.stream_id)
            while (first := updates.get()) is not None:
                batch = [first]
                while len(batch) < 500:
                    try:
                        item = updates.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        updates.put(None)
                        break
                    batch.append(item)
                bodies = [
                    {"type": "ACKNOWLEDGE", "framework_id": framework_id,
                     "acknowledge": {k: s[k] for k in ("agent_id", "task_id", "uuid")}}
                    for s in batch
                ]  # fmt: skip
                assert set(connection.post_all(bodies)) == {202}
                acked[0] += len(batch)
            connection.close()

        threads = [threading.Thread(target=acker, daemon=True) for _ in range(ack_connections)]
        for thread in threads:
            thread.start()
        for _ in range(2 * tasks):  # STARTING and RUNNING for every task
            updates.put(stream.next("UPDATE")["update"]["status"])
        for _ in threads:
            updates.put(None)
        for thread in threads:
            thread.join()
        phase("updates_received_and_acked", start - results["accept_calls_wall_s"])
        results["updates_acked"] = acked[0]

        state = httpx.get(base + "/master/state", timeout=60).json()
        running = [t for f in state["frameworks"] for t in f["tasks"] if t["state"] == "TASK_RUNNING"]
        assert len(running) == tasks, len(running)

        start = time.perf_counter()
        assert pipe.post_all([{"type": "TEARDOWN", "framework_id": framework_id}]) == [202]
        while not httpx.get(base + "/master/state", timeout=60).json()["completed_frameworks"]:
            time.sleep(0.05)
        phase("teardown", start)
        results["stream_mb"] = stream.bytes / 1e6
        pipe.close()
        start = time.perf_counter()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        results["sigterm_to_exit_s"] = time.perf_counter() - start
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return results


def _one_cycle(cluster: Cluster) -> tuple[float, int]:
    master = cluster.master
    assert master is not None
    for offer in list(master.offers.values()):
        master._discard_offer(offer, None)
    start = time.thread_time()
    master._allocate()
    return time.thread_time() - start, len(master.offers)


def allocation_cycle(agents: int) -> dict[str, float]:
    """CPU time of one allocation over ``agents`` agents, OFFERS encoding and write included."""
    with Emulator(agents=agents, executor="simulated", allocation_interval=3600) as emulator:
        stream = Stream(emulator.scheduler_url)
        stream.next("SUBSCRIBED")
        stream.next("OFFERS")
        samples = [emulator._call(_one_cycle) for _ in range(5)]
        best = min(cpu for cpu, _ in samples)
        assert all(count == agents for _, count in samples)
    return {"allocation_cycle_cpu_ms": best * 1000, "offers_per_cycle": agents}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--ack-connections", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", default=None, help="write a cProfile of the emulator here")
    args = parser.parse_args()
    results = allocation_cycle(args.agents)
    results.update(run_http(args.agents, args.tasks, args.ack_connections, args.seed, args.profile))
    for key, value in results.items():
        print(f"{key:45s} {value:10.3f}")


if __name__ == "__main__":
    main()
