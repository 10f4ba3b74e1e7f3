"""The core's benchmarks (`bench/core_bench.py`, quick) for this checkout and another, taken
alongside: round by round, one after the other, so that both see the same load; each figure
as its median per checkout and the median of the per-round ratios (issue 23: a shared machine
moves absolute times by 2x in an hour, ratios of runs made side by side much less).

`python -m bench.alongside --against DIR [--rounds 2]` (``make bench-alongside AGAINST=DIR``):
DIR is another checkout of tfdeclare (a `git worktree` of the commit to compare with); each of
its runs uses this interpreter with DIR first on `PYTHONPATH`, so its own `bench/` and
`tfdeclare/` are measured.
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

_CHILD = """
import json
from bench.core_bench import main
results = []
main(results, quick=True)
print(json.dumps({r.name: r.median for r in results}))
"""


def _run(code: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, cwd=code, env=env
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.alongside")
    parser.add_argument("--against", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "alongside.json")
    args = parser.parse_args()
    codes = {"this": REPO, "against": args.against.resolve()}
    for code in codes.values():  # bytecode compiled first: the workplace may not write it
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(code / "tfdeclare")], check=True)
    rounds: list[dict[str, dict[str, float]]] = []
    for n in range(args.rounds):
        order = list(codes.items()) if n % 2 == 0 else list(reversed(codes.items()))
        rounds.append({name: _run(code) for name, code in order})
        print(f"round {n + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    report: dict[str, object] = {
        "machine": machine(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": os.getloadavg(),
        "rounds": rounds,
    }
    for figure in rounds[0]["this"]:
        if figure not in rounds[0]["against"]:  # a figure the other checkout's bench lacks
            report[figure] = {"this": statistics.median(r["this"][figure] for r in rounds)}
            print(f"{figure}: this {report[figure]['this']:.4g} (not measured by the other checkout)")
            continue
        this = [r["this"][figure] for r in rounds]
        against = [r["against"][figure] for r in rounds]
        ratio = statistics.median(a / b for a, b in zip(this, against, strict=True))
        report[figure] = {
            "this": statistics.median(this),
            "against": statistics.median(against),
            "ratio": ratio,
        }
        print(
            f"{figure}: this {statistics.median(this):.4g}, against {statistics.median(against):.4g}, "
            f"this / against {ratio:.3f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
