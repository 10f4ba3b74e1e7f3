"""The core's targets: cold `validate` start-up (also as a ratio to a bare `import yaml`),
validate + plan of as many files as a state folder may hold jobs (``policy.maxJobs``) and its peak memory (also as ratios to a bare PyYAML
CSafeLoader loop over the same files, measured alongside), warm re-plan after one change (the
full rescan also as a ratio to a bare `os.scandir` + `stat` walk alongside)."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import CLI_SCRIPT, MAX_JOBS, Result, generate, job_text, quick_run, run, timed

_MEASURE_CHILD = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
elapsed = time.perf_counter() - started
assert done.returncode == 0, done.stderr
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(elapsed, used.ru_maxrss, used.ru_utime + used.ru_stime)
"""


# The bench's jobs run in an image with GPUs: Mesos jobs (the local backend refuses an image).
BACKEND = ("--backend", "mesos")

# What reading the files costs at least: PyYAML's C loader over every file, one process.
_YAML_LOOP = """
import os, sys, yaml
for root, _, names in os.walk(sys.argv[1]):
    for name in names:
        with open(os.path.join(root, name), "rb") as handle:
            list(yaml.load_all(handle.read(), Loader=yaml.CSafeLoader))
"""


def cold_validate(workdir: Path, runs: int) -> tuple[Result, Result]:
    path = workdir / "one.yaml"
    path.write_text(job_text("one", random.Random(0)))
    command = [CLI_SCRIPT, "validate", str(path), *BACKEND]
    run(command, workdir)  # page cache warm, like a pre-commit hook
    samples, bare = [], []
    for _ in range(runs):  # interleaved, so both see the same machine load
        samples.append(timed(lambda: run(command, workdir)))
        bare.append(timed(lambda: run([sys.executable, "-c", "import yaml"], workdir)))
    ratios = [s / b for s, b in zip(samples, bare, strict=True)]
    return (
        Result(
            "cold `tfdeclare validate` of one file (process start to exit)",
            "≤ 150 ms",
            [s * 1000 for s in samples],
            "ms",
            limit=150,
            extra={"bare_import_yaml_ms": [b * 1000 for b in bare]},
        ),
        Result(
            "that, as a ratio to a bare `python -c 'import yaml'` measured alongside",
            "≤ 4×",
            ratios,
            "×",
            limit=4.0,
            note=f"bare import yaml: median {statistics.median(bare) * 1000:.0f} ms",
        ),
    )


def plan_at_max_jobs(workdir: Path, runs: int) -> tuple[Result, Result, Result, Result, Result]:
    """The real command, `tfdeclare plan DIR`, as a user runs it: process start to exit; and
    beside each run, a bare PyYAML loop over the same files, also from process start. As many
    files as a state folder may hold jobs (``policy.maxJobs`` at its maximum): more are refused
    (each an error at its file), so the command a user can run plans at most that many."""
    specs = workdir / "specs-max"
    generate(specs, MAX_JOBS)
    # An empty registry of state folders: `plan` looks for the jobs it would create under every
    # other state folder this user has used (`shell/statedirs.py`), and this machine's other
    # runs would otherwise decide how many there are to look through.
    registry = workdir / "registry"
    seconds, memory, cpu, baseline, baseline_memory, baseline_cpu = [], [], [], [], [], []
    for _ in range(runs):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                _MEASURE_CHILD,
                CLI_SCRIPT,
                "plan",
                str(specs),
                "--state-dir",
                str(workdir / "state"),
                *BACKEND,
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=workdir,
            env={**os.environ, "TFDECLARE_REGISTRY_DIR": str(registry)},
        )
        elapsed, maxrss_kib, used = out.stdout.split()
        seconds.append(float(elapsed))
        memory.append(int(maxrss_kib) / 1024)
        cpu.append(float(used))
        loop = subprocess.run(
            [sys.executable, "-c", _MEASURE_CHILD, sys.executable, "-c", _YAML_LOOP, str(specs)],
            capture_output=True,
            text=True,
            check=True,
            cwd=workdir,
        )
        loop_elapsed, loop_maxrss_kib, loop_used = loop.stdout.split()
        baseline.append(float(loop_elapsed))
        baseline_memory.append(int(loop_maxrss_kib) / 1024)
        baseline_cpu.append(float(loop_used))
    ratios = [s / b for s, b in zip(seconds, baseline, strict=True)]
    cpu_ratios = [s / b for s, b in zip(cpu, baseline_cpu, strict=True)]
    memory_ratios = [m / b for m, b in zip(memory, baseline_memory, strict=True)]
    return (
        Result(
            f"`tfdeclare plan` of {MAX_JOBS:,} job files, policy.maxJobs (validate + plan, one process, start to exit)",
            "≤ 3 s",
            seconds,
            limit=3.0,
            extra={"pyyaml_loop_s": baseline},
        ),
        Result(
            "that, as a ratio to a bare PyYAML CSafeLoader loop over the same files, measured alongside",
            "≤ 1.25×",
            ratios,
            "×",
            limit=1.25,
            note=f"PyYAML loop: median {statistics.median(baseline):.2f} s",
        ),
        Result(
            "the same in CPU time (user + system: what the machine's other work inflates least)",
            "≤ 1.25×",
            cpu_ratios,
            "×",
            limit=1.25,
            note=f"plan: median {statistics.median(cpu):.2f} s; PyYAML loop: {statistics.median(baseline_cpu):.2f} s",
        ),
        Result("peak memory (RSS) of that process", "≤ 300 MB", memory, "MB", limit=300),
        Result(
            "that, as a ratio to the bare PyYAML loop's peak memory (issue 33)",
            "≤ 1.5×",
            memory_ratios,
            "×",
            limit=1.5,
            note=f"PyYAML loop: median {statistics.median(baseline_memory):.0f} MB",
        ),
    )


def _bare_walk(folder: Path) -> int:
    """What a full rescan costs at least: ``os.scandir`` and a ``stat`` of every file."""
    stack, count = [str(folder)], 0
    while stack:
        for entry in os.scandir(stack.pop()):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                entry.stat()
                count += 1
    return count


def replan_warm(workdir: Path, runs: int, *, told: bool, jobs: int = 10_000) -> list[Result]:
    from tfdeclare.core.enums import Phase
    from tfdeclare.core.plan.observed import ObservedJob
    from tfdeclare.core.plan.planner import PlanCache, plan
    from tfdeclare.shell.sources import SpecFiles

    specs = workdir / f"specs{jobs}"  # issue 23: the told re-plan should not depend on the number of jobs
    if not specs.exists():
        generate(specs, jobs)
    files = SpecFiles([specs])
    time.sleep(2.1)  # out of the racy-mtime window for the files just generated
    applied = files.load()
    observed = {  # everything applied and running: the daemon's steady state
        name: ObservedJob(name, job.canonical, job.spec_hash, Phase.RUNNING)
        for name, job in applied.jobs.items()
    }
    cache = PlanCache()
    plan(applied, observed, None, cache)
    samples, walks = [], []
    rng = random.Random(7 if told else 8)  # never write back what is already applied
    target = specs / "job-00042.yaml"
    for i in range(runs):
        target.write_text(job_text("job-00042", rng).replace("'10'", f"'{i}'"))
        started = time.perf_counter()
        desired = files.load({str(target)} if told else None)
        result = plan(desired, observed, None, cache)
        samples.append((time.perf_counter() - started) * 1000)
        assert sum(1 for j in result.jobs if j.action.changes_something) == 1
        if not told:  # alongside: the bare walk over the same files
            started = time.perf_counter()
            _bare_walk(specs)
            walks.append((time.perf_counter() - started) * 1000)
    how = "told which file changed (the daemon's file events)" if told else "full rescan (every file stat'ed)"
    results = [
        Result(
            f"re-plan of {jobs:,} jobs after one file changed, warm process, {how}",
            "≤ 50 ms" if jobs == 10_000 else "–",
            samples,
            "ms",
            limit=50 if jobs == 10_000 else None,
        )
    ]
    if walks:
        results.append(
            Result(
                "that, as a ratio to a bare os.scandir + stat walk of the same files alongside (issue 33)",
                "≤ 1.25×",
                [s / w for s, w in zip(samples, walks, strict=True)],
                "×",
                limit=1.25,
                note=f"bare walk: median {statistics.median(walks):.1f} ms",
            )
        )
    return results


def main(results: list[Result], quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        results.extend(cold_validate(workdir, 7 if quick else 21))
        results.extend(plan_at_max_jobs(workdir, 3 if quick else 5))
        results.extend(replan_warm(workdir, 10 if quick else 30, told=True))
        results.extend(replan_warm(workdir, 10 if quick else 30, told=True, jobs=1_000))
        results.extend(replan_warm(workdir, 10 if quick else 30, told=False))


if __name__ == "__main__":
    collected: list[Result] = []
    main(collected, quick=quick_run("python -m bench.core_bench", __doc__))
    for result in collected:
        print(result.row())
