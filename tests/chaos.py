"""The chaos suite of issue 12 ("lose nothing, never run a job twice, never get stuck"): seeded
iterations that change the job files, run a controller (``tfdeclare apply``, ``daemon`` or
``delete``, real CLI processes) and SIGKILL it at a random point, sometimes with a fault of the
environment on top, then recover as a user would (``apply --prune``, ``delete`` of the jobs
whose files are gone) and check the invariants:

- every job converges to what the files say (``plan --prune --detailed-exitcode`` says no
  changes, serving jobs Running with every slot running, finite jobs Succeeded) — else *stuck*;
- at most one live task per (job, role, index) once converged, and never two of one attempt
  while the faults happen; a Succeeded job whose file did not change never runs again — else
  a *duplicate*;
- no job forgotten: every job of the files has its status file, a job whose file is truncated
  keeps running under ``--prune`` — else a *lost job*;
- no file a task wrote is lost (tasks are ``tests/e2e_task.py``, writing into their working
  folder on the local backend, into a shared folder on Mesos) — else a *lost task file*;
- every status file parses and matches ``schemas/status.schema.json``, also right after a
  SIGKILL — else a *corrupt status file*.

Fault kinds, one per iteration in a seeded order: the controller killed during ``apply
--prune``, ``daemon --prune`` or ``delete``; a job file truncated (``--prune`` must keep its
job); on the local backend the status folder full or read-only (a tmpfs, needs root: skipped
otherwise); on Mesos, against the master emulator (``tests/mesos_emulator``), a master restart,
an agent restart (its tasks die), a partition healed later, dropped or delayed status updates.

    python -m tests.chaos --backend local|mesos [--iterations N] [--seed S]

prints the counts per fault kind and exits 1 when any invariant was broken. ``make chaos`` runs
100 iterations per backend; ``tests/test_chaos.py`` a short seeded run inside ``make test``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.conftest import REPO, kill_leftovers, processes_of, worker_ports
from tests.waiting import wait_until
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.schema import schema_text

TASK = str(REPO / "tests" / "e2e_task.py")
PY = sys.executable
STATUS_SCHEMA = json.loads(schema_text("status"))

LOCAL_FAULTS = (
    "kill-apply",
    "kill-daemon",
    "kill-delete",
    "truncate-prune",
    "status-full",
    "status-readonly",
)
MESOS_FAULTS = (
    "kill-apply",
    "kill-daemon",
    "kill-delete",
    "truncate-prune",
    "master-restart",
    "agent-restart",
    "partition-heal",
    "drop-updates",
    "delay-updates",
)
PROBLEMS = ("duplicates", "lost_jobs", "lost_task_files", "corrupt_status", "stuck")
NAMES = ("alpha", "bravo", "charlie", "delta")
CONVERGE_S = 60.0
APPLY = ["apply", "specs", "--prune"]
DAEMON = ["daemon", "--specs", "specs", "--prune", "--interval", "0.3", "--port", "0"]


@dataclass
class Job:
    """What a job's file says: serving roles (tasks run until stopped) or a finite one (its
    workers exit 0 after a moment, so the job Succeeds)."""

    name: str
    finite: bool
    workers: int = 1
    ps: int = 0
    generation: int = 0

    def slots(self) -> set[tuple[str, int]]:
        if self.finite:
            return set()
        return {("worker", i) for i in range(self.workers)} | {("ps", i) for i in range(self.ps)}


@dataclass
class Tally:
    """Counts of one fault kind."""

    iterations: int = 0
    survived: int = 0
    interrupted: int = 0  # SIGKILLs that hit a controller still running (others had finished)
    problems: Counter[str] = field(default_factory=Counter)


class Chaos:
    """One project folder on one backend, changed and faulted iteration after iteration."""

    def __init__(self, root: Path, backend: str, seed: int, log: Callable[[str], None] = print) -> None:
        self.root = root
        self.backend = backend
        self.seed = seed
        self.log = log
        self.jobs: dict[str, Job] = {}
        self.removed: set[str] = set()  # files gone: the jobs must be deleted
        self.seen_files: set[Path] = set()
        self.finished: dict[str, tuple[str, frozenset[Path]]] = {}  # finite job -> (file text, files)
        self.tallies: dict[str, Tally] = {}
        self.notes: list[str] = []
        self.unfelt = 0  # faults of the status folder that no write ran into
        self.emulator: Any = None
        self.tmpfs = False
        (root / "specs").mkdir(parents=True, exist_ok=True)
        (root / "status").mkdir(exist_ok=True)
        (root / "taskfiles").mkdir(exist_ok=True)
        if backend == "mesos":
            from tests.mesos_fixtures import config_yaml, start_emulator

            self.emulator = start_emulator(
                root,
                agents=2,
                agent_resources="cpus:4;mem:4096;ports:[31000-31099]",
                agent_ping_timeout=0.2,
                max_agent_ping_timeouts=3,
                agent_reregister_timeout=1.0,
                seed=seed,
            )
            (root / "tfdeclare.yaml").write_text(config_yaml(self.emulator.url, fencingTimeoutSeconds=1.5))
        else:
            first, last = worker_ports()
            (root / "tfdeclare.yaml").write_text(
                "restartBackoff: {initialSeconds: 0.2, maxSeconds: 1}\n"
                f"local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {first}, last: {last}}}}}\n"
            )
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(root / "status")],
                check=False,
                capture_output=True,
            )
            self.tmpfs = mounted.returncode == 0
            if not self.tmpfs:
                self.notes.append("status-full and status-readonly skipped: cannot mount a tmpfs (not root)")

    # ---- the files ---------------------------------------------------------------------------

    def faults(self) -> tuple[str, ...]:
        kinds = MESOS_FAULTS if self.backend == "mesos" else LOCAL_FAULTS
        return tuple(k for k in kinds if self.tmpfs or not k.startswith("status-"))

    def text(self, job: Job) -> str:
        out = "." if self.backend == "local" else str(self.root / "taskfiles" / job.name)
        lines = [
            "apiVersion: tfdeclare/v1",
            "kind: TFJob",
            f"metadata: {{name: {job.name}}}",
            "spec:",
            f"  env: {{OUT: '{out}', GENERATION: '{job.generation}'}}",
            "  workingDir: .",
            "  replicas:",
        ]
        roles = {"worker": (job.workers, "sleep=0.3" if job.finite else "serve")}
        if job.ps:
            roles["ps"] = (job.ps, "serve")
        for role, (count, mode) in roles.items():
            lines.append(
                f"    {role}: {{count: {count}, resources: {{cpus: 0.1, mem: 32}}, command: [{PY}, {TASK}, '{mode}']}}"
            )
        return "\n".join(lines) + "\n"

    def write(self, job: Job) -> None:
        self.jobs[job.name] = job
        self.removed.discard(job.name)
        self.finished.pop(job.name, None)
        if self.backend == "mesos":
            (self.root / "taskfiles" / job.name).mkdir(exist_ok=True)
        (self.root / "specs" / f"{job.name}.yaml").write_text(self.text(job))

    def remove(self, name: str) -> None:
        self.jobs.pop(name)
        self.removed.add(name)
        self.finished.pop(name, None)
        (self.root / "specs" / f"{name}.yaml").unlink()

    def change(self, rng: random.Random) -> str:
        """One random change of the files, as a user makes it."""
        free = [n for n in NAMES if n not in self.jobs]
        choices = (
            ["restart", "resize", "none"]
            + (["create"] if free else [])
            + (["remove"] if len(self.jobs) > 1 else [])
        )
        what = rng.choice(choices)
        if what == "create":
            name = rng.choice(free)
            self.write(
                Job(
                    name,
                    finite=name == "delta",
                    workers=rng.randint(1, 2),
                    ps=rng.randint(0, 1) if name != "delta" else 0,
                )
            )
        elif what == "remove":
            self.remove(rng.choice(sorted(self.jobs)))
        elif what == "restart":
            job = self.jobs[rng.choice(sorted(self.jobs))]
            job.generation += 1
            self.write(job)
        elif what == "resize":
            job = self.jobs[rng.choice(sorted(self.jobs))]
            job.workers = 3 - job.workers
            self.write(job)
        return what

    # ---- processes ---------------------------------------------------------------------------

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "tfdeclare", *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            check=False,
        )

    def start(self, args: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [PY, "-m", "tfdeclare", *args],
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def killed(
        self, args: list[str], delay: float, tally: Tally, during: Callable[[], None] | None = None
    ) -> None:
        """Run ``tfdeclare ARGS`` and SIGKILL it after ``delay`` seconds (if still running),
        sampling the live tasks meanwhile: never two copies of one slot of one attempt."""
        process = self.start(args)
        deadline = time.monotonic() + delay
        try:
            while time.monotonic() < deadline and process.poll() is None:
                if during is not None:
                    during()
                self.count_duplicates(tally, per_attempt=True)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.05)  # the next sample, or the command's end
        finally:
            tally.interrupted += process.poll() is None
            process.kill()
            process.wait()
        self.check_status_files(tally)

    def live(self) -> list[tuple[str, str, int, int]]:
        """(job, role, index, attempt) of every task really running now (ground truth)."""
        if self.emulator is not None:
            from tests.mesos_fixtures import running_on_agents

            out = []
            for task_id in running_on_agents(self.emulator):
                parts = task_id.split(".")
                role, _, index = parts[2].rpartition("-")
                out.append((parts[0], role, int(index), int(parts[3])))
            return out
        return local_tasks(self.root)

    def count_duplicates(self, tally: Tally, per_attempt: bool) -> None:
        live = self.live()
        keys = [t if per_attempt else t[:3] for t in live]
        twice = {k for k in keys if keys.count(k) > 1}
        if twice:
            tally.problems["duplicates"] += 1
            self.log(f"    duplicate live tasks: {sorted(twice)}")

    # ---- checks ------------------------------------------------------------------------------

    def check_status_files(self, tally: Tally) -> dict[str, dict[str, Any]]:
        documents = {}
        for path in sorted((self.root / "status").glob("*.yaml")):
            try:
                document = yaml.safe_load(path.read_text())
                jsonschema.validate(document, STATUS_SCHEMA)
            except FileNotFoundError:
                # deleted since it was listed (an unlink is whole): a background controller,
                # started by a command as it let go, finished a deletion meanwhile
                continue
            except (OSError, yaml.YAMLError, jsonschema.ValidationError) as error:
                tally.problems["corrupt_status"] += 1
                self.log(f"    corrupt status file {path.name}: {str(error)[:200]}")
                continue
            documents[path.stem] = document
        return documents

    def task_files(self) -> set[Path]:
        if self.backend == "local":
            return set((self.root / ".tfdeclare" / "local" / "work").glob("*/*/*.json"))
        return set((self.root / "taskfiles").glob("*/*.json"))

    def converged(self, documents: dict[str, dict[str, Any]]) -> str | None:
        """What still differs from the files (None: nothing)."""
        for name, job in self.jobs.items():
            document = documents.get(name)
            if document is None:
                return f"{name}: no status file"
            if job.finite:
                if document["phase"] != "Succeeded":
                    return f"{name}: {document['phase']}"
            elif document["phase"] != "Running" or any(
                r["running"] != r["desired"] for r in document["replicas"].values()
            ):
                return f"{name}: {document['phase']} {document['replicas']}"
        live = sorted(self.live())
        want = sorted((n, role, i) for n, job in self.jobs.items() for role, i in job.slots())
        if [t[:3] for t in live] != want:
            return f"live tasks {live}, want {want}"
        gone = [n for n in self.removed if n in documents]
        if gone:
            return f"deleted jobs still have status files: {gone}"
        return None

    def recover(self, tally: Tally) -> None:
        """What a user does after a crash: apply with --prune, delete the jobs whose files are
        gone, run the daemon until the jobs match the files (it reconciles as long as needed),
        stop it, and expect a plan with no changes."""
        self.cli(*APPLY, "--timeout", "30")
        for name in sorted(self.removed):
            self.cli("delete", name, "--timeout", "30")
        daemon = self.start(DAEMON)
        differs: object = None

        def converged() -> bool:
            nonlocal differs
            differs = self.converged(self.check_status_files(Tally()))
            return differs is None

        try:
            try:
                wait_until(converged, CONVERGE_S, interval=0.2)
            except AssertionError:
                tally.problems["stuck"] += 1
                self.log(f"    stuck: {differs}")
        finally:
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
                self.log("    the daemon did not stop on SIGTERM within 30 s")
        plan = self.cli("plan", "specs", "--prune", "--detailed-exitcode")
        if differs is None and plan.returncode != 0:
            tally.problems["stuck"] += 1
            self.log(f"    stuck: plan exits {plan.returncode}: {plan.stdout[-300:]} {plan.stderr[-300:]}")
        self.removed = {n for n in self.removed if (self.root / "status" / f"{n}.yaml").exists()}
        documents = self.check_status_files(tally)
        lost = [n for n in self.jobs if n not in documents]
        if lost:
            tally.problems["lost_jobs"] += len(lost)
            self.log(f"    lost jobs: {lost}")
        self.count_duplicates(tally, per_attempt=False)
        files = self.task_files()
        missing = self.seen_files - files
        if missing:
            tally.problems["lost_task_files"] += len(missing)
            self.log(f"    lost task files: {sorted(str(p.relative_to(self.root)) for p in missing)[:5]}")
        self.seen_files |= files
        for name, job in self.jobs.items():
            if not job.finite or documents.get(name, {}).get("phase") != "Succeeded":
                continue
            text = self.text(job)
            mine = frozenset(p for p in files if self.owner(p) == name)
            before = self.finished.get(name)
            if before is not None and before[0] == text and before[1] != mine:
                tally.problems["duplicates"] += 1
                self.log(f"    {name} ran again without a change: {sorted(mine - before[1])}")
            self.finished[name] = (text, mine)

    def owner(self, path: Path) -> str:
        return path.parent.parent.name if self.backend == "local" else path.parent.name

    # ---- faults ------------------------------------------------------------------------------

    def iterate(self, number: int, kind: str) -> None:
        rng = random.Random(f"{self.seed}/{number}")
        tally = self.tallies.setdefault(kind, Tally())
        tally.iterations += 1
        before = sum(tally.problems.values())
        change = self.change(rng)
        delay = rng.uniform(0.0, 2.5)
        started = time.monotonic()
        if kind == "kill-apply":
            self.killed(APPLY, delay, tally)
        elif kind == "kill-daemon":
            self.killed(
                DAEMON,
                delay + 1.0,
                tally,
            )
        elif kind == "kill-delete":
            if len(self.jobs) > 1:
                self.remove(rng.choice(sorted(self.jobs)))
            if not self.removed:  # one job left: --all, and the files bring it back (a new run)
                self.finished.clear()
            self.killed(["delete", *(sorted(self.removed) or ["--all"])], delay, tally)
        elif kind == "truncate-prune":
            self.truncate_under_prune(rng, delay, tally)
        elif kind in ("status-full", "status-readonly"):
            with self.status_full() if kind == "status-full" else self.status_readonly():
                self.killed(APPLY, delay, tally)
                job = self.jobs[rng.choice(sorted(self.jobs))]  # a restart: a status write is due
                job.generation += 1
                self.write(job)
                if kind == "status-full":
                    self.fill()  # again: a status file removed by a prune frees room
                self.felt(self.cli(*APPLY, "--timeout", "20"))
        else:
            self.mesos_fault(kind, rng, delay, tally)
        self.recover(tally)
        survived = sum(tally.problems.values()) == before
        tally.survived += survived
        self.log(
            f"  #{number:3d} {kind:15s} change={change:7s} kill after {delay:4.2f}s "
            f"{'ok' if survived else 'BROKEN'} ({time.monotonic() - started:4.1f} s)"
        )

    def truncate_under_prune(self, rng: random.Random, delay: float, tally: Tally) -> None:
        """A job's file cut short (invalid): --prune keeps the job and its tasks; then rewritten."""
        candidates = [n for n in sorted(self.jobs) if n not in self.removed]
        self.recover(tally)  # the job runs before its file is cut
        name = rng.choice(candidates)
        path = self.root / "specs" / f"{name}.yaml"
        data = path.read_bytes()
        cut = b""
        for _ in range(20):
            attempt = data[: rng.randrange(1, len(data))]
            if load_file(str(path), attempt).has_errors:
                cut = attempt
                break
        path.write_bytes(cut)
        slots_before = sorted(t[:3] for t in self.live() if t[0] == name)
        self.killed(APPLY, delay, tally)
        self.cli(*APPLY, "--timeout", "20")
        documents = self.check_status_files(tally)
        slots_after = sorted(t[:3] for t in self.live() if t[0] == name)
        if name not in documents or slots_after != slots_before:
            tally.problems["lost_jobs"] += 1
            self.log(
                f"    {name} with a truncated file: status {name in documents}, tasks {slots_before} -> {slots_after}"
            )
        path.write_text(self.text(self.jobs[name]))

    def felt(self, applied: subprocess.CompletedProcess[str]) -> None:
        """The status folder's fault really stopped a write (else the iteration proves little)."""
        if applied.returncode != 1 or "cannot write" not in applied.stderr:
            self.unfelt += 1
            self.log(
                f"    the fault was not felt: apply exited {applied.returncode}: {applied.stderr[-300:]}"
            )

    def fill(self) -> None:
        try:
            with open(self.root / "status" / "filler", "ab") as handle:
                while True:
                    handle.write(b"\0" * 4096)
                    handle.flush()
        except OSError:
            pass  # full

    @contextmanager
    def status_full(self) -> Iterator[None]:
        self.fill()
        try:
            yield
        finally:
            (self.root / "status" / "filler").unlink()

    @contextmanager
    def status_readonly(self) -> Iterator[None]:
        subprocess.run(["mount", "-o", "remount,ro", str(self.root / "status")], check=True)
        try:
            yield
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(self.root / "status")], check=True)

    def mesos_fault(self, kind: str, rng: random.Random, delay: float, tally: Tally) -> None:
        emulator = self.emulator
        agent = rng.choice(sorted(emulator.agent_ids()))
        if kind == "master-restart":
            fired: list[bool] = []
            at = time.monotonic() + rng.uniform(0, delay)

            def restart() -> None:
                if not fired and time.monotonic() >= at:
                    fired.append(True)
                    emulator.restart_master(reregister_delay=rng.uniform(0, 1))

            self.killed(APPLY, delay + 0.5, tally, during=restart)
            if not fired:
                emulator.restart_master(reregister_delay=rng.uniform(0, 1))
        elif kind == "agent-restart":
            emulator.restart_agent(agent)
            self.killed(APPLY, delay, tally)
        elif kind == "partition-heal":
            emulator.partition_agent(agent)
            try:
                self.killed(APPLY, delay + 1.0, tally)
                self.cli(*APPLY, "--timeout", "10")
            finally:
                emulator.heal_agent(agent)
        elif kind == "drop-updates":
            emulator.drop_updates(rng.randint(1, 4))
            self.killed(APPLY, delay, tally)
        elif kind == "delay-updates":
            emulator.delay_updates(rng.uniform(0.2, 1.5))
            try:
                self.killed(APPLY, delay, tally)
            finally:
                emulator.delay_updates(0)
        else:
            raise ValueError(kind)

    # ---- the run -----------------------------------------------------------------------------

    def run(self, iterations: int) -> dict[str, Tally]:
        self.write(Job("alpha", finite=False, workers=1, ps=1))
        self.write(Job("delta", finite=True))
        self.recover(self.tallies.setdefault("start", Tally()))  # listed only when it broke something
        kinds = self.faults()
        order = random.Random(self.seed).sample(kinds, len(kinds))
        for number in range(iterations):
            self.iterate(number, order[number % len(order)])
        if not self.tallies["start"].problems:
            del self.tallies["start"]
        return self.tallies

    def close(self) -> None:
        self.cli("delete", "--all", "--timeout", "30")
        if self.emulator is not None:
            self.emulator.stop()
        kill_leftovers(self.root)
        if self.tmpfs:
            subprocess.run(["umount", "-l", str(self.root / "status")], check=False)


def local_tasks(root: Path) -> list[tuple[str, str, int, int]]:
    """(job, role, index, attempt) of every live ``e2e_task.py`` process of the project."""
    return [
        (
            env["TFDECLARE_JOB"],
            env["TFDECLARE_ROLE"],
            int(env["TFDECLARE_INDEX"]),
            int(env["TFDECLARE_ATTEMPT"]),
        )
        for env in processes_of(root, TASK).values()
    ]


def report(backend: str, tallies: dict[str, Tally], seconds: float, notes: list[str]) -> str:
    header = f"{'fault':16s} {'iterations':>10s} {'killed mid-run':>14s} {'survived':>8s} " + " ".join(
        f"{p:>15s}" for p in PROBLEMS
    )
    lines = [
        f"chaos, {backend} backend: {sum(t.iterations for t in tallies.values())} iterations in {seconds:.0f} s",
        header,
    ]
    total = Tally()
    for kind, tally in sorted(tallies.items()):
        total.iterations += tally.iterations
        total.survived += tally.survived
        total.interrupted += tally.interrupted
        total.problems.update(tally.problems)
        lines.append(
            f"{kind:16s} {tally.iterations:10d} {tally.interrupted:14d} {tally.survived:8d} "
            + " ".join(f"{tally.problems[p]:15d}" for p in PROBLEMS)
        )
    lines.append(
        f"{'all':16s} {total.iterations:10d} {total.interrupted:14d} {total.survived:8d} "
        + " ".join(f"{total.problems[p]:15d}" for p in PROBLEMS)
    )
    return "\n".join(lines + notes)


def main(argv: list[str] | None = None) -> int:
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("local", "mesos"), default="local")
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tfdeclare-chaos-") as folder:
        # its own registry of state folders (tfdeclare.shell.statedirs), not the real home's
        os.environ.setdefault("TFDECLARE_REGISTRY_DIR", str(Path(folder) / "registry"))
        chaos = Chaos(Path(folder), args.backend, args.seed, log=lambda line: print(line, flush=True))
        try:
            tallies = chaos.run(args.iterations)
        finally:
            chaos.close()
    notes = [*chaos.notes, *([f"faults not felt: {chaos.unfelt}"] if chaos.unfelt else [])]
    print(report(args.backend, tallies, time.monotonic() - started, notes))
    broken = sum(sum(t.problems.values()) for t in tallies.values()) + chaos.unfelt
    return 1 if broken else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
