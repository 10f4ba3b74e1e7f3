"""Preemption on the Mesos backend, as a user runs it: the daemon watching a folder, against
the master emulator (one agent, 4 cpus). A high-priority job that no held offer fits preempts
our low-priority job (its task is KILLed with its grace period, phase Suspended, reason
Preempted), runs once the offers come back, and the low job is launched again when it has
finished; resources another framework holds are never a reason to preempt anything (the
shortfall is not ours to free)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import job_yaml
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import emulated_project, eventually, running_on_agents, start_emulator
from tests.mesos_other_framework import OtherFramework
from tests.test_daemon import Daemon

pytestmark = pytest.mark.slow  # real task processes behind the emulator, offer timers


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path)  # one agent: cpus 4, mem 4096
    with emulated_project(tmp_path, emulator, reviveIntervalSeconds=1) as project:
        yield project


def job(name: str, cpus: float, command: str, priority: int) -> str:
    roles = f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 256}}}}"
    extra = f"  priority: {priority}\n  terminationGracePeriodSeconds: 2\n"
    return job_yaml(name, command=command, roles=roles, extra=extra)


def status(root: Path, name: str) -> dict[str, Any]:
    path = root / "status" / f"{name}.yaml"
    document: dict[str, Any] = yaml.safe_load(path.read_text()) if path.exists() else {}
    return document or {"phase": None}


def test_a_high_priority_job_preempts_our_low_one_and_it_runs_again_after(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        (root / "specs" / "low.yaml").write_text(job("low", 3, "[sleep, '600']", 0))
        eventually(lambda: status(root, "low")["phase"] == "Running", timeout=30)
        go = root / "go"  # high ends when the test says so: after it has seen low suspended
        (root / "specs" / "high.yaml").write_text(
            job("high", 3, f"[sh, -c, 'while [ ! -e {go} ]; do sleep 0.1; done']", 10)
        )

        def preempted() -> dict[str, Any] | None:
            low = status(root, "low")
            return low if low["phase"] == "Suspended" else None

        low = eventually(preempted, timeout=30)
        assert low["suspension"]["reason"] == "Preempted" and low["suspension"]["preemptedBy"] == "high"
        eventually(lambda: emulator.calls("KILL"), timeout=10)  # the victim's task, through the master
        go.touch()
        eventually(lambda: status(root, "high")["phase"] == "Succeeded", timeout=60)

        def resumed() -> dict[str, Any] | None:
            low = status(root, "low")
            return low if low["phase"] == "Running" else None

        low = eventually(resumed, timeout=60)
        assert low["restarts"] == 0 and low["preemptions"] == 1 and low["suspension"] is None
        assert [t["attempt"] for t in low["tasks"]] == [1], "a fresh attempt"
        assert low["suspensionHistory"][0]["preemptedBy"] == "high"
        assert any(t.startswith("low.") for t in running_on_agents(emulator))
    finally:
        daemon.stop()


def test_what_another_framework_holds_is_never_a_reason_to_preempt(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    other = OtherFramework(emulator.url)
    daemon = None
    try:
        other.hold(cpus=2.0)
        daemon = Daemon(root, "--specs", "specs", "--interval", "1")
        (root / "specs" / "low.yaml").write_text(job("low", 1, "[sleep, '600']", 0))
        eventually(lambda: status(root, "low")["phase"] == "Running", timeout=30)
        (root / "specs" / "high.yaml").write_text(job("high", 3, "[sleep, '4']", 10))
        eventually(lambda: status(root, "high")["phase"] == "Pending", timeout=30)
        revives = len(emulator.calls("REVIVE"))
        eventually(lambda: len(emulator.calls("REVIVE")) >= revives + 2, timeout=30)  # passes went by
        assert status(root, "low")["phase"] == "Running", "its 1 cpu would not make room for 3"
        high = status(root, "high")
        assert high["phase"] == "Pending" and "preempting" not in high["message"], high
    finally:
        if daemon is not None:
            daemon.stop()
        other.close()


def on_rack(name: str, cpus: float, rack: str) -> str:
    placement = f"  placement: {{constraints: [{{attribute: rack, operator: In, values: [{rack}]}}]}}\n"
    roles = f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 256}}}}"
    extra = f"  priority: 0\n  terminationGracePeriodSeconds: 2\n{placement}"
    return job_yaml(name, command="[sleep, '600']", roles=roles, extra=extra)


def preemptions(root: Path, jobs: tuple[tuple[str, float, str], ...]) -> dict[str, int]:
    """How many times each of these jobs (name first) was preempted, from its status."""
    return {name: status(root, name)["preemptions"] for name, *_ in jobs}


@contextmanager
def high_over_two_racks(
    tmp_path: Path, low: tuple[tuple[str, float, str], ...], high_cpus: float
) -> Iterator[tuple[Path, Emulator]]:
    """Two agents of 4 cpus (rack a, rack b) under the daemon: the ``low`` jobs (name, cpus,
    rack) at priority 0, each started once the one before runs, then ``high``, one task of
    ``high_cpus`` at priority 10, awaited Running. Yields the project and the emulator."""
    emulator = start_emulator(
        tmp_path, agent_resources="cpus:4;mem:4096;ports:[31000-31999]", agent_attributes="rack:a"
    )
    emulator.add_agent(attributes="rack:b")
    with emulated_project(tmp_path, emulator, reviveIntervalSeconds=1) as (root, _):
        daemon = Daemon(root, "--specs", "specs", "--interval", "1")
        try:
            for name, cpus, rack in low:
                (root / "specs" / f"{name}.yaml").write_text(on_rack(name, cpus, rack))
                eventually(lambda n=name: status(root, n)["phase"] == "Running", timeout=30)
            (root / "specs" / "high.yaml").write_text(job("high", high_cpus, "[sleep, '600']", 10))
            eventually(lambda: status(root, "high")["phase"] == "Running", timeout=60)
            yield root, emulator
        finally:
            daemon.stop()


def test_the_victims_free_a_whole_agent_where_the_gang_fits(tmp_path: Path) -> None:
    """Two agents of 4 cpus: rack a runs a 1-cpu job, then rack b a 3-cpu one, then rack a a
    2-cpu one; each agent has 1 cpu free. A job of one 4-cpu task lacks 2 cpus in all: by totals
    the 2-cpu job (started last: the least work) frees enough, but leaves rack a's agent at 3
    cpus, where the task does not fit. Chosen by agent: the 3-cpu job on rack b (less work than
    both jobs of rack a together: the 1-cpu one is older than it), and the task runs there; rack
    a's jobs are never stopped."""
    low = (("a-one", 1, "a"), ("b-three", 3, "b"), ("a-two", 2, "a"))
    with high_over_two_racks(tmp_path, low, high_cpus=4) as (root, emulator):
        assert preemptions(root, low) == {"a-one": 0, "b-three": 1, "a-two": 0}
        assert status(root, "a-two")["phase"] == "Running" and status(root, "a-one")["phase"] == "Running"
        agents = running_on_agents(emulator)
        (high,) = [agent for task, agent in agents.items() if task.startswith("high.")]
        assert [t for t, agent in agents.items() if agent == high and not t.startswith("high.")] == []


def test_room_enough_in_all_but_spread_over_agents_is_made_on_one(tmp_path: Path) -> None:
    """Two agents of 4 cpus: rack a runs a 2-cpu job, rack b a 1-cpu job and, started last (the
    least work), another 1-cpu one. A job of one 3-cpu task has 4 cpus free in all but no agent
    with 3: by totals nothing is short and no one would be preempted (it would wait for jobs
    that never end); placed by agent, the newest job on rack b is preempted and the task runs
    there, the others untouched."""
    low = (("a-two", 2, "a"), ("b-old", 1, "b"), ("b-new", 1, "b"))
    with high_over_two_racks(tmp_path, low, high_cpus=3) as (root, emulator):
        assert preemptions(root, low) == {"a-two": 0, "b-old": 0, "b-new": 1}
        assert status(root, "b-new")["suspension"]["preemptedBy"] == "high"
        assert status(root, "a-two")["phase"] == "Running" and status(root, "b-old")["phase"] == "Running"
        agents = running_on_agents(emulator)
        (high,) = [agent for task, agent in agents.items() if task.startswith("high.")]
        assert sorted(t.split(".")[0] for t, agent in agents.items() if agent == high) == [
            "b-old",
            "high",
        ]


def test_a_preempted_pss_job_stops_its_chief_first_through_the_master(
    project: tuple[Path, Emulator],
) -> None:
    """The same as tests/test_suspend_local.py's PSS case through the master emulator (real
    task processes, tests/pss_stand_in.py): the chief is KILLed first, its ps only once it has
    exited, so its save still finds the ps serving."""
    root, _ = project
    out = root / "out"
    out.mkdir()
    command = f"[{sys.executable}, {Path(__file__).parent / 'pss_stand_in.py'}, {out}]"
    roles = "".join(
        f"{role}: {{count: 1, resources: {{cpus: 1, mem: 256}}}}, " for role in ("chief", "ps", "worker")
    )
    daemon = Daemon(root, "--specs", "specs", "--interval", "1")
    try:
        (root / "specs" / "pss.yaml").write_text(
            job_yaml(
                "pss",
                command=command,
                roles="{" + roles.rstrip(", ") + "}",
                extra="  terminationGracePeriodSeconds: 10\n",
            )
        )
        eventually(lambda: len(list(out.glob("*.up"))) == 3, timeout=30)
        (root / "specs" / "high.yaml").write_text(job("high", 3, "[sleep, '600']", 10))
        eventually(lambda: status(root, "high")["phase"] == "Running", timeout=60)
        eventually(lambda: (out / "chief-0.0.saved").exists(), timeout=15, what="the chief's save")
        said, saved_at = (out / "chief-0.0.saved").read_text().split("\n")
        assert said == "ok", said
        assert float((out / "ps-0.0.term").read_text()) >= float(saved_at)
        low = status(root, "pss")
        assert low["phase"] == "Suspended" and low["restarts"] == 0 and low["preemptions"] == 1
    finally:
        daemon.stop()
