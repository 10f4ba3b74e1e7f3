"""The Mesos backend end to end (``bench/mesos_bench.py``'s ``end_to_end``: 10,000 tasks in
gangs of 1-64 on 1,000 simulated agents, until all are observed running) for this checkout and
another, taken alongside: round by round, one after the other, so both see the same load; each
figure as its median per checkout and the median of the per-round ratios (issue 23: the
policies moved into a pure reducer, ``backends/mesos/decide.py``; the loop's cost per event
must not grow).

`python -m bench.mesos_alongside --against DIR [--rounds 3]` (``make bench-mesos-alongside
AGAINST=DIR``): DIR is another checkout of tfdeclare (a `git worktree` of the commit to compare
with); its runs use this interpreter with DIR first on `PYTHONPATH`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench.common import REPO, machine

# The loop's own work, without the emulator: 10,000 journaled tasks, their STARTING then
# RUNNING updates folded in as the loop does (the update handler: journal, policies, no HTTP: not
# connected, so no call leaves), then ticks with half of them asked to stop (KILL retries).
_LOOP = """
import json, tempfile, time
from pathlib import Path
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.events import TaskStatus
from tfdeclare.backends.mesos.journal import TaskEntry
N = 10_000
with tempfile.TemporaryDirectory() as tmp:
    backend = MesosBackend(Path(tmp), MesosConfig(master="http://127.0.0.1:9"))
    composed = hasattr(backend, "_scheduler")  # the backend by composition (issue 30), or mixins
    if composed:
        from tfdeclare.backends.mesos.decide_messages import Stop
        from tfdeclare.backends.mesos.inbox import StatusUpdate
        add, journal = backend._table.add, backend._table.journal
        def on_update(status):
            backend._scheduler.handle(StatusUpdate(status))
        def stop(ids, grace):
            targets, _ = backend._table.request_stop(ids, grace)
            backend._policies.decide(Stop(tuple(targets)))
        upkeep = backend._scheduler.upkeep
    else:
        add, journal, on_update, stop, upkeep = (
            backend._add_task, backend._journal, backend._on_update, backend._stop, backend._upkeep
        )
    now = time.time()
    for n in range(N):
        add(TaskEntry(f"j.u.worker-{n}.1", "j", "worker", n, 0, "c", "s", 0.1, 64, 0,
                      f"S{n % 1000}", "h", 31000, "", now))
    statuses = [TaskStatus(f"j.u.worker-{n}.1", state, f"S{n % 1000}", f"u{n}{state}", "SOURCE_EXECUTOR",
                           None, None, None, now, {}) for state in ("TASK_STARTING", "TASK_RUNNING")
                for n in range(N)]
    before = time.perf_counter()
    for status in statuses:
        on_update(status)
    updates = time.perf_counter() - before
    stop([f"j.u.worker-{n}.1" for n in range(0, N, 2)], 5.0)
    if composed:
        backend._policies.policy.connected = True
    elif hasattr(backend, "_policy"):
        backend._policy.connected = True
    else:
        backend._connected = True
    before = time.perf_counter()
    for _ in range(50):
        upkeep()
    ticks = time.perf_counter() - before
    journal.close()
print(json.dumps({"update (us)": updates / len(statuses) * 1e6, "tick, 5,000 KILLs pending (ms)": ticks / 50 * 1000}))
"""

_CHILD = """
import json, tempfile
from pathlib import Path
from bench.mesos_bench import end_to_end
with tempfile.TemporaryDirectory() as tmp:
    phase, decisions = end_to_end(Path(tmp), 1000, 10_000)
phase["place() decision, median (ms)"] = sorted(decisions)[len(decisions) // 2] * 1000
print(json.dumps(phase))
"""

FIGURES = {
    "update (us)": "loop: one status update folded in (µs)",
    "tick, 5,000 KILLs pending (ms)": "loop: one tick, 10,000 tasks, 5,000 KILLs asked (ms)",
    "running": "all 10,000 observed running (s)",
    "launched": "all launched by the master (s)",
    "decided": "all placed and queued (s)",
    "our_cpu": "tfdeclare CPU (s)",
    "place() decision, median (ms)": "place() decision, median (ms)",
}


def _run(code: Path, end_to_end: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    figures: dict[str, float] = {}
    for child in (_LOOP, _CHILD) if end_to_end else (_LOOP,):
        out = subprocess.run(
            [sys.executable, "-c", child], capture_output=True, text=True, check=True, cwd=code, env=env
        )
        figures.update(json.loads(out.stdout.strip().splitlines()[-1]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop-only", action="store_true", help="skip the end-to-end run (minutes)")
    args = parser.parse_args()
    ours: list[dict[str, float]] = []
    theirs: list[dict[str, float]] = []
    for _ in range(args.rounds):
        theirs.append(_run(args.against.resolve(), not args.loop_only))
        ours.append(_run(REPO, not args.loop_only))
    print(f"{machine()}, {datetime.now(UTC):%Y-%m-%d}, {args.rounds} rounds, before then after in each")
    print("| figure | before (median) | after (median) | after / before (median of rounds) |")
    print("|---|---|---|---|")
    for key, label in FIGURES.items():
        if key not in ours[0]:
            continue
        before = statistics.median(r[key] for r in theirs)
        after = statistics.median(r[key] for r in ours)
        ratio = statistics.median(o[key] / t[key] for o, t in zip(ours, theirs, strict=True))
        print(f"| {label} | {before:.2f} | {after:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
