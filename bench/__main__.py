"""``make bench``: run the benchmarks and write bench/out/results.md (a table for
docs/benchmarks.md, with the machine and date) and bench/out/results.json.

    python -m bench [--quick] [--only core,local,daemon,mesos,realmesos,framework,scope,history,limits,progress] [--out NAME]

``make bench-docker`` runs the ``docker`` suite alone (it needs a Docker engine) into
bench/out/docker.md and docker.json; ``make bench-pulls`` the ``pulls`` suite (issue 29) into
bench/out/pulls.md and pulls.json.
"""

from __future__ import annotations

import argparse
import compileall
import json
import time

from bench.common import REPO, Result, machine

SUITES = (
    "core",
    "local",
    "daemon",
    "mesos",
    "realmesos",
    "framework",
    "scope",
    "history",
    "limits",
    "progress",
)  # and "docker", "pulls", by name only


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument(
        "--only", default=",".join(SUITES), help="comma-separated: " + ", ".join((*SUITES, "docker", "pulls"))
    )
    parser.add_argument("--out", default="results", help="bench/out/NAME.md and NAME.json (default results)")
    args = parser.parse_args()
    # Measure the package as installed: with its bytecode compiled. Where
    # PYTHONDONTWRITEBYTECODE is set, an editable checkout would otherwise compile every
    # module again at every start (about 50 ms of each cold command).
    compileall.compile_dir(REPO / "tfdeclare", quiet=1)
    results: list[Result] = []
    for suite in args.only.split(","):
        started = time.monotonic()
        module = __import__(f"bench.{suite}_bench", fromlist=["main"])
        module.main(results, args.quick)
        print(f"{suite}: {time.monotonic() - started:.0f} s", flush=True)
    header = [
        f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| benchmark | target | median | range | runs | target | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    table = "\n".join(header + [r.row() for r in results]) + "\n"
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / f"{args.out}.md").write_text(table)
    (out / f"{args.out}.json").write_text(
        json.dumps(
            [
                {
                    "name": r.name,
                    "target": r.target,
                    "median": r.median,
                    "unit": r.unit,
                    "samples": r.samples,
                    "met": r.met,
                    "interval": r.interval,
                    "note": r.note,
                    **r.extra,
                }
                for r in results
            ],
            indent=1,
        )
    )
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
