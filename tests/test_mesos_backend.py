"""The Mesos backend against the master emulator over real HTTP: failover, the §6.3 invariants
that concern a framework, GPUs, FIFO with backfill, reconciliation and kills.

Numbers in brackets refer to the invariants of the Mesos reference, section 6.3.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.backend_conformance import Harness, gang, launches, place_soon, start, wait_for
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, eventually, mesos_test_config, offer_ids_of, start_emulator
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.decide_state import AgentsAsk
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import GangRequest, Placement, SlotRequest, TaskKey, Unplaced, UnplacedReason
from tfdeclare.core.spec.resources import Resources

pytestmark = pytest.mark.slow  # real task processes behind the emulator, offer and reconcile timers

SLEEP = [PY, "-c", "import time; time.sleep(60)"]


class Cluster:
    """An emulator plus backends over one state folder."""

    def __init__(self, tmp_path: Path, emulator: Emulator, **config: object) -> None:
        self.tmp_path = tmp_path
        self.emulator = emulator
        self.config: MesosConfig = mesos_test_config(emulator.url, **config)
        self.harness = Harness(self._make, tmp_path)
        self.skew = 0.0  # the backends' clock runs this far ahead of the wall clock

    def _make(self) -> MesosBackend:
        return MesosBackend(self.tmp_path / "state", self.config, clock=lambda: time.time() + self.skew)

    def backend(self, **config: object) -> MesosBackend:
        if config:
            self.config = mesos_test_config(self.emulator.url, **config)
        backend = self.harness.backend()
        assert isinstance(backend, MesosBackend)
        return backend

    def framework_id(self) -> str:
        saved = json.loads((self.tmp_path / "state" / "mesos" / "framework.json").read_text())
        return str(saved["frameworkId"])

    def calls(self, kind: str) -> list[dict[str, Any]]:
        return self.emulator.calls(kind)


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    marker = request.node.get_closest_marker("emulator")
    emulator = start_emulator(tmp_path, **(marker.kwargs if marker else {}))
    marker = request.node.get_closest_marker("backend")
    made = Cluster(tmp_path, emulator, **(marker.kwargs if marker else {}))
    try:
        yield made
        assert emulator.check_invariants() == []  # [9] allocations never exceed the agents
    finally:
        made.harness.close()
        emulator.stop()


# ---- failover of the controller ---------------------------------------------------------------


def test_restart_subscribes_with_the_saved_framework_id_and_kills_nothing(cluster: Cluster) -> None:
    """[17] Same framework id, no task killed, explicit reconciliation of every known task."""
    first = cluster.backend()
    task_id = start(cluster.harness, first, "keep", 1, SLEEP)[0].task_id
    wait_for(first, lambda ts: ts[task_id].state is TaskState.RUNNING)
    framework_id = cluster.framework_id()
    first.close()  # the controller goes away: no TEARDOWN
    assert cluster.calls("TEARDOWN") == []
    second = cluster.backend()
    tasks = wait_for(second, lambda ts: ts[task_id].state is TaskState.RUNNING)
    assert tasks[task_id].host == "127.0.0.1" and tasks[task_id].port is not None
    subscribes = cluster.calls("SUBSCRIBE")
    assert len(subscribes) == 2
    assert subscribes[1]["call"]["framework_id"] == {"value": framework_id}
    assert subscribes[1]["call"]["subscribe"]["framework_info"]["id"] == {"value": framework_id}
    info = subscribes[1]["call"]["subscribe"]["framework_info"]
    assert info["failover_timeout"] == cluster.config.failover_timeout_s and info["checkpoint"] is True
    capabilities = {c["type"] for c in info["capabilities"]}
    assert {"PARTITION_AWARE", "TASK_KILLING_STATE"} <= capabilities
    assert "GPU_RESOURCES" not in capabilities  # no task asked for GPUs
    reconciled = [
        t["task_id"]["value"] for c in cluster.calls("RECONCILE") for t in c["call"]["reconcile"]["tasks"]
    ]
    assert task_id in reconciled
    assert cluster.calls("KILL") == []
    assert cluster.emulator.tasks()[task_id]["agent_state"] == "TASK_RUNNING"


def test_updates_while_away_are_seen_after_the_restart(cluster: Cluster) -> None:
    first = cluster.backend()
    go = cluster.tmp_path / "go"  # the task fails when the test says so: after the first backend left
    brief = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\nexit(4)"
    task_id = start(cluster.harness, first, "brief", 1, [PY, "-c", brief])[0].task_id
    wait_for(first, lambda ts: ts[task_id].state is TaskState.RUNNING)
    first.close()
    go.touch()
    eventually(lambda: cluster.emulator.tasks().get(task_id, {}).get("agent_state") == "TASK_FAILED")
    second = cluster.backend()
    # Ended at once (the master's answer to the reconciliation, as Mesos records an agent's
    # update while no framework is connected); its exit code comes with the agent's own
    # update, re-sent until acknowledged, and is folded in then.
    tasks = wait_for(second, lambda ts: ts[task_id].state.ended and ts[task_id].exit_code is not None)
    assert (tasks[task_id].state, tasks[task_id].exit_code) == (TaskState.FAILED, 4)


def test_unreachable_master_is_a_clear_error(tmp_path: Path) -> None:
    config = mesos_test_config("http://127.0.0.1:9", subscribe_timeout_s=1.0)
    backend = MesosBackend(tmp_path / "state", config)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"cannot reach the Mesos master at http://127.0.0.1:9"):
        backend.observe()
    # A bound that is the behaviour: it gives up after its 1 s subscribe timeout instead of the
    # client's own call timeout (75 s); generous, so that a loaded machine cannot fail it.
    assert time.monotonic() - started < 30
    backend.close()
    assert not (tmp_path / "state" / "mesos" / "framework.json").exists()


def test_a_removed_framework_is_reported_once_not_retried(cluster: Cluster) -> None:
    """[18] "Framework has been removed": a clear error, no subscribe loop; by policy a new one."""
    first = cluster.backend()
    task_id = start(cluster.harness, first, "old", 1, SLEEP)[0].task_id
    wait_for(first, lambda ts: ts[task_id].state is TaskState.RUNNING)
    old_id = cluster.framework_id()
    first.close()
    eventually(lambda: cluster.emulator.expire_failover(old_id))
    earlier = set(threading.enumerate())
    second = cluster.backend()
    # its tasks were killed by the master: seen gone at once (journaled), never started again
    # while the policy is fail; every pass's upkeep says why, and so does a placement
    tasks = {t.task_id: t for t in second.observe()}
    assert tasks[task_id].state is TaskState.GONE and "removed" in tasks[task_id].message
    with pytest.raises(BackendError, match="removed framework") as refused:
        second.tend()
    assert refused.value.code is ErrorCode.FRAMEWORK_REFUSED and refused.value.terminal
    with pytest.raises(BackendError, match="removed framework"):
        second.place(gang("other", 1))
    streams = [t for t in threading.enumerate() if t not in earlier and t.name == "mesos-scheduler-stream"]
    for stream in streams:  # a client's stream ends on a terminal error: nothing subscribes again
        stream.join(10)
    assert not any(t.is_alive() for t in streams), "the client gave up at once"
    assert len(cluster.calls("SUBSCRIBE")) == 2, "no re-subscribe loop"
    third = cluster.backend(on_framework_removed="newFramework")
    tasks = {t.task_id: t for t in third.observe()}
    assert tasks[task_id].state is TaskState.GONE and "removed" in tasks[task_id].message
    assert cluster.framework_id() != old_id
    assert list((cluster.tmp_path / "state" / "mesos").glob("framework.removed-*.json"))
    fresh = start(cluster.harness, third, "new", 1, SLEEP)[0].task_id
    wait_for(third, lambda ts: ts[fresh].state is TaskState.RUNNING)


# ---- offers and resources (§6.3 items 7-11) -----------------------------------------------


@pytest.mark.emulator(agents=2)
def test_offer_invariants(cluster: Cluster) -> None:
    """[7] offers used once; [8] one agent per ACCEPT; [9] within offers; [10] declines carry
    filters, SUPPRESS when idle, REVIVE when work arrives."""
    backend = cluster.backend()
    for job in ("a", "b", "c"):
        start(cluster.harness, backend, job, 3, SLEEP)
    eventually(lambda: sum(t.state is TaskState.RUNNING for t in backend.observe()) == 9)
    # idle: held offers are declined with a filter, then offers are suppressed
    eventually(lambda: cluster.calls("SUPPRESS"), timeout=10)
    for call in cluster.calls("DECLINE"):
        assert call["call"]["decline"]["filters"]["refuse_seconds"] == cluster.config.refuse_s
    # An offer round may already be on its way when SUPPRESS goes out; once the backend holds
    # nothing (it declines what came), new work must REVIVE.
    eventually(lambda: not cluster.emulator.offers(), timeout=15)
    suppressed_at = cluster.calls("SUPPRESS")[-1]["time"]
    start(cluster.harness, backend, "d", 1, SLEEP)
    assert any(c["time"] > suppressed_at for c in cluster.calls("REVIVE")), "work arrived: REVIVE"
    used: list[str] = []
    for call in cluster.calls("ACCEPT") + cluster.calls("DECLINE"):
        used.extend(offer_ids_of(call))
    assert len(used) == len(set(used)), "an offer is used at most once"
    for call in cluster.calls("ACCEPT"):
        infos = [t for op in call["call"]["accept"]["operations"] for t in op["launch"]["task_infos"]]
        assert len({t["agent_id"]["value"] for t in infos}) == 1, "one agent per ACCEPT"
        for info in infos:
            ports = [r for r in info["resources"] if r["name"] == "ports"]
            assert ports[0]["ranges"]["range"][0]["begin"] == ports[0]["ranges"]["range"][0]["end"]
    # launch() queues d's ACCEPT for the calls thread: it reaches the master a moment later
    eventually(
        lambda: (
            sum(cluster.emulator.task_state_counts().get(s, 0) for s in ("TASK_RUNNING", "TASK_STARTING"))
            >= 10
        )
    )
    assert all(c["status"] in (200, 202) for c in cluster.emulator.calls())


def test_offers_from_before_a_resubscribe_are_never_used(cluster: Cluster) -> None:
    """[7] After the stream drops and comes back, only new offers are accepted."""
    backend = cluster.backend()
    placement = place_soon(backend, gang("late", 1))  # the first offer round may be slow under load
    before = set(backend._policies.pool.offers)  # white box: the offers held now
    assert before
    cluster.emulator.drop_stream(cluster.framework_id())
    eventually(lambda: len(cluster.calls("SUBSCRIBE")) == 2 and backend._policies.connected)
    tasks = launches(cluster.harness, placement, SLEEP)
    backend.launch(placement, tasks)
    wait_for(backend, lambda ts: ts[tasks[0].task_id].state is TaskState.RUNNING)
    accepted = [o for c in cluster.calls("ACCEPT") for o in offer_ids_of(c)]
    assert accepted and not set(accepted) & before


@pytest.mark.emulator(agents=1)
def test_gpu_tasks_only_on_gpu_agents_and_cpu_tasks_off_them(cluster: Cluster) -> None:
    """[11] GPU tasks on GPU agents once GPU_RESOURCES is declared; CPU tasks stay off them."""
    cpu_agent = cluster.emulator.agent_ids()[0]
    gpu_agent = cluster.emulator.add_agent("cpus:4;mem:4096;ports:[32000-32999]", gpus=2)
    backend = cluster.backend()
    cpu_task = start(cluster.harness, backend, "cpu", 1, SLEEP)[0].task_id
    assert cluster.calls("UPDATE_FRAMEWORK") == []
    request = GangRequest(
        "gpu", 0, tuple(SlotRequest(TaskKey(Role.WORKER, i), Resources(1, 256, 1)) for i in range(2))
    )
    placement = backend.place(request)
    assert isinstance(placement, Placement), placement
    assert {s.backend_ref for s in placement.slots} == {gpu_agent}
    update = cluster.calls("UPDATE_FRAMEWORK")
    assert len(update) == 1
    caps = {c["type"] for c in update[0]["call"]["update_framework"]["framework_info"]["capabilities"]}
    assert "GPU_RESOURCES" in caps
    gpu_tasks = launches(cluster.harness, placement, SLEEP, resources=Resources(1, 256, 1))
    backend.launch(placement, gpu_tasks)
    wait_for(backend, lambda ts: all(ts[t.task_id].state is TaskState.RUNNING for t in gpu_tasks))
    for call in cluster.calls("ACCEPT")[-1:]:
        [info] = call["call"]["accept"]["operations"][0]["launch"]["task_infos"][:1]
        assert {"name": "gpus", "value": 1.0} in [
            {"name": r["name"], "value": r.get("scalar", {}).get("value")} for r in info["resources"]
        ]
    # The CPU agent is full now: a CPU job waits rather than go to the GPU agent.
    big_cpu = backend.place(gang("more-cpu", 1, Resources(3.6, 256)))
    assert isinstance(big_cpu, Unplaced) and big_cpu.reason is UnplacedReason.WAITING_FOR_OFFERS
    ground = cluster.emulator.tasks()
    assert ground[cpu_task]["agent_id"] == cpu_agent
    assert {ground[t.task_id]["agent_id"] for t in gpu_tasks} == {gpu_agent}
    assert (cluster.tmp_path / "state" / "mesos" / "framework.json").read_text().count('"gpuResources": true')


# ---- FIFO with backfill -------------------------------------------------------------------------


@pytest.mark.backend(fifo_backfill_s=1.0, head_of_line_hold_s=30.0, place_wait_s=0.5)
def test_fifo_backfill_then_the_head_is_placed(cluster: Cluster) -> None:
    """A big job first in line: small jobs behind it run meanwhile (backfill) until it has
    waited fifoBackfillSeconds; then the agent drains for it and it is placed."""
    backend = cluster.backend()
    two = Resources(2, 512)
    small1 = backend.place(gang("small1", 1, two))
    assert isinstance(small1, Placement)
    s1 = launches(cluster.harness, small1, SLEEP, resources=two)
    backend.launch(small1, s1)
    big = backend.place(gang("big", 1, Resources(4, 1024)))
    assert isinstance(big, Unplaced) and big.reason is UnplacedReason.WAITING_FOR_OFFERS
    small2 = backend.place(gang("small2", 1))  # behind big, but big cannot use what is free
    assert isinstance(small2, Placement), small2
    s2 = launches(cluster.harness, small2, SLEEP)
    backend.launch(small2, s2)
    cluster.skew += 1.1  # big has waited past fifoBackfillSeconds (the backend's time, not a sleep)
    assert isinstance(backend.place(gang("big", 1, Resources(4, 1024))), Unplaced)  # still first in line
    small3 = backend.place(gang("small3", 1))  # big waited > 1 s: no more backfill
    assert isinstance(small3, Unplaced) and "big" in small3.message, small3
    declines_before = len(cluster.calls("DECLINE"))
    backend.stop([t.task_id for t in s1 + s2], 0.5)
    wait_for(backend, lambda ts: all(ts[t.task_id].state.ended for t in s1 + s2))
    placed = eventually(lambda: _placed(backend, gang("big", 1, Resources(4, 1024))), timeout=10)
    assert len(cluster.calls("DECLINE")) == declines_before, "offers were held for the head"
    backend.release(placed)
    again = eventually(lambda: _placed(backend, gang("small3", 1)), timeout=10)
    assert isinstance(again, Placement)


def _placed(backend: MesosBackend, request: GangRequest) -> Placement | None:
    answer = backend.place(request)
    return answer if isinstance(answer, Placement) else None


@pytest.mark.emulator(agents=2)
@pytest.mark.backend(place_wait_s=120.0, revive_interval_s=5.0)
def test_a_gang_that_does_not_fit_is_not_kept_waiting_when_every_agents_offer_is_held(
    cluster: Cluster,
) -> None:
    """Both agents' offers are held (a placement of all of them). A gang that does not fit
    them REVIVEs, but the master sends no new offer for resources offered to us already:
    ``place`` answers Unplaced at once, not after ``placeWaitSeconds`` (120 s here), and
    says what the gang lacks (only said when the held offers are all there is)."""
    backend = cluster.backend()
    whole = place_soon(backend, gang("whole", 2, Resources(4, 1024)))  # all of both agents
    assert len({s.backend_ref for s in whole.slots}) == 2
    policies = backend._policies  # the list of agents is in (it came while "whole" waited)
    eventually(lambda: policies.pool.agents_known and policies.policy.agents.ask is not AgentsAsk.OUT)
    revives = len(cluster.calls("REVIVE"))
    cluster.skew += 5.1  # past reviveIntervalSeconds (the backend's time, not a sleep): it REVIVEs
    answers: list[Placement | Unplaced] = []
    asking = threading.Thread(
        target=lambda: answers.append(backend.place(gang("other", 1, Resources(1, 128))))
    )
    asking.start()
    asking.join(timeout=30.0)  # a guard against the old 120 s wait, not a timing
    assert answers, "place() waited for offers that cannot come"
    other = answers[0]
    assert isinstance(other, Unplaced) and other.reason is UnplacedReason.WAITING_FOR_OFFERS, other
    assert other.short == Resources(1, 0) and other.rooms is not None, "the held offers are all there is"
    eventually(lambda: len(cluster.calls("REVIVE")) > revives)  # it did ask for offers
    backend.release(whole)
    backend.release(place_soon(backend, gang("other", 1, Resources(1, 128))))


def test_unschedulable_is_not_a_wait(cluster: Cluster) -> None:
    backend = cluster.backend()
    huge = backend.place(gang("huge", 1, Resources(64, 128)))
    assert isinstance(huge, Unplaced) and huge.reason is UnplacedReason.UNSCHEDULABLE
    assert "cpus 64" in huge.message and "the largest agent has" in huge.message


# ---- kills and reconciliation -------------------------------------------------------------------


@pytest.mark.backend(reconcile_interval_s=1.0)
def test_a_task_of_ours_the_journal_does_not_know_is_killed(cluster: Cluster) -> None:
    first = cluster.backend()
    placement = first.place(gang("orphan", 1))
    assert isinstance(placement, Placement)
    # an id as the controller makes them: <job>.<uid>.<role>-<index>.<launch>
    task = replace(launches(cluster.harness, placement, SLEEP)[0], task_id="orphan.ab12cd34.worker-0.1")
    first.launch(placement, [task])
    task_id = task.task_id
    wait_for(first, lambda ts: ts[task_id].state is TaskState.RUNNING)
    first.close()
    for name in ("tasks.json", "tasks.log"):  # the journal is lost, framework.json is not
        (cluster.tmp_path / "state" / "mesos" / name).unlink(missing_ok=True)
    second = cluster.backend()
    assert second.observe() == []
    eventually(
        lambda: cluster.emulator.tasks().get(task_id, {}).get("agent_state") in (None, "TASK_KILLED"),
        timeout=10,
    )
    assert any(c["call"]["kill"]["task_id"]["value"] == task_id for c in cluster.calls("KILL"))


def test_kill_is_sent_again_after_a_resubscribe(cluster: Cluster) -> None:
    """[15] A KILL lost while disconnected is retried on the next subscription."""
    backend = cluster.backend()
    task_id = start(cluster.harness, backend, "stubborn", 1, SLEEP)[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING)
    # No leader: the stream drops and every re-subscription is refused until one is elected
    # again (a dropped stream alone is re-subscribed within 0.5 s, racing the KILL below).
    cluster.emulator.set_leader(False)
    eventually(lambda: not backend._policies.connected)
    backend.stop([task_id], 0.5)  # the KILL fails: not subscribed
    assert cluster.emulator.tasks()[task_id]["agent_state"] == "TASK_RUNNING"
    cluster.emulator.set_leader(True)
    tasks = wait_for(backend, lambda ts: ts[task_id].state.ended)
    assert tasks[task_id].state is TaskState.STOPPED


def test_updates_are_acknowledged_once_journaled(cluster: Cluster) -> None:
    """[13] Every update with a uuid is acknowledged after it is recorded; the journal holds
    the state before the master forgets the update."""
    backend = cluster.backend()
    task_id = start(cluster.harness, backend, "acked", 1, [PY, "-c", "pass"])[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state.ended)
    eventually(lambda: task_id not in cluster.emulator.tasks())  # terminal update acknowledged
    acks = [
        c for c in cluster.calls("ACKNOWLEDGE") if c["call"]["acknowledge"]["task_id"]["value"] == task_id
    ]
    assert len({a["call"]["acknowledge"]["uuid"] for a in acks}) == len(acks) >= 3
    log = (cluster.tmp_path / "state" / "mesos" / "tasks.log").read_text()
    assert '"TASK_FINISHED"' in log


def test_launch_is_written_ahead(cluster: Cluster) -> None:
    """Every task is in the journal (durably) before the ACCEPT that launches it."""
    backend = cluster.backend()
    placement = backend.place(gang("ahead", 2))
    assert isinstance(placement, Placement)
    tasks = launches(cluster.harness, placement, SLEEP)
    seen: list[set[str]] = []
    client = backend._sender.client
    assert client is not None
    real_launch = client.launch_many

    def spy(bursts: Any) -> Any:
        journal = (cluster.tmp_path / "state" / "mesos" / "tasks.log").read_text()
        seen.append({t.task_id for t in tasks if t.task_id in journal})
        return real_launch(bursts)

    client.launch_many = spy  # type: ignore[method-assign]
    backend.launch(placement, tasks)
    wait_for(backend, lambda ts: all(ts[t.task_id].state is TaskState.RUNNING for t in tasks))
    assert seen == [{t.task_id for t in tasks}]
    infos = cluster.calls("ACCEPT")[-1]["call"]["accept"]["operations"][0]["launch"]["task_infos"]
    labels = {label["key"]: label["value"] for label in infos[0]["labels"]["labels"]}
    assert labels["tfdeclare.job"] == "ahead" and labels["tfdeclare.owner"].startswith("tfdeclare-test/")
    assert infos[0]["name"] == "/job:worker/task:0"


# ---- auth, roles, ids, logs, watchers ------------------------------------------------------------


@pytest.mark.emulator(credentials={"tfd": "s3cret-Val"}, roles={"ml"})
@pytest.mark.backend(principal="tfd", secret_env="TFD_TEST_SECRET", roles=("ml",))
def test_principal_secret_and_roles(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFD_TEST_SECRET", "s3cret-Val")
    backend = cluster.backend()
    task_id = start(cluster.harness, backend, "authed", 1, SLEEP)[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING)
    info = cluster.calls("SUBSCRIBE")[0]["call"]["subscribe"]["framework_info"]
    assert info["principal"] == "tfd" and info["roles"] == ["ml"]
    [accept] = cluster.calls("ACCEPT")
    resources = accept["call"]["accept"]["operations"][0]["launch"]["task_infos"][0]["resources"]
    assert {r["allocation_info"]["role"] for r in resources} == {"ml"}
    monkeypatch.setenv("TFD_TEST_SECRET", "wrong")
    refused = MesosBackend(cluster.tmp_path / "other", mesos_test_config(cluster.emulator.url, principal="tfd",
                           secret_env="TFD_TEST_SECRET", subscribe_timeout_s=1.0))  # fmt: skip
    with pytest.raises(BackendError) as info_:
        refused.observe()
    refused.close()
    assert "refused the framework" in str(info_.value) and "401" in str(info_.value)  # at once
    assert info_.value.code is ErrorCode.CREDENTIALS_REFUSED and info_.value.terminal
    assert "wrong" not in str(info_.value) and "s3cret" not in str(info_.value)


def test_rescinded_offers_are_never_used(cluster: Cluster) -> None:
    """[7] A placement whose offers were rescinded (the agent went away) is not launched on
    them; the launch fails cleanly and the job is placed again."""
    backend = cluster.backend()
    placement = backend.place(gang("rescinded", 1))
    assert isinstance(placement, Placement)
    held = set(backend._policies.pool.offers)
    agent = cluster.emulator.agent_ids()[0]
    cluster.emulator.disconnect_agent(agent)
    eventually(lambda: not set(backend._policies.pool.offers) & held)  # RESCIND seen
    with pytest.raises(BackendError, match="used or rescinded"):
        backend.launch(placement, launches(cluster.harness, placement, SLEEP))
    assert cluster.calls("ACCEPT") == []
    assert backend.observe() == []


def test_every_offer_is_answered_when_idle(cluster: Cluster) -> None:
    """[10] Nothing waits: held offers are declined with a filter and offers suppressed."""
    backend = cluster.backend()
    task_id = start(cluster.harness, backend, "one", 1, SLEEP)[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING)
    eventually(lambda: cluster.emulator.offers(cluster.framework_id()) == [] and cluster.calls("SUPPRESS"))


def test_task_ids_must_be_valid_mesos_ids(cluster: Cluster) -> None:
    backend = cluster.backend()
    placement = backend.place(gang("badid", 1))
    assert isinstance(placement, Placement)
    [task] = launches(cluster.harness, placement, SLEEP)
    with pytest.raises(BackendError, match="invalid task id"):
        backend.launch(placement, [replace(task, task_id="has/slash")])
    backend.release(placement)


def test_logs_end_with_stderr_once_the_task_ended(cluster: Cluster) -> None:
    backend = cluster.backend()
    script = "import sys; print('out line'); print('Traceback: boom', file=sys.stderr); sys.exit(2)"
    task_id = start(cluster.harness, backend, "talky", 1, [PY, "-c", script])[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state.ended)
    data, offset = b"", 0
    for _ in range(100):
        chunk = backend.read_log(task_id, offset, limit=7)  # small pieces: offsets must add up
        data, offset = data + chunk.data, chunk.next_offset
        if chunk.complete:
            break
    else:
        raise AssertionError("the log never completed")
    assert data == b"out line\n\n--- stderr ---\nTraceback: boom\n"
    with pytest.raises(BackendError, match="no log"):
        backend.read_log("nobody.ab12.worker-0.1")


def test_watchers_hear_about_updates(cluster: Cluster) -> None:
    backend = cluster.backend()
    calls: list[float] = []
    backend.watch(lambda: calls.append(time.monotonic()))
    task_id = start(cluster.harness, backend, "watched", 1, [PY, "-c", "pass"])[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state.ended)
    assert len(calls) >= 3  # subscribed / offers, STARTING, RUNNING, FINISHED


# ---- manners at close (issue 33) ---------------------------------------------------------------


@pytest.mark.emulator(update_retry_interval=10.0)  # as a real agent: an unacknowledged update waits 10 s
def test_close_acknowledges_the_first_update_of_every_task_just_launched(cluster: Cluster) -> None:
    """close() right after a launch: the first update of every task just launched is
    acknowledged before the stream closes, so the agents send TASK_RUNNING at once rather
    than after their 10 s retry."""
    backend = cluster.backend()
    ids = [t.task_id for t in start(cluster.harness, backend, "closing", 3, SLEEP)]
    backend.close()
    acks = cluster.calls("ACKNOWLEDGE")
    assert set(ids) <= {c["call"]["acknowledge"]["task_id"]["value"] for c in acks if c["status"] == 202}
    eventually(lambda: all(cluster.emulator.tasks()[i]["state"] == "TASK_RUNNING" for i in ids), timeout=5.0)


@pytest.mark.backend(offer_hold_s=30.0)  # offers are still held when close() comes
def test_close_declines_the_offers_held_and_suppresses_on_the_open_stream(cluster: Cluster) -> None:
    backend = cluster.backend()
    start(cluster.harness, backend, "closing", 2, SLEEP)

    def interest() -> list[dict[str, Any]]:
        return [c for c in cluster.emulator.calls() if c["type"] in ("REVIVE", "SUPPRESS")]

    # What the tasks left is offered and held, unless the backend, with nothing waiting and no
    # offer held at that moment, suppressed first (a loaded machine can order it so): then
    # close() has no offer to decline, and must still end suppressed on the open stream.
    eventually(lambda: backend._policies.pool.offers or [c["type"] for c in interest()][-1:] == ["SUPPRESS"])
    held = set(backend._policies.pool.offers)
    # Held ones are not declined before close() (whether a SUPPRESS went out meanwhile or not:
    # offers on their way when it went out arrive after it, on a loaded machine, and are held)
    assert not {o for c in cluster.calls("DECLINE") for o in offer_ids_of(c)} & held
    backend.close()
    stream_id = cluster.emulator.stream_ids()[-1]
    declined = {o for c in cluster.calls("DECLINE") if c["status"] == 202 for o in offer_ids_of(c)}
    assert held <= declined
    last = interest()[-1]
    assert last["type"] == "SUPPRESS" and last["status"] == 202 and last["stream_id"] == stream_id
    assert all(c["status"] == 202 for c in cluster.emulator.calls() if c["type"] not in (None, "SUBSCRIBE"))
