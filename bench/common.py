"""Shared benchmark helpers: timing, medians, generated job files, the CLI, the machine, and
the clean-up that leaves no job and no background controller of a bench's folder behind."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TFDECLARE = [sys.executable, "-m", "tfdeclare"]
CLI_SCRIPT = str(Path(sys.executable).parent / "tfdeclare")  # the console script users run


@dataclass
class Result:
    name: str
    target: str
    samples: list[float]
    unit: str = "s"
    lower_is_better: bool = True
    limit: float | None = None  # the target as a number, in `unit`
    # A confidence interval of the estimate: when given, the verdict is read from it (met,
    # missed, or None: inconclusive, the interval straddles the limit), not from the median.
    interval: tuple[float, float] | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def met(self) -> bool | None:
        if self.limit is None:
            return None
        if self.interval is not None:
            low, high = self.interval
            if self.lower_is_better:
                good, bad = high <= self.limit, low > self.limit
            else:
                good, bad = low >= self.limit, high < self.limit
            return True if good else False if bad else None
        return self.median <= self.limit if self.lower_is_better else self.median >= self.limit

    def row(self) -> str:
        spread = f"{min(self.samples):.3g}–{max(self.samples):.3g}" if len(self.samples) > 1 else "-"
        verdict = {True: "met", False: "**missed**", None: "inconclusive" if self.interval else "-"}[self.met]
        return (
            f"| {self.name} | {self.target} | {self.median:.3g} {self.unit} | {spread} | {len(self.samples)} | "
            f"{verdict} | {self.note} |"
        )


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, Python {platform.python_version()}, {platform.system()}"


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run(
    args: Sequence[str], cwd: Path, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        )
    return result


def job_text(name: str, rng: random.Random, command: str = "[python, train.py, --epochs, '10']") -> str:
    """A realistic job file: labels, env, three roles, resources in both spellings."""
    workers = rng.randint(1, 8)
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata:\n  name: {name}\n"
        f"  labels: {{team: t{rng.randint(0, 16)}, owner: user{rng.randint(0, 52)}}}\n"
        f"spec:\n  image: registry.example.com/tf:2.21.0\n  command: {command}\n"
        f"  env: {{DATA_DIR: /data/{name}, TF_ENABLE_ONEDNN_OPTS: '0'}}\n"
        f"  replicas:\n"
        f"    chief: {{count: 1, resources: {{cpus: 2, mem: 4Gi}}}}\n"
        f"    ps: {{count: 2, resources: {{cpus: 1, mem: 2048}}}}\n"
        f"    worker: {{count: {workers}, resources: {{cpus: 4, mem: 8Gi, gpus: 1}}}}\n"
        f"  restartPolicy: OnFailure\n  backoffLimit: 3\n"
    )


def _max_jobs() -> int:
    """``policy.maxJobs`` at its schema's maximum: the most jobs a state folder may hold."""
    schema = json.loads((REPO / "schemas" / "config.schema.json").read_text())
    return int(schema["properties"]["policy"]["properties"]["maxJobs"]["maximum"])


MAX_JOBS = _max_jobs()


def generate(folder: Path, count: int, seed: int = 1) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for i in range(count):
        path = folder / f"job-{i:05d}.yaml"
        path.write_text(job_text(f"job-{i:05d}", rng))
        paths.append(path)
    return paths


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0, poll: float = 0.002) -> float:
    """Seconds until ``predicate`` holds (polling quickly, for latency measurements)."""
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("benchmark condition never held")
        time.sleep(poll)
    return time.perf_counter() - started


def stop_process(process: subprocess.Popen[Any], timeout: float) -> None:
    """Asks ``process`` to stop (SIGTERM) and kills it when it has not within ``timeout`` s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


KEEPER_MODULE = "tfdeclare.cli.keeper"  # the background controller's process


def keepers_of(folder: Path) -> list[int]:
    """The pids of the background controllers (``tfdeclare.cli.keeper``) running for a state
    folder in ``folder``: named on their command line, or relative to their working folder."""
    root = folder.resolve()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if KEEPER_MODULE not in argv or "--state-dir" not in argv:
                continue
            state = Path(argv[argv.index("--state-dir") + 1])
            where = (entry / "cwd").resolve() / state
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if where == root or root in where.parents:
            found.append(int(entry.name))
    return found


def stop_keepers(folder: Path, grace_s: float = 60.0) -> None:
    """Waits until no background controller of ``folder`` runs (one finishing a deletion exits
    when it is done), for ``grace_s`` at most; then asks those left to stop (SIGTERM), and kills
    the ones still there 10 s later."""
    deadline = time.monotonic() + grace_s
    while keepers_of(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 0.0)):
        for pid in keepers_of(folder):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while keepers_of(folder) and time.monotonic() < deadline:
            time.sleep(0.1)


@contextlib.contextmanager
def cleaned_up(
    workdir: Path,
    cli: Sequence[str] = (CLI_SCRIPT,),
    *options: str,
    env: Mapping[str, str] | None = None,
) -> Iterator[Path]:
    """``workdir``, a project a bench runs ``tfdeclare`` in. On the way out, failed or not:
    ``cli delete --all OPTIONS`` there (its jobs' tasks stopped), then ``stop_keepers``: no
    background controller of it is left running once the bench has gone on."""
    try:
        yield workdir
    finally:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [*cli, "delete", "--all", *options],
                cwd=workdir,
                env=dict(env) if env is not None else None,
                capture_output=True,
                timeout=300,
                check=False,
            )
        stop_keepers(workdir)


def results_header() -> list[str]:
    """The lines above a results table of ``Result.row()`` lines: machine, date, load, and the
    table's head."""
    return [
        f"Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Load average at the end: {os.getloadavg()[0]:.1f}.",
        "",
        "| benchmark | target | median | range | runs | verdict | notes |",
        "|---|---|---|---|---|---|---|",
    ]


def quick_run(prog: str, doc: str | None) -> bool:
    """The options of a bench run as a program whose only one is ``--quick`` (fewer runs of
    each): ``--help`` prints ``doc`` and exits, an unknown option is refused, rather than
    either starting the bench."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--quick", action="store_true", help="fewer runs of each")
    return bool(parser.parse_args().quick)
