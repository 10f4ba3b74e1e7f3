"""Issue 3's targets on the local backend: `apply` until all tasks of a 10-task job started,
the runner's overhead on a real TensorFlow job's steps/second, 100 small concurrent jobs."""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import CLI_SCRIPT, REPO, Result, run, timed, wait_for

CONFIG = "local: {cpus: 64, mem: 64Gi, gpus: 0, portRange: {first: 34000, last: 35999}}\n"
THROUGHPUT = REPO / "bench" / "tf_throughput.py"


def _job(name: str, count: int, command: str, cpus: float = 0.1) -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n  command: {command}\n"
        f"  replicas:\n    worker: {{count: {count}, resources: {{cpus: {cpus}, mem: 32}}}}\n"
    )


def apply_ten(workdir: Path, runs: int) -> Result:
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    marks = workdir / "marks"
    command = f"[sh, -c, 'echo up > {marks}/$TFDECLARE_INDEX; exec sleep 120']"
    samples = []
    for i in range(runs):
        specs = workdir / f"specs{i}"
        specs.mkdir()
        marks.mkdir(exist_ok=True)
        for old in marks.iterdir():
            old.unlink()
        (specs / "ten.yaml").write_text(_job(f"ten{i}", 10, command))
        started = time.perf_counter()
        run([CLI_SCRIPT, "apply", str(specs)], workdir)
        wait_for(lambda: len(list(marks.iterdir())) == 10, timeout=30)
        samples.append(time.perf_counter() - started)
        run([CLI_SCRIPT, "delete", f"ten{i}"], workdir)
    return Result(
        "`apply` of a 10-task job until every task runs (no TensorFlow)", "≤ 1 s", samples, limit=1.0
    )


def hundred_jobs(workdir: Path) -> Result:
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    specs = workdir / "hundred"
    specs.mkdir()
    for i in range(100):
        (specs / f"j{i:03d}.yaml").write_text(_job(f"small-{i:03d}", 2, "[sleep, '2']", cpus=0.01))
    seconds = timed(lambda: run([CLI_SCRIPT, "apply", str(specs), "--wait", "--timeout", "300"], workdir))
    listing = run([CLI_SCRIPT, "status"], workdir).stdout
    succeeded = listing.count("Succeeded")
    return Result(
        "100 small concurrent jobs (2 tasks each) applied and run to Succeeded",
        "converge, no error",
        [seconds],
        note=f"{succeeded}/100 Succeeded",
        extra={"succeeded": succeeded},
    )


def _steps_per_second(output: str) -> float:
    match = re.search(r"STEPS_PER_SECOND ([0-9.]+)", output)
    if match is None:
        raise RuntimeError(f"no throughput in:\n{output[-2000:]}")
    return float(match.group(1))


def tf_overhead(workdir: Path, runs: int) -> Result | None:
    if importlib.util.find_spec("tensorflow") is None:
        return None
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    env = {"TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    by_hand, through = [], []
    for i in range(runs):
        hand = subprocess.run(
            [sys.executable, str(THROUGHPUT)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
        )
        by_hand.append(_steps_per_second(hand.stdout))
        specs = workdir / f"tf{i}"
        specs.mkdir()
        env_yaml = ", ".join(f"{k}: '{v}'" for k, v in env.items())
        (specs / "tf.yaml").write_text(
            _job(f"tf{i}", 1, f"[python, {THROUGHPUT}]", cpus=1).replace(
                "  replicas:", f"  env: {{{env_yaml}}}\n  replicas:"
            )
        )
        run([CLI_SCRIPT, "apply", str(specs), "--wait", "--timeout", "600"], workdir)
        through.append(_steps_per_second(run([CLI_SCRIPT, "logs", f"tf{i}"], workdir).stdout))
        run([CLI_SCRIPT, "delete", f"tf{i}"], workdir)
    ratios = [100 * (1 - t / h) for t, h in zip(through, by_hand, strict=True)]
    return Result(
        "runner overhead on a TF job's steps/second (tfdeclare vs by hand)",
        "≤ 2 %",
        ratios,
        "%",
        limit=2.0,
        note=f"by hand {statistics.median(by_hand):.0f} steps/s, through tfdeclare {statistics.median(through):.0f} steps/s",
    )


def main(results: list[Result], quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results.append(apply_ten(Path(tmp), 3 if quick else 7))
    with tempfile.TemporaryDirectory() as tmp:
        results.append(hundred_jobs(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        overhead = tf_overhead(Path(tmp), 3 if quick else 7)
        if overhead is not None:
            results.append(overhead)
