"""Issue 34's real run: how soon a high-priority job runs once it is applied where low-priority
jobs fill the capacity (goal: every task of it running within the victims'
``terminationGracePeriodSeconds`` + 5 s).

Real processes, no TensorFlow (``bench/preempt_task.py`` stops the way
``PreemptionCheckpointHandler`` does: on SIGTERM it finishes its step and saves, here a fixed
pause, then exits). Per run, on a fresh project: a low-priority job (2 workers) fills the
capacity and runs; then the high-priority job (2 workers, ``priority: 10``) is applied and the
time is taken from the moment it is applied to the last of its tasks writing that it started
(the task's own wall clock). Two kinds of victim: one that saves in ``SAVE_S`` and exits
(grace ``GRACE_S``), one that ignores SIGTERM and is killed at the end of its grace
(``IGNORE_GRACE_S``). Ways of applying:

- ``local-apply``: ``tfdeclare apply`` on the local backend, the background controller
  keeping the jobs after it (as a user runs it with no daemon);
- ``local-daemon``: ``tfdeclare daemon`` watching the folder, the file written at time 0;
- ``mesos-daemon``: the daemon on the Mesos backend against the master emulator
  (tests/mesos_emulator; one agent, real task processes);
- ``realmesos-daemon``: the same against a real Apache Mesos 1.11 master and agent
  (tests/real_mesos.py; needs ``make real-mesos``, left out when it is not built).

    python -m bench.preempt_bench [--runs 5] [--only local-apply,local-daemon,mesos-daemon,realmesos-daemon]

``make bench-preempt``; writes bench/out/preempt.md and preempt.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import REPO, Result, results_header, stop_process

TASK = REPO / "bench" / "preempt_task.py"
PORTS = (36000, 36199)  # local backend; the emulator's agent has its own below
AGENT_PORTS = "[36200-36399]"
SAVE_S = 1.0
GRACE_S = 10  # a victim that saves
IGNORE_GRACE_S = 5  # a victim that never saves: killed at the end of its grace
SLACK_S = 5.0
WAYS = ("local-apply", "local-daemon", "mesos-daemon", "realmesos-daemon")
TIMEOUT_S = 60.0


def job(name: str, out: Path, mode: str, *, priority: int, grace: int, cpus: float) -> str:
    command = json.dumps([sys.executable, str(TASK), str(out), mode])
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        f"  command: {command}\n"
        f"  priority: {priority}\n"
        f"  terminationGracePeriodSeconds: {grace}\n"
        f"  replicas:\n    worker: {{count: 2, resources: {{cpus: {cpus}, mem: 256}}}}\n"
    )


def _cli(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFDECLARE_")}
    result = subprocess.run(
        [sys.executable, "-m", "tfdeclare", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**env, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"tfdeclare {' '.join(args)}: {result.stdout}{result.stderr}")
    return result


def _stamps(folder: Path, suffix: str) -> list[float]:
    out = []
    for path in folder.glob(f"*{suffix}"):
        try:
            out.append(float(path.read_text()))
        except (OSError, ValueError):
            continue  # being written
    return out


def _wait(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never: {what}")
        time.sleep(0.01)


def _kill_leftovers(root: Path) -> None:
    marker = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker not in handle.read():
                    continue
            os.kill(int(entry), signal.SIGKILL)
        except OSError:
            continue


class _Daemon:
    def __init__(self, root: Path) -> None:
        self.log = open(root / "daemon.log", "w")  # noqa: SIM115 - closed in stop()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TFDECLARE_")}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfdeclare",
                "daemon",
                "--port",
                "0",
                "--specs",
                "specs",
                "--interval",
                "1",
            ],
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
        )

    def stop(self) -> None:
        stop_process(self.proc, timeout=45)
        self.log.close()


@contextmanager
def _project(way: str) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=f"tfdeclare-preempt-{way}-"))
    (root / "specs").mkdir()
    emulator: Any = None
    try:
        if way.startswith("mesos"):
            from tests.mesos_fixtures import config_yaml, start_emulator

            emulator = start_emulator(root, agent_resources=f"cpus:1;mem:4096;ports:{AGENT_PORTS}")
            (root / "tfdeclare.yaml").write_text(config_yaml(emulator.url, reviveIntervalSeconds=1))
        elif way.startswith("realmesos"):
            from tests.mesos_fixtures import config_yaml
            from tests.real_mesos import RealMesos

            emulator = RealMesos(root / "cluster", agents=1, resources=f"cpus:1;mem:4096;ports:{AGENT_PORTS}")
            (root / "cluster").mkdir()
            emulator.start()
            (root / "tfdeclare.yaml").write_text(
                config_yaml(emulator.url, reviveIntervalSeconds=1, sharedFilesystem=False)
            )
        else:
            (root / "tfdeclare.yaml").write_text(
                f"local: {{cpus: 1, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
            )
        yield root
    finally:
        try:
            _cli(root, "delete", "--all", timeout=120)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        _kill_leftovers(root)
        if emulator is not None:
            emulator.stop()
        shutil.rmtree(root, ignore_errors=True)


def one_run(way: str, victim: str) -> dict[str, float]:
    """One preemption; seconds from the apply to each moment, and the goal."""
    grace = IGNORE_GRACE_S if victim == "ignore" else GRACE_S
    mode = "ignore" if victim == "ignore" else f"save={SAVE_S}"
    with _project(way) as root:
        low_out, high_out = root / "out-low", root / "out-high"
        low_out.mkdir()
        high_out.mkdir()
        daemon = _Daemon(root) if way.endswith("daemon") else None
        try:
            (root / "specs" / "low.yaml").write_text(
                job("low", low_out, mode, priority=0, grace=grace, cpus=0.5)
            )
            if daemon is None:
                _cli(root, "apply", "specs")
            _wait(lambda: len(_stamps(low_out, ".up")) == 2, "the low job runs")
            time.sleep(1.0)  # running, steady
            text = job("high", high_out, "serve", priority=10, grace=grace, cpus=0.5)
            tmp = root / ".high.yaml"
            tmp.write_text(text)
            applied = time.time()
            tmp.rename(root / "specs" / "high.yaml")
            if daemon is None:
                _cli(root, "apply", "specs")
            returned = time.time()
            _wait(lambda: len(_stamps(high_out, ".up")) == 2, "the high job runs", timeout=grace + TIMEOUT_S)
            running = max(_stamps(high_out, ".up"))
            saved = _stamps(low_out, ".down")
        finally:
            if daemon is not None:
                daemon.stop()
    return {
        "high_running_s": running - applied,
        "apply_returned_s": returned - applied,
        "victims_saved_s": (max(saved) - applied) if saved else float("nan"),
        "goal_s": grace + SLACK_S,
    }


def _real_mesos_built() -> bool:
    from tests.real_mesos import built

    try:
        built()
    except BaseException:  # a missing build is a test skip (not an Exception): left out
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.preempt_bench")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join(WAYS))
    args = parser.parse_args()
    results: list[Result] = []
    raw: dict[str, list[dict[str, float]]] = {}
    for way in args.only.split(","):
        if way.startswith("realmesos") and not _real_mesos_built():
            print(f"{way}: left out (no real Mesos build: make real-mesos)", flush=True)
            continue
        for victim in ("save", "ignore"):
            key = f"{way}/{victim}"
            raw[key] = []
            for i in range(args.runs):
                sample = one_run(way, victim)
                raw[key].append(sample)
                print(key, i, json.dumps(sample), flush=True)
            goal = raw[key][0]["goal_s"]
            what = (
                f"victims save in {SAVE_S:.0f} s on SIGTERM, grace {GRACE_S} s"
                if victim == "save"
                else f"victims ignore SIGTERM, killed after their grace of {IGNORE_GRACE_S} s"
            )
            results.append(
                Result(
                    f"{way}: apply of a high-priority job → both its tasks running ({what})",
                    f"≤ grace + {SLACK_S:.0f} s = {goal:.0f} s",
                    [s["high_running_s"] for s in raw[key]],
                    limit=goal,
                    note="victims exited/saved at median "
                    + f"{sorted(s['victims_saved_s'] for s in raw[key])[len(raw[key]) // 2]:.2f} s"
                    if victim == "save"
                    else "",
                )
            )
    header = results_header()
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    table = "\n".join(header + [r.row() for r in results]) + "\n"
    (out / "preempt.md").write_text(table)
    (out / "preempt.json").write_text(json.dumps(raw, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
