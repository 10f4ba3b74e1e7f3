"""Issue 33, item 2: the bytes of one task's TaskInfo as a function of its job's size, with
the cluster in band (``TF_CONFIG`` in every task's environment) and fetched out of band
(``mesos.clusterServer``: a fixed bootstrap, the URL and token). Measured on the TaskInfos the
backend really builds (``launches`` then ``taskinfo.task_info``, encoded as the scheduler
client encodes calls), for one job of n workers with the labels, resources and ids of a real
launch (agents at IPv4 addresses, one task per agent); the figures are the largest TaskInfo
of the job and the total per job.

    python -m bench.wire_bench [--sizes 10,100,1000]
"""

from __future__ import annotations

import argparse
import json
import textwrap

from bench.common import machine
from tfdeclare.backends.mesos.clusterwire import ClusterWire
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.backends.mesos.taskinfo import task_info, task_labels
from tfdeclare.core.run.launches import launches, placed
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import Placement, Slot, TaskLaunch
from tfdeclare.core.spec.loader import load_file

AGENT = "5f8e4c3a-9d2b-4e1f-8a7c-6b5d4e3f2a1b-S"  # the shape of a Mesos agent id


def job(workers: int) -> list[TaskLaunch]:
    text = textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: resnet50}}
        spec:
          command: [python3, train.py, --epochs, "90"]
          replicas: {{chief: {{count: 1}}, worker: {{count: {workers - 1}}}}}
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


def encoded(task: TaskLaunch, n: int) -> int:
    info = task_info(task, f"{AGENT}{n % 1000}", task_labels(task, "tfdeclare@controller.example.com"))
    return len(json.dumps(info, ensure_ascii=False, separators=(",", ":")).encode())


def measure(workers: int) -> dict[str, int]:
    tasks = job(workers)
    wire = ClusterWire(ClusterServerConfig(min_bytes=0, advertise="controller.example.com:7077"))
    try:
        fetching = wire.prepare(tasks)
    finally:
        assert wire.server is not None
        wire.server.close()
    env = [encoded(t, n) for n, t in enumerate(tasks)]
    fetch = [encoded(t, n) for n, t in enumerate(fetching)]
    return {
        "tasks": workers,
        "env_max": max(env),
        "env_job": sum(env),
        "fetch_max": max(fetch),
        "fetch_job": sum(fetch),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,4000")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print("| tasks | in band: bytes per task | per job | fetched: bytes per task | per job |")
    print("|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size)
        print(
            f"| {size:,} | {row['env_max']:,} | {row['env_job']:,} | {row['fetch_max']:,} | {row['fetch_job']:,} |"
        )


if __name__ == "__main__":
    main()
