"""A minimal Mesos v1 scheduler, the baseline of ``bench/framework_bench.py`` (issue 33):
what launching N command tasks costs a framework that does nothing else.

Raw v1 HTTP over ``http.client``, standard library only. One thread reads the subscription
stream (RecordIO over the chunked response) and queues the events; one thread sends every
call on a connection of its own, so no call waits in the event loop; the main thread decides.
It subscribes (checkpointing, a failover timeout, so the tasks outlive it as tfdeclare's do),
packs the tasks into the offers (each task ``cpus``, ``mem`` and one port of the offer, the
command without a shell), declines what it does not need, acknowledges every update that
carries a uuid and exits once it has seen every task TASK_RUNNING and acknowledged it (after
suppressing offers). No TF_CONFIG, no state, no retries: a failed task or a closed stream ends
it with exit status 1. ``--env-bytes N`` gives every task an environment variable of N bytes
(to see what a bigger TaskInfo costs the agents).

    python -m bench.minimal_framework [--tasks 200] [--cpus 0.01] [--mem 16] [--env-bytes 0] MASTER_URL [sleep 600]
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import sys
import threading
import urllib.parse
from typing import Any

JSON = dict[str, Any]
PATH = "/api/v1/scheduler"
TERMINAL = {
    "TASK_FAILED",
    "TASK_KILLED",
    "TASK_LOST",
    "TASK_ERROR",
    "TASK_DROPPED",
    "TASK_GONE",
    "TASK_FINISHED",
}


def records(stream: http.client.HTTPResponse) -> Any:
    """Each RecordIO record of the de-chunked stream, decoded: ``LENGTH\\n`` then that many bytes."""
    buffer = b""
    while True:
        newline = buffer.find(b"\n")
        if newline >= 0 and len(buffer) - newline - 1 >= int(buffer[:newline]):
            size = int(buffer[:newline])
            yield json.loads(buffer[newline + 1 : newline + 1 + size])
            buffer = buffer[newline + 1 + size :]
            continue
        chunk = stream.read1(65536)
        if not chunk:
            return
        buffer += chunk


class Minimal:
    def __init__(
        self, master: str, tasks: int, cpus: float, mem: float, argv: list[str], env_bytes: int = 0
    ) -> None:
        url = urllib.parse.urlsplit(master)
        self.host, self.port = url.hostname or "127.0.0.1", url.port or 5050
        self.tasks, self.cpus, self.mem, self.argv = tasks, cpus, mem, argv
        self.environment = (
            {"variables": [{"name": "PADDING", "value": "x" * env_bytes}]} if env_bytes else None
        )
        self.events: queue.Queue[JSON | None] = queue.Queue()
        self.calls: queue.Queue[JSON | None] = queue.Queue()
        self.framework_id = ""
        self.stream_id = ""
        self.launched = 0
        self.running: set[str] = set()

    def subscribe(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=75)
        body = {
            "type": "SUBSCRIBE",
            "subscribe": {
                "framework_info": {
                    "user": "root",
                    "name": "minimal",
                    "checkpoint": True,
                    "failover_timeout": 600.0,
                }
            },
        }
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Connection": "close"}
        connection.request("POST", PATH, json.dumps(body), headers)
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"SUBSCRIBE: {response.status} {response.read()[:300]!r}")
        self.stream_id = response.getheader("Mesos-Stream-Id") or ""
        threading.Thread(target=self.read, args=(response,), daemon=True).start()

    def read(self, response: http.client.HTTPResponse) -> None:
        try:
            for event in records(response):
                self.events.put(event)
        finally:
            self.events.put(None)

    def send(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=75)
        while (call := self.calls.get()) is not None:
            call["framework_id"] = {"value": self.framework_id}
            headers = {"Content-Type": "application/json", "Mesos-Stream-Id": self.stream_id}
            connection.request("POST", PATH, json.dumps(call), headers)
            response = connection.getresponse()
            answer = response.read()
            if response.status != 202:
                print(f"{call['type']}: {response.status} {answer[:300]!r}", file=sys.stderr, flush=True)

    def offers(self, offers: list[JSON]) -> None:
        for offer in offers:
            cpus = mem = 0.0
            ports: list[int] = []
            for resource in offer.get("resources", []):
                if resource["name"] == "cpus":
                    cpus += resource["scalar"]["value"]
                elif resource["name"] == "mem":
                    mem += resource["scalar"]["value"]
                elif resource["name"] == "ports":
                    for span in resource["ranges"]["range"]:
                        ports.extend(range(span["begin"], span["end"] + 1))
            infos = []
            while self.launched < self.tasks and cpus >= self.cpus and mem >= self.mem and ports:
                infos.append(self.task(offer["agent_id"], ports.pop(0)))
                cpus, mem = round(cpus - self.cpus, 6), mem - self.mem
            call: JSON = {
                "type": "ACCEPT",
                "accept": {"offer_ids": [offer["id"]], "filters": {"refuse_seconds": 5}},
            }
            call["accept"]["operations"] = (
                [{"type": "LAUNCH", "launch": {"task_infos": infos}}] if infos else []
            )
            self.calls.put(call)
        if self.launched >= self.tasks:
            self.calls.put({"type": "SUPPRESS", "suppress": {}})

    def task(self, agent_id: JSON, port: int) -> JSON:
        number, self.launched = self.launched, self.launched + 1
        resources = [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": self.cpus}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": self.mem}},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": port, "end": port}]}},
        ]
        info: JSON = {
            "name": f"minimal-{number}",
            "task_id": {"value": f"minimal.{number}"},
            "agent_id": agent_id,
            "resources": resources,
            "command": {"shell": False, "value": self.argv[0], "arguments": self.argv},
        }
        if self.environment:
            info["command"]["environment"] = self.environment
        return info

    def update(self, status: JSON) -> str:
        if "uuid" in status:
            ack = {"agent_id": status["agent_id"], "task_id": status["task_id"], "uuid": status["uuid"]}
            self.calls.put({"type": "ACKNOWLEDGE", "acknowledge": ack})
        state = str(status["state"])
        if state == "TASK_RUNNING":
            self.running.add(status["task_id"]["value"])
        return state

    def run(self) -> int:
        self.subscribe()
        sender = threading.Thread(target=self.send)
        sender.start()
        code = 1
        while (event := self.events.get()) is not None:
            kind = event["type"]
            if kind == "SUBSCRIBED":
                self.framework_id = event["subscribed"]["framework_id"]["value"]
            elif kind == "OFFERS":
                self.offers(event["offers"]["offers"])
            elif kind == "UPDATE":
                if self.update(event["update"]["status"]) in TERMINAL:
                    print(json.dumps(event), file=sys.stderr, flush=True)
                    break
                if len(self.running) >= self.tasks:
                    code = 0
                    break
            elif kind == "ERROR":
                print(json.dumps(event), file=sys.stderr, flush=True)
                break
        self.calls.put(None)  # the acknowledgements queued so far go out first
        sender.join()
        return code


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.minimal_framework")
    parser.add_argument("master")
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--cpus", type=float, default=0.01)
    parser.add_argument("--mem", type=float, default=16)
    parser.add_argument(
        "--env-bytes", type=int, default=0, help="an environment variable this long in every task"
    )
    parser.add_argument("argv", nargs="*", default=["sleep", "600"])
    args = parser.parse_args()
    return Minimal(args.master, args.tasks, args.cpus, args.mem, args.argv, args.env_bytes).run()


if __name__ == "__main__":
    sys.exit(main())
