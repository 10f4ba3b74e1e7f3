"""Issue 2's targets: cold `validate` start-up, validate + plan of 10,000 files, warm re-plan
after one change, and peak memory for 10,000 jobs."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import CLI_SCRIPT, REPO, Result, generate, job_text, run, timed

_IN_PROCESS = """
import json, resource, sys, time
started = time.perf_counter()
from pathlib import Path
from tfdeclare.core.planner import PlanCache, plan
from tfdeclare.core.render import render_text
from tfdeclare.shell.sources import SpecFiles
from tfdeclare.shell.store import StateStore
desired = SpecFiles([Path(sys.argv[1])]).load()
result = plan(desired, StateStore(Path(sys.argv[2])).observed())
text = render_text(result)
elapsed = time.perf_counter() - started
assert len(desired.jobs) == int(sys.argv[3]) and not desired.diagnostics
print(json.dumps({"seconds": elapsed, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def cold_validate(workdir: Path, runs: int) -> Result:
    path = workdir / "one.yaml"
    path.write_text(job_text("one", random.Random(0)))
    run([CLI_SCRIPT, "validate", str(path)], workdir)  # page cache warm, like a pre-commit hook
    samples = [timed(lambda: run([CLI_SCRIPT, "validate", str(path)], workdir)) for _ in range(runs)]
    return Result(
        "cold `tfdeclare validate` of one file (process start to exit)",
        "≤ 150 ms",
        [s * 1000 for s in samples],
        "ms",
        limit=150,
    )


def plan_10k(workdir: Path, runs: int) -> tuple[Result, Result]:
    specs = workdir / "specs10k"
    generate(specs, 10_000)
    state = workdir / "state"
    seconds, memory = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _IN_PROCESS, str(specs), str(state), "10000"],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        data = json.loads(out.stdout)
        seconds.append(data["seconds"])
        memory.append(data["maxrss_kib"] / 1024)
    return (
        Result(
            "validate + plan of 10,000 job files, one process (imports included)", "≤ 3 s", seconds, limit=3.0
        ),
        Result("peak memory (RSS) for 10,000 jobs", "≤ 300 MB", memory, "MB", limit=300),
    )


def replan_warm(workdir: Path, runs: int, *, told: bool) -> Result:
    from tfdeclare.core.enums import Phase
    from tfdeclare.core.observed import ObservedJob
    from tfdeclare.core.planner import PlanCache, plan
    from tfdeclare.shell.sources import SpecFiles

    specs = workdir / "specs10k"
    files = SpecFiles([specs])
    time.sleep(2.1)  # out of the racy-mtime window for the files just generated
    applied = files.load()
    observed = {  # everything applied and running: the daemon's steady state
        name: ObservedJob(name, job.canonical, job.spec_hash, Phase.RUNNING)
        for name, job in applied.jobs.items()
    }
    cache = PlanCache()
    plan(applied, observed, None, cache)
    samples = []
    rng = random.Random(7)
    target = specs / "job-00042.yaml"
    for i in range(runs):
        target.write_text(job_text("job-00042", rng).replace("'10'", f"'{i}'"))
        started = time.perf_counter()
        desired = files.load({str(target)} if told else None)
        result = plan(desired, observed, None, cache)
        samples.append((time.perf_counter() - started) * 1000)
        assert sum(1 for j in result.jobs if j.action.changes_something) == 1
    return Result(
        "re-plan of 10,000 jobs after one file changed, warm process", "≤ 50 ms", samples, "ms", limit=50
    )


def main(results: list[Result], quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        results.append(cold_validate(workdir, 7 if quick else 21))
        seconds, memory = plan_10k(workdir, 3 if quick else 5)
        results.extend([seconds, memory])
        results.append(replan_warm(workdir, 10 if quick else 30, told=True))
        results.append(replan_warm(workdir, 10 if quick else 30, told=False))


if __name__ == "__main__":
    collected: list[Result] = []
    main(collected, quick="--quick" in sys.argv)
    for result in collected:
        print(result.row())
