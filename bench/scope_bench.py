"""Issue 24's benchmark: the time to complete a ParameterServerStrategy job of a fixed number
of steps (``bench/pss_steps.py``: chief + ps + 2 workers on the local backend, the chief
checkpointing every round) while one worker is SIGKILLed every K seconds (restart backoff
1-2 s for both, through the config), with
``restartScope: Task`` (the worker restarts alone, the rest keep training) against
``restartScope: Job`` (every kill restarts the whole job, which resumes from the chief's
checkpoint) against no fault at all. The three run one after another in each round, on the
same machine state, and each round gives one ratio of each kind (paired).

    python -m bench --only scope [--quick]
    python -m bench.scope_bench [ROUNDS]          (prints the rows)

Goals (issue 24): with faults, Task within 1.2x of the undisturbed time, and at least 30 %
faster than Job (Task/Job <= 0.7).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from bench.common import CLI_SCRIPT, REPO, Result, cleaned_up, machine

STEPS = 1500
KILL_EVERY_S = 12.0
# Backoff kept short for both scopes alike (config restartBackoff), so the rows compare what a
# restart costs, not the backoff policy (the default doubles from 1 s up to 300 s).
CONFIG = "restartBackoff: {initialSeconds: 1, maxSeconds: 2}\n"
WORKLOAD = REPO / "bench" / "pss_steps.py"


def _spec(name: str, workdir: Path, scope: str | None) -> str:
    small = {"resources": {"cpus": 0.2, "mem": 512}}
    spec: dict[str, object] = {
        "command": ["python", "pss_steps.py"],
        "env": {"TF_ENABLE_ONEDNN_OPTS": "0", "STEPS": str(STEPS), "CKPT_DIR": str(workdir / "ckpt")},
        "replicas": {
            "chief": {"count": 1, **small},
            "ps": {"count": 1, **small},
            "worker": {"count": 2, **small},
        },
        "backoffLimit": 100,  # the faults are the benchmark's: never give up on them
    }
    if scope is not None:
        spec["restartScope"] = scope
    return yaml.safe_dump(
        {"apiVersion": "tfdeclare/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": spec}
    )


def _worker_pid(job: str) -> int | None:
    """The live process of the job's worker-1 (from its environment), if any."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if b"pss_steps.py" not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        env = dict(e.decode(errors="replace").split("=", 1) for e in environ if b"=" in e)
        wanted = (job, "worker", "1")
        if (
            env.get("TFDECLARE_JOB"),
            env.get("TFDECLARE_ROLE"),
            env.get("TFDECLARE_INDEX"),
        ) == wanted and state != "Z":
            return int(entry)
    return None


def run_once(root: Path, name: str, scope: str | None, faults: bool) -> tuple[float, int, int]:
    """(seconds from apply to the job's success, workers killed, times the chief's coordinator
    said a worker was recovered)."""
    workdir = root / name
    specs = workdir / "specs"
    specs.mkdir(parents=True)
    shutil.copy(WORKLOAD, specs / "pss_steps.py")
    (specs / "job.yaml").write_text(_spec(name, workdir, scope))
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    done = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        while not done.wait(KILL_EVERY_S):
            pid = _worker_pid(name)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
                except ProcessLookupError:
                    pass

    with cleaned_up(workdir):  # the job deleted, its background controller gone, failed or not
        started = time.perf_counter()
        apply = subprocess.Popen(
            [CLI_SCRIPT, "apply", "specs", "--wait", "--timeout", "1200"],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        thread = threading.Thread(target=killer, daemon=True)
        if faults:
            thread.start()
        try:
            out, _ = apply.communicate(timeout=1300)
        finally:
            done.set()
            if apply.poll() is None:
                apply.kill()
        elapsed = time.perf_counter() - started
        if faults:
            thread.join()
        if apply.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{out}")
        logs = workdir / ".tfdeclare" / "local" / "logs"
        chief = "".join(p.read_text(errors="replace") for p in logs.rglob("*chief-0*"))
    return elapsed, kills, chief.count("has been recovered")


def measure(root: Path, rounds: int) -> list[Result]:
    calm: list[float] = []
    task: list[float] = []
    job: list[float] = []
    kills: dict[str, list[int]] = {"Task": [], "Job": []}
    rejoined: list[int] = []
    for i in range(rounds):
        calm.append(run_once(root, f"calm{i}", None, faults=False)[0])
        seconds, killed, back = run_once(root, f"task{i}", "Task", faults=True)
        task.append(seconds)
        kills["Task"].append(killed)
        rejoined.append(back)
        seconds, killed, _ = run_once(root, f"job{i}", "Job", faults=True)
        job.append(seconds)
        kills["Job"].append(killed)
        print(
            f"round {i}: undisturbed {calm[-1]:.1f} s, Task {task[-1]:.1f} s ({kills['Task'][-1]} kills, "
            f"{rejoined[-1]} rejoins), Job {job[-1]:.1f} s ({kills['Job'][-1]} kills)",
            flush=True,
        )
    what = f"PSS job of {STEPS} steps (chief, ps, 2 workers), worker-1 SIGKILLed every {KILL_EVERY_S:g} s"
    times = (
        f"medians: undisturbed {statistics.median(calm):.1f} s, Task {statistics.median(task):.1f} s "
        f"({statistics.median(kills['Task']):g} kills), Job {statistics.median(job):.1f} s "
        f"({statistics.median(kills['Job']):g} kills)"
    )
    return [
        Result(
            f"{what}: restartScope Task / undisturbed",
            "≤ 1.2×",
            [t / c for t, c in zip(task, calm, strict=True)],
            "×",
            limit=1.2,
            note=times,
            extra={"undisturbed_s": calm, "task_s": task, "job_s": job, "kills": kills, "rejoined": rejoined},
        ),
        Result(
            f"{what}: restartScope Task / restartScope Job",
            "≤ 0.7× (30 % faster)",
            [t / j for t, j in zip(task, job, strict=True)],
            "×",
            limit=0.7,
            note="each round runs the three one after another",
        ),
    ]


def main(results: list[Result], quick: bool) -> None:
    if importlib.util.find_spec("tensorflow") is None:
        print("scope: skipped (TensorFlow is not installed: make venv installs it)", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        results.extend(measure(Path(tmp), 1 if quick else 3))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 3)
    print(f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.")
    for row in rows:
        print(row.row())
