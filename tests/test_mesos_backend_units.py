"""Unit tables for the Mesos backend's pure parts: status mapping, the journal, TaskInfo, offers."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tfdeclare.backends.mesos.amounts import agent_capacity, merge_ranges
from tfdeclare.backends.mesos.events import Offer
from tfdeclare.backends.mesos.journal import FrameworkStore, TaskEntry, TaskJournal
from tfdeclare.backends.mesos.offers import HeldOffer, OfferPool
from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_values import GangFit, PlacementOptions, SlotAssignment
from tfdeclare.backends.mesos.taskinfo import (
    MKDIR_CD_SCRIPT,
    take_resources,
    task_info,
    task_labels,
)
from tfdeclare.backends.mesos.taskstate import apply_status, exit_code_from, observed_state
from tfdeclare.core.enums import Role, TaskState, VolumeMode
from tfdeclare.core.run.tasks import GangRequest, Slot, SlotRequest, TaskKey, TaskLaunch
from tfdeclare.core.spec.keys import Volume
from tfdeclare.core.spec.resources import Resources


def entry(**changes: object) -> TaskEntry:
    base = TaskEntry(
        task_id="job.ab12.worker-0.1",
        job="job",
        role="worker",
        index=0,
        attempt=0,
        config_hash="c" * 16,
        spec_hash="s" * 64,
        cpus=1.0,
        mem_mib=512,
        gpus=0,
        agent_id="A-S0",
        host="node1",
        port=31000,
        agent_url="http://10.0.0.1:5051/slave(1)",
        created_at=100.0,
    )
    for key, value in changes.items():
        setattr(base, key, value)
    return base


# ---- exit codes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("Command exited with status 3", 3),
        ("Command exited with status 0", 0),
        ("Command terminated with signal Terminated", 143),
        ("Command terminated with signal Killed", 137),
        ("Command terminated with signal SIGKILL", 137),
        ("Command terminated with signal KILL", 137),
        ("Container exited with status 42", 42),
        ("Command terminated with signal 11", 139),
        ("Failed to launch container: image pull failed", None),
        ("", None),
        (None, None),
    ],
)
def test_exit_code_from_executor_messages(message: str | None, code: int | None) -> None:
    assert exit_code_from(message) == code


# ---- transitions ------------------------------------------------------------------------------


def fold(task: TaskEntry, *states: str, now: float = 200.0) -> list[bool]:
    return [
        apply_status(task, s, reason=None, source=None, message=None, timestamp=None, now=now) for s in states
    ]


def test_an_exit_code_reaches_a_task_the_reconciliation_said_ended() -> None:
    """The master answers a reconciliation with the task's state alone ("Reconciliation: Latest
    task state", no exit code); the agent's own terminal update, re-sent until acknowledged,
    comes after and says how it ended: folded in. Anything else after a terminal is not."""
    task = entry()
    assert apply_status(task, "TASK_RUNNING", reason=None, source=None, message=None, timestamp=None, now=1.0)
    reconciled = apply_status(
        task, "TASK_FAILED", reason="REASON_RECONCILIATION", source="SOURCE_MASTER",
        message="Reconciliation: Latest task state", timestamp=None, now=2.0,
    )  # fmt: skip
    assert reconciled and observed_state(task, 2.0, 60.0)[1] is None
    assert apply_status(
        task, "TASK_FAILED", reason="REASON_COMMAND_EXECUTOR_FAILED", source="SOURCE_EXECUTOR",
        message="Command exited with status 4", timestamp=1.5, now=12.0,
    )  # fmt: skip
    assert observed_state(task, 12.0, 60.0)[1] == 4 and task.finished_at == 1.5
    assert not apply_status(
        task, "TASK_FAILED", reason="REASON_COMMAND_EXECUTOR_FAILED", source="SOURCE_EXECUTOR",
        message="Command exited with status 9", timestamp=13.0, now=13.0,
    ), "once told, a terminal is final"  # fmt: skip
    assert observed_state(task, 13.0, 60.0)[1] == 4


@pytest.mark.parametrize(
    ("states", "final", "changes"),
    [
        (["TASK_STARTING", "TASK_RUNNING"], "TASK_RUNNING", [True, True]),
        (["TASK_RUNNING", "TASK_RUNNING"], "TASK_RUNNING", [True, False]),  # duplicate
        (["TASK_RUNNING", "TASK_STARTING"], "TASK_RUNNING", [True, False]),  # never backwards
        (["TASK_RUNNING", "TASK_STAGING"], "TASK_RUNNING", [True, False]),  # stale reconciliation answer
        (["TASK_FINISHED", "TASK_RUNNING"], "TASK_FINISHED", [True, False]),  # terminal is final
        (["TASK_FAILED", "TASK_GONE"], "TASK_FAILED", [True, False]),
        (["TASK_RUNNING", "TASK_UNREACHABLE", "TASK_RUNNING"], "TASK_RUNNING", [True, True, True]),
        (["TASK_RUNNING", "TASK_LOST", "TASK_RUNNING"], "TASK_RUNNING", [True, True, True]),
        (["TASK_UNREACHABLE", "TASK_UNREACHABLE"], "TASK_UNREACHABLE", [True, False]),
        (["TASK_UNREACHABLE", "TASK_GONE"], "TASK_GONE", [True, True]),
        (["TASK_KILLING", "TASK_RUNNING"], "TASK_KILLING", [True, False]),
    ],
)
def test_transitions(states: list[str], final: str, changes: list[bool]) -> None:
    task = entry()
    assert fold(task, *states) == changes
    assert task.state == final


def test_lost_since_is_kept_while_lost_and_cleared_on_return() -> None:
    task = entry()
    fold(task, "TASK_RUNNING", "TASK_UNREACHABLE", now=10.0)
    fold(task, "TASK_LOST", now=20.0)
    assert task.lost_since == 10.0
    fold(task, "TASK_RUNNING", now=30.0)
    assert task.lost_since is None


def test_a_forgotten_task_that_comes_back_is_shown_again() -> None:
    task = entry(state="TASK_UNREACHABLE", lost_since=1.0, forgotten=True)
    fold(task, "TASK_RUNNING")
    assert task.forgotten is False


# ---- what the controller sees -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "message", "kill", "expected"),
    [
        (None, "", False, (TaskState.STARTING, None)),
        ("TASK_STAGING", "", False, (TaskState.STARTING, None)),
        ("TASK_STARTING", "", False, (TaskState.STARTING, None)),
        ("TASK_RUNNING", "", False, (TaskState.RUNNING, None)),
        ("TASK_RUNNING", "", True, (TaskState.STOPPING, None)),
        ("TASK_KILLING", "", True, (TaskState.STOPPING, None)),
        ("TASK_FINISHED", "Command exited with status 0", False, (TaskState.SUCCEEDED, 0)),
        ("TASK_FAILED", "Command exited with status 3", False, (TaskState.FAILED, 3)),
        ("TASK_FAILED", "Command terminated with signal Killed", False, (TaskState.FAILED, 137)),
        ("TASK_KILLED", "Command terminated with signal Terminated", True, (TaskState.STOPPED, 143)),
        ("TASK_KILLED", "Command terminated with signal Terminated", False, (TaskState.FAILED, 143)),
        ("TASK_ERROR", "Task uses no resources", False, (TaskState.FAILED, None)),
        ("TASK_DROPPED", "", False, (TaskState.GONE, None)),
        ("TASK_GONE", "", False, (TaskState.GONE, None)),
        ("TASK_GONE_BY_OPERATOR", "", False, (TaskState.GONE, None)),
        ("TASK_LOST", "", False, (TaskState.LOST, None)),
        ("TASK_UNREACHABLE", "", False, (TaskState.LOST, None)),
        ("TASK_UNKNOWN", "", False, (TaskState.LOST, None)),
        ("TASK_UNREACHABLE", "", True, (TaskState.STOPPING, None)),  # asked to stop, cut off
    ],
)
def test_observed_state(
    state: str | None, message: str, kill: bool, expected: tuple[TaskState, int | None]
) -> None:
    task = entry(state=state, message=message, kill_requested=kill, lost_since=99.0)
    observed, code, _ = observed_state(task, now=100.0, fencing_s=300)
    assert (observed, code) == expected


def test_fencing_turns_lost_into_presumed_gone() -> None:
    task = entry(state="TASK_UNREACHABLE", lost_since=100.0)
    assert observed_state(task, 399.0, 300)[0] is TaskState.LOST
    state, _, message = observed_state(task, 400.0, 300)
    assert state is TaskState.GONE and "presumed gone" in message


# ---- the journal --------------------------------------------------------------------------------


def test_journal_replays_the_log_over_the_snapshot(tmp_path: Path) -> None:
    journal = TaskJournal(tmp_path)
    a, b = entry(task_id="a"), entry(task_id="b")
    journal.put([a, b], sync=True)
    a.state = "TASK_RUNNING"
    journal.put([a], sync=False)
    journal.delete(["b"], sync=False)
    journal.close()
    loaded = TaskJournal(tmp_path).load()
    assert set(loaded) == {"a"} and loaded["a"].state == "TASK_RUNNING"


def test_journal_ignores_a_torn_last_line(tmp_path: Path) -> None:
    journal = TaskJournal(tmp_path)
    journal.put([entry(task_id="a")], sync=True)
    journal.close()
    with open(tmp_path / "tasks.log", "ab") as handle:
        handle.write(b'{"put": {"task_id": "b", "jo')  # a crash mid-write
    assert set(TaskJournal(tmp_path).load()) == {"a"}


def test_compaction_then_a_stale_log_replays_to_the_same_state(tmp_path: Path) -> None:
    journal = TaskJournal(tmp_path)
    a = entry(task_id="a")
    journal.put([a], sync=True)
    a.state = "TASK_FINISHED"
    journal.put([a], sync=True)
    stale_log = (tmp_path / "tasks.log").read_bytes()
    journal.compact([a])
    assert not (tmp_path / "tasks.log").exists() and not (tmp_path / "tasks.log.old").exists()
    # A crash between the snapshot and emptying the log: the old log is replayed again.
    (tmp_path / "tasks.log").write_bytes(stale_log)
    loaded = TaskJournal(tmp_path).load()
    assert loaded["a"].state == "TASK_FINISHED"
    snapshot = json.loads((tmp_path / "tasks.json").read_text())
    assert snapshot["version"] == 1 and snapshot["tasks"][0]["task_id"] == "a"


def test_journal_needs_compaction_after_many_lines(tmp_path: Path) -> None:
    journal = TaskJournal(tmp_path, compact_after=10)
    for i in range(11):
        journal.put([entry(task_id=f"t{i}")], sync=False)
    assert journal.needs_compaction(live=2)
    assert not journal.needs_compaction(live=3), "the log is short for a journal of 3 records"
    journal.compact([])
    assert not journal.needs_compaction(live=0)


def test_a_crash_during_compaction_loses_nothing(tmp_path: Path) -> None:
    journal = TaskJournal(tmp_path)
    a, b = entry(task_id="a"), entry(task_id="b")
    journal.put([a, b], sync=True)
    snapshot = journal.begin_compaction([a, b])  # the log is rotated to tasks.log.old
    a.state = "TASK_RUNNING"
    journal.put([a], sync=True)  # a change after the rotation goes to a fresh log
    journal.close()
    # the process dies before finish_compaction: old snapshot (none) + old log + new log
    loaded = TaskJournal(tmp_path).load()
    assert set(loaded) == {"a", "b"} and loaded["a"].state == "TASK_RUNNING"
    assert snapshot  # never written: the first process died
    # the next process compacts what it loaded: the unfinished rotation's lines are kept
    again = TaskJournal(tmp_path)
    state = again.load()
    pending = again.begin_compaction(state.values())
    assert TaskJournal(tmp_path).load()["a"].state == "TASK_RUNNING"
    again.finish_compaction(pending)
    assert not (tmp_path / "tasks.log.old").exists()
    assert TaskJournal(tmp_path).load()["a"].state == "TASK_RUNNING"


def test_durable_handle_stays_on_the_file_the_writes_went_to(tmp_path: Path) -> None:
    """The acknowledging thread fsyncs a duplicate descriptor: it names the log the updates
    were written to, even once compaction has rotated that log away; nothing new to sync,
    no handle."""
    journal = TaskJournal(tmp_path)
    assert journal.durable_handle() is None
    journal.put([entry(task_id="a")], sync=False)
    written_to = os.stat(tmp_path / "tasks.log").st_ino
    handle = journal.durable_handle()
    assert handle is not None
    assert journal.durable_handle() is None, "handed over: the holder makes it durable"
    journal.begin_compaction([entry(task_id="a")])  # rotated: tasks.log -> tasks.log.old
    journal.put([entry(task_id="b")], sync=False)
    try:
        assert os.fstat(handle).st_ino == written_to != os.stat(tmp_path / "tasks.log").st_ino
        os.fsync(handle)
    finally:
        os.close(handle)
    second = journal.durable_handle()  # the write after the rotation: the new log
    assert second is not None
    try:
        assert os.fstat(second).st_ino == os.stat(tmp_path / "tasks.log").st_ino
    finally:
        os.close(second)
    journal.close()


def test_framework_store(tmp_path: Path) -> None:
    store = FrameworkStore(tmp_path)
    fresh = store.load()
    assert fresh.framework_id is None and fresh.instance_id
    store.save(fresh.__class__("fw-0001", fresh.instance_id, True))
    again = store.load()
    assert (again.framework_id, again.instance_id, again.gpu_resources) == (
        "fw-0001",
        fresh.instance_id,
        True,
    )
    moved = store.archive("removed-1")
    assert moved.exists() and store.load().framework_id is None


# ---- TaskInfo ---------------------------------------------------------------------------------


ANY_ENV = {"variables": [{"name": "TF_CONFIG", "value": "{}"}, {"name": "X", "value": "a b"}]}


def launch(**changes: object) -> TaskLaunch:
    values: dict[str, object] = {
        "task_id": "job.ab12.worker-1.3",
        "job": "job",
        "key": TaskKey(Role.WORKER, 1),
        "attempt": 2,
        "spec_hash": "s" * 64,
        "config_hash": "c" * 16,
        "argv": ("python", "train.py", "--lr", "0.1"),
        "env": (("TF_CONFIG", "{}"), ("X", "a b")),
        "resources": Resources(2, 4096, 1),
        "slot": Slot(TaskKey(Role.WORKER, 1), "node1", 31005, "A-S0"),
        "grace_period_s": 7.5,
        **changes,
    }
    return TaskLaunch(**values)  # type: ignore[arg-type]


def test_task_info_shape() -> None:
    info = task_info(launch(), "A-S0", {"tfdeclare.job": "job"})
    assert info["name"] == "/job:worker/task:1"
    assert info["task_id"] == {"value": "job.ab12.worker-1.3"}
    assert info["agent_id"] == {"value": "A-S0"}
    assert info["command"] == {
        "shell": False,
        "value": "python",
        "arguments": ["python", "train.py", "--lr", "0.1"],
        "environment": {"variables": [{"name": "TF_CONFIG", "value": "{}"}, {"name": "X", "value": "a b"}]},
    }
    by_name = {r["name"]: r for r in info["resources"]}
    assert by_name["cpus"]["scalar"] == {"value": 2.0}
    assert by_name["mem"]["scalar"] == {"value": 4096.0}
    assert by_name["gpus"]["scalar"] == {"value": 1.0}
    assert by_name["ports"]["ranges"] == {"range": [{"begin": 31005, "end": 31005}]}
    assert not any("allocation_info" in r for r in info["resources"])  # the master adds the offers' role
    assert info["kill_policy"] == {"grace_period": {"nanoseconds": 7_500_000_000}}
    assert "container" not in info


def test_no_gpus_resource_without_gpus() -> None:
    info = task_info(launch(resources=Resources(1, 512, 0)), "A", {})
    assert [r["name"] for r in info["resources"]] == ["cpus", "mem", "ports"]


def test_image_volumes_and_working_dir_with_the_mesos_containerizer() -> None:
    volume = Volume("/mnt/data", "/data", VolumeMode.RO)
    info = task_info(launch(image="tf:2", volumes=(volume,), working_dir="/workspace"), "A", {})
    assert info["container"] == {
        "type": "MESOS",
        "mesos": {"image": {"type": "DOCKER", "docker": {"name": "tf:2"}}},
        "volumes": [{"container_path": "/data", "host_path": "/mnt/data", "mode": "RO"}],
    }
    command = info["command"]
    assert command["value"] == "/bin/sh"
    assert command["arguments"] == [
        "sh",
        "-c",
        MKDIR_CD_SCRIPT,
        "tfdeclare-workdir",
        "/workspace",
        "python",
        "train.py",
        "--lr",
        "0.1",
    ]


def test_docker_containerizer_uses_host_networking_and_keeps_the_entrypoint() -> None:
    info = task_info(launch(image="tf:2", working_dir="/w"), "A", {}, containerizer="docker")
    assert info["container"]["type"] == "DOCKER"
    assert info["container"]["docker"] == {
        "image": "tf:2",
        "network": "HOST",
        "parameters": [{"key": "init", "value": "true"}, {"key": "workdir", "value": "/w"}],
    }
    assert info["command"]["value"] == "python"
    assert info["command"]["arguments"] == ["train.py", "--lr", "0.1"]


def test_a_gpu_entrypoint_task_with_a_working_dir_under_the_docker_containerizer() -> None:
    """The website's GPU example on Mesos with docker (issue 22): the TaskInfo asks for the GPU,
    runs the image's entrypoint with the args in the working directory; the emulator's agent
    runs it as upstream's ``mesos-docker-executor`` does, reserving the GPU without passing a
    device to ``docker run`` (``allocateNvidiaGpus`` in src/slave/containerizer/docker.cpp)."""
    from tests.mesos_emulator.docker_run import docker_run_argv

    argv = ("python", "tf_cnn_benchmarks.py", "--num_gpus=1")
    info = task_info(
        launch(image="tf-gpu:1", working_dir="/opt/b", argv=argv, entrypoint=True),
        "A",
        {},
        containerizer="docker",
    )
    assert {r["name"]: r["scalar"] for r in info["resources"] if r["type"] == "SCALAR"}["gpus"] == {
        "value": 1.0
    }
    assert info["command"] == {"shell": False, "arguments": list(argv), "environment": ANY_ENV}
    run = docker_run_argv(["docker"], info, "mesos-c1", "/sandbox", "/mnt/mesos/sandbox")
    assert run[-4:] == ["tf-gpu:1", *argv]
    assert "--workdir=/opt/b" in run and "--init=true" in run
    assert not any(word.startswith(("--gpus", "--device", "--runtime")) for word in run)


@pytest.mark.parametrize("containerizer", ["docker", "mesos"])
def test_a_container_never_starts_in_a_host_folder(containerizer: str) -> None:
    """Neither the spec's folder nor the agent's sandbox path exists in an image's filesystem."""

    def directory(**changes: Any) -> str | None:
        info = task_info(
            launch(image="tf:2", **changes), "A", {}, containerizer=containerizer, shared_filesystem=True
        )
        if containerizer == "docker":
            found = [p["value"] for p in info["container"]["docker"]["parameters"] if p["key"] == "workdir"]
            return found[0] if found else None
        arguments = info["command"]["arguments"]
        return str(arguments[4]) if arguments[2] == MKDIR_CD_SCRIPT else None

    assert directory(source_dir="/specs") is None  # the image's own working directory
    assert directory(source_dir="/specs", working_dir="out/run") == "/mnt/mesos/sandbox/out/run"
    assert directory(source_dir="/specs", working_dir="/workspace") == "/workspace"


def test_an_images_entrypoint_gets_the_args_and_no_value() -> None:
    for containerizer in ("mesos", "docker"):
        info = task_info(
            launch(image="tf:2", argv=("--epochs", "3"), entrypoint=True),
            "A",
            {},
            containerizer=containerizer,
        )
        assert "value" not in info["command"] and info["command"]["arguments"] == ["--epochs", "3"]
        assert info["command"]["shell"] is False


def test_shared_filesystem_starts_tasks_in_the_spec_folder() -> None:
    info = task_info(launch(source_dir="/specs"), "A", {}, shared_filesystem=True)
    assert info["command"]["arguments"][4] == "/specs"
    relative = task_info(launch(source_dir="/specs", working_dir="sub"), "A", {}, shared_filesystem=True)
    assert relative["command"]["arguments"][4] == "/specs/sub"
    sandbox = task_info(launch(source_dir="/specs"), "A", {})
    assert sandbox["command"]["value"] == "python"


def test_labels_name_the_owner_and_the_task() -> None:
    labels = task_labels(launch(), "tfdeclare/ab12cd34")
    assert labels["tfdeclare.owner"] == "tfdeclare/ab12cd34"
    assert labels["tfdeclare.attempt"] == "2" and labels["tfdeclare.index"] == "1"


# ---- offers ------------------------------------------------------------------------------------


def offer(offer_id: str, agent: str, cpus: float, ports: list[tuple[int, int]], **extra: object) -> Offer:
    raw: dict[str, object] = {
        "id": {"value": offer_id},
        "agent_id": {"value": agent},
        "hostname": f"{agent}.example",
        "allocation_info": {"role": "*"},
        "url": {
            "scheme": "http",
            "address": {"hostname": "h", "ip": "10.0.0.9", "port": 5051},
            "path": "/slave(3)",
        },
        "resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, "role": "*"},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 1024.0}, "role": "*"},
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 8.0}, "role": "reserved-elsewhere"},
            {
                "name": "ports",
                "type": "RANGES",
                "ranges": {"range": [{"begin": b, "end": e} for b, e in ports]},
                "role": "*",
            },
        ],
        "attributes": [
            {"name": "rack", "type": "TEXT", "text": {"value": "r1"}},
            {"name": "gen", "type": "SCALAR", "scalar": {"value": 3.0}},
        ],
        **extra,
    }
    return Offer.from_json(raw)


def test_offer_parsing_keeps_unreserved_resources_and_text_attributes() -> None:
    held = HeldOffer.parse(offer("o1", "A", 2.0, [(31000, 31009)]), now=1.0, hold_s=5.0)
    assert (held.cpus, held.mem_mib, held.gpus) == (2.0, 1024.0, 0)
    assert held.ports == ((31000, 31009),)
    assert held.attributes == {"rack": "r1", "gen": "3"}
    assert held.agent_url == "http://10.0.0.9:5051/slave(3)"
    assert held.hold_until == 6.0


def test_pool_combines_offers_of_an_agent_and_subtracts_reservations() -> None:
    pool = OfferPool()
    pool.add(HeldOffer.parse(offer("o1", "A", 2.0, [(31000, 31004)]), 0, 5))
    pool.add(HeldOffer.parse(offer("o2", "A", 1.0, [(31005, 31009)]), 0, 5))
    [view] = pool.views()
    assert (view.cpus, view.mem_mib, view.ports) == (3.0, 2048.0, ((31000, 31009),))
    reserved = SlotAssignment(TaskKey(Role.WORKER, 0), "A", "A.example", "*", 31005, Resources(1, 512))
    [less] = pool.views([reserved])
    assert (less.cpus, less.mem_mib, less.ports) == (2.0, 1536.0, ((31000, 31004), (31006, 31009)))
    assert pool.covers("A", "*", [reserved]) is not None
    too_many = [reserved, *[reserved] * 3]
    assert pool.covers("A", "*", too_many) is None
    pool.remove("o1")
    pool.remove("o2")
    assert pool.views() == []


def test_capacity_is_what_the_master_lists_never_what_is_offered() -> None:
    """Offers show what is free now (other frameworks hold the rest): only the master's
    list of agents (GET_AGENTS) says what an agent has, and until it came nothing is known."""
    pool = OfferPool()
    pool.add(HeldOffer.parse(offer("o1", "A", 2.0, [(31000, 31004)]), 0, 5))
    assert pool.capacities() == [] and not pool.agents_known
    listed = {
        "agent_info": {
            "id": {"value": "A"},
            "hostname": "a.example",
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1.0}}],
            "attributes": [{"name": "rack", "type": "TEXT", "text": {"value": "r1"}}],
        },
        "total_resources": [
            {"name": "cpus", "type": "SCALAR", "scalar": {"value": 4.0}},
            {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096.0}},
            {"name": "gpus", "type": "SCALAR", "scalar": {"value": 2.0}},
            {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 31099}]}},
        ],
    }
    capacity = agent_capacity(listed)
    assert capacity is not None
    assert (capacity.cpus, capacity.mem_mib, capacity.gpus, capacity.ports) == (
        4.0,
        4096.0,
        2,
        ((31000, 31099),),
    )
    assert capacity.attributes == {"rack": "r1"} and capacity.gpu_agent
    version = pool.capacity_version
    pool.set_agents([capacity])
    assert pool.capacities() == [capacity] and pool.capacity_version > version
    assert pool.views()[0].gpu_agent  # GPUs all held by others: still a GPU agent for placement
    pool.forget_agents()
    assert pool.capacities() == []
    assert agent_capacity({"agent_info": {}}) is None


def test_merge_ranges() -> None:
    assert merge_ranges([(5, 7), (1, 2), (3, 4), (10, 11)]) == ((1, 7), (10, 11))


def _scalar_json(name: str, value: float, **reservation: object) -> dict[str, object]:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}, **reservation}


def test_task_resources_are_cut_from_the_offer_with_their_reservations() -> None:
    """Post-refinement offers (the reservations stack): a task takes what is reserved to the
    role first, then unreserved; each piece keeps the offered reservation; the pool shrinks."""
    ml = {"reservations": [{"type": "STATIC", "role": "ml"}]}
    offered: list[dict[str, object]] = [
        _scalar_json("cpus", 1.5, **ml),
        _scalar_json("cpus", 4.0),
        _scalar_json("mem", 8192.0),
        _scalar_json("gpus", 1.0, **ml),
        {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 31009}]}, **ml},
    ]
    pieces = take_resources(offered, launch(), reserved_first=True)  # cpus 2, mem 4096, gpus 1
    by_name = [(p["name"], p.get("reservations"), p.get("scalar", p.get("ranges"))) for p in pieces]
    assert by_name == [
        ("cpus", ml["reservations"], {"value": 1.5}),
        ("cpus", None, {"value": 0.5}),
        ("mem", None, {"value": 4096.0}),
        ("gpus", ml["reservations"], {"value": 1.0}),
        ("ports", ml["reservations"], {"range": [{"begin": 31005, "end": 31005}]}),
    ]
    assert not any("allocation_info" in p for p in pieces)  # the master adds the offers' role
    assert [e["scalar"]["value"] for e in offered[:4]] == [0.0, 3.5, 4096.0, 0.0]  # type: ignore[index]
    # Unreserved first, when so configured; and what the offers lack is asked for plainly.
    offered = [_scalar_json("cpus", 1.0, role="ml"), _scalar_json("cpus", 0.5, role="*")]
    pieces = take_resources(offered, launch(), reserved_first=False)
    cpus = [(p["role"], p["scalar"]["value"]) for p in pieces if p["name"] == "cpus"]  # type: ignore[index]
    assert cpus == [("*", 0.5), ("ml", 1.0), ("*", 0.5)]


def test_offers_count_resources_reserved_to_the_offers_role() -> None:
    raw = offer("o1", "A", 1.0, [(31000, 31004)])
    reserved = [
        _scalar_json("cpus", 2.0, role="ml"),
        _scalar_json("gpus", 1.0, reservations=[{"role": "ml"}]),
    ]
    other = [_scalar_json("cpus", 8.0, role="batch")]
    as_ml = replace(raw, role="ml", resources=[*raw.resources, *reserved, *other])
    held = HeldOffer.parse(as_ml, 0, 5)
    assert (held.cpus, held.gpus) == (3.0, 1)  # batch's reservation is not ours
    assert all(r in held.resources for r in reserved) and other[0] not in held.resources


def test_quota_verdict_compares_a_gangs_total_with_its_roles_limits() -> None:
    from tfdeclare.backends.mesos.amounts import quota_verdict

    quota = {"ml": {"cpus": 4.0}, "ml/team": {"cpus": 6.0, "mem": 1024.0}, "other": {"cpus": 1.0}}
    assert quota_verdict({"cpus": 4.0}, ("ml",), quota) is None
    why = quota_verdict({"cpus": 5.0, "mem": 512.0}, ("ml",), quota)
    assert why is not None and "cpus 5" in why and "role ml limits it to cpus 4" in why
    # a child role is bounded by its parent's limit too (hierarchical quota)
    assert "limits it to cpus 4" in str(quota_verdict({"cpus": 5.0}, ("ml/team",), quota))
    assert quota_verdict({"mem": 2048.0}, ("ml/team",), quota) is not None
    # several roles: their limits add up; a role without a limit is unbounded
    assert quota_verdict({"cpus": 5.0}, ("ml", "other"), quota) is None
    assert quota_verdict({"cpus": 50.0}, ("ml", "*"), quota) is None


def test_the_pools_index_follows_its_offers() -> None:
    """The pool keeps an ``AgentIndex`` current as offers come and go (placement reads it
    between decisions): after random adds and removes it holds one view per (agent, role)
    with held offers, their sums, GPU agents marked; placing on it, reservations amended
    in, is placing on those views."""
    rng = random.Random(23)
    pool = OfferPool()
    held: dict[str, HeldOffer] = {}
    for n in range(400):
        if held and rng.random() < 0.4:
            offer_id = rng.choice(sorted(held))
            assert pool.remove(offer_id) == held.pop(offer_id)
            continue
        agent_id = f"a{rng.randint(0, 19):02d}"
        start = 31000 + 10 * rng.randint(0, 5)
        one = HeldOffer(
            f"o{n}", agent_id, f"{agent_id}.example", rng.choice(("*", "ml")), float(rng.randint(1, 4)),
            1024.0, rng.choice((0, 0, 1)), ((start, start + 4),), {}, "", 0.0, 5.0,
        )  # fmt: skip
        pool.add(one)
        held[one.offer_id] = one
    gpu_agents = {h.agent_id for h in held.values() if h.gpus}
    expected: dict[tuple[str, str], list[HeldOffer]] = {}
    for h in held.values():
        expected.setdefault((h.agent_id, h.role), []).append(h)
    views = pool.views()
    assert [(v.agent_id, v.role) for v in views] == sorted(expected)
    for view in views:
        offers = expected[view.agent_id, view.role]
        assert view.cpus == round(sum(h.cpus for h in offers), 3)
        assert view.gpus == sum(h.gpus for h in offers)
        assert view.ports == merge_ranges(r for h in offers for r in h.ports)
        assert view.gpu_agent >= (view.agent_id in gpu_agents)
    request = GangRequest(
        "job", 0, tuple(SlotRequest(TaskKey(Role.WORKER, i), Resources(1, 512)) for i in range(3))
    )
    options = PlacementOptions(cpu_tasks_on_gpu_agents=True)
    fit = place_gang(request, pool.index(), options)
    assert isinstance(fit, GangFit) and fit == place_gang(request, views, options)
    reserved = list(fit.assignments)
    assert place_gang(request, pool.index(reserved), options) == place_gang(
        request, pool.views(reserved), options
    )
