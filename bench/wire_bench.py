"""Issue 33, item 2: the bytes of one task's TaskInfo as a function of its job's size, with
the cluster in band (``TF_CONFIG`` in every task's environment) and fetched out of band
(``mesos.clusterServer``: a fixed bootstrap, the key, the URL and token). Measured on the
TaskInfos the backend really builds (``launches`` then ``taskinfo.task_info``, encoded as the
scheduler client encodes calls), for one job of n tasks with the labels, resources and ids of
a real launch (agents at IPv4 addresses, one task per agent; the owner label as a framework's
``frameworkName/instanceId``); the figures are the largest TaskInfo of the job and the total
per job. ``--fields N`` prints where the bytes of the largest fetched TaskInfo of a job of N
tasks go, field by field. ``--style`` picks the job's ``clusterSpec`` (``all``: each in turn):
``tf_config`` a chief and n-1 workers; ``legacy_flags`` a ps and n-1 workers, ``both`` a chief,
a ps and n-2 workers, each with the four legacy placeholder flags instead of ``--epochs 90``
in its command (``python3 train.py --ps_hosts={ps_hosts} ... --task_index={task_index}``).

    python -m bench.wire_bench [--sizes 10,100,1000] [--fields 1000] [--style all]
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from bench.common import machine
from tfdeclare.backends.mesos.clusterwire import ClusterWire
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.backends.mesos.taskinfo import task_info, task_labels
from tfdeclare.core.run.launches import launches, placed
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import Placement, Slot, TaskLaunch
from tfdeclare.core.spec.loader import load_file

AGENT = "5f8e4c3a-9d2b-4e1f-8a7c-6b5d4e3f2a1b-S"  # the shape of a Mesos agent id
OWNER = "tfdeclare/3c9a5e71"  # the shape of a framework's owner (frameworkName/instanceId)
ADVERTISE = "controller.example.com:7077"  # mesos.clusterServer.advertise


STYLES = ("tf_config", "legacy_flags", "both")
FLAGS = '"--ps_hosts={ps_hosts}", "--worker_hosts={worker_hosts}", "--job_name={job_name}", "--task_index={task_index}"'
REPLICAS = {
    "tf_config": "chief: {{count: 1}}, worker: {{count: {}}}",
    "legacy_flags": "ps: {{count: 1}}, worker: {{count: {}}}",
    "both": "chief: {{count: 1}}, ps: {{count: 1}}, worker: {{count: {}}}",
}


def job(workers: int, style: str = "tf_config") -> list[TaskLaunch]:
    """The launches of one job of ``workers`` tasks in all, of ``clusterSpec`` ``style``."""
    flags = '--epochs, "90"' if style == "tf_config" else FLAGS
    replicas = REPLICAS[style].format(workers - (2 if style == "both" else 1))
    text = textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: resnet50}}
        spec:
          command: [python3, train.py, {flags}]
          clusterSpec: {style}
          replicas: {{{replicas}}}
        """
    )
    loaded = load_file("resnet50.yaml", text.encode()).jobs[0]
    record = JobRecord(
        name="resnet50", uid="9f3c2a1b", canonical=loaded.canonical, spec_hash=loaded.spec_hash
    )
    slots = tuple(
        Slot(key, f"10.0.{n % 1000 // 250}.{n % 250 + 1}", 31000 + n // 1000)  # 1,000 agents
        for n, key in enumerate(record.spec.task_keys())
    )
    placement = Placement("resnet50", 0, slots, "t")
    return launches(placed(record, placement), placement, None)


def fetching(tasks: list[TaskLaunch]) -> list[TaskLaunch]:
    """``tasks`` as launched with ``mesos.clusterServer`` set (every job fetched)."""
    wire = ClusterWire(ClusterServerConfig(min_bytes=0, advertise=ADVERTISE))
    try:
        return wire.prepare(tasks)
    finally:
        assert wire.server is not None
        wire.server.close()


def info(task: TaskLaunch, n: int) -> dict[str, Any]:
    return task_info(task, f"{AGENT}{n % 1000}", task_labels(task, OWNER))


def size(value: object) -> int:
    """Bytes of ``value`` as the scheduler client encodes it."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def encoded(task: TaskLaunch, n: int) -> int:
    return size(info(task, n))


def measure(workers: int, style: str = "tf_config") -> dict[str, int]:
    tasks = job(workers, style)
    env = [encoded(t, n) for n, t in enumerate(tasks)]
    fetch = [encoded(t, n) for n, t in enumerate(fetching(tasks))]
    return {
        "tasks": workers,
        "env_max": max(env),
        "env_job": sum(env),
        "fetch_max": max(fetch),
        "fetch_job": sum(fetch),
    }


def fields(workers: int, style: str = "tf_config") -> list[tuple[str, int]]:
    """The largest fetched TaskInfo of a job of ``workers`` tasks of ``style``, by field
    (``"key":value,`` bytes; ``command`` also by its parts)."""
    infos = [info(t, n) for n, t in enumerate(fetching(job(workers, style)))]
    largest = max(infos, key=size)
    out = [("total", size(largest))]
    for key, value in largest.items():
        out.append((key, size({key: value}) - 1))  # "key":value, (the braces less, a comma more)
        if key == "command":
            for part, inner in value.items():
                out.append((f"  {part}", size({part: inner}) - 1))
            arguments = value["arguments"]
            out.append(("    the bootstrap (in arguments)", size(arguments[2]) + 1))
            for variable in value["environment"]["variables"]:
                out.append((f"    env {variable['name']}", size(variable) + 1))
        if key == "labels":
            for label in value["labels"]:
                out.append((f"    label {label['key']}", size(label) + 1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,4000")
    parser.add_argument("--fields", type=int, default=0, help="a job size: where its TaskInfo's bytes go")
    parser.add_argument(
        "--style", choices=(*STYLES, "all"), default="tf_config", help="the job's clusterSpec"
    )
    args = parser.parse_args()
    styles = STYLES if args.style == "all" else (args.style,)
    print(f"machine: {machine()}")
    if args.fields:
        print(f"| field of the largest fetched TaskInfo ({args.fields:,} tasks) | {' | '.join(styles)} |")
        print("|---" * (len(styles) + 1) + "|")
        columns = [fields(args.fields, style) for style in styles]
        for row in zip(*columns, strict=True):
            print(f"| {row[0][0]} | " + " | ".join(f"{count:,}" for _, count in row) + " |")
        return
    print("| style | tasks | in band: bytes per task | per job | fetched: bytes per task | per job |")
    print("|---|---|---|---|---|---|")
    for style in styles:
        for workers in (int(s) for s in args.sizes.split(",")):
            row = measure(workers, style)
            print(
                f"| {style} | {workers:,} | {row['env_max']:,} | {row['env_job']:,} | {row['fetch_max']:,} "
                f"| {row['fetch_job']:,} |"
            )


if __name__ == "__main__":
    main()
