"""The Mesos backend's queue of gangs waiting for offers serves ``spec.priority`` first, then
first come (``queueing.enqueue``, ``head_of``, ``place_in_line``, and the reducer's
``PlaceAsked``): a later high-priority job is the head of the line, and what its placement
takes is withheld from a low-priority job that asked earlier. Equal priorities keep today's
first-come order exactly."""

from __future__ import annotations

from tests.test_mesos_decide import Run
from tfdeclare.backends.mesos import decide, decide_offers
from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.placement_values import AgentOffer, GangFit, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting, enqueue, head_of, place_in_line
from tfdeclare.core.enums import ConstraintOperator, Role
from tfdeclare.core.run.tasks import GangRequest, SlotRequest
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey
from tfdeclare.core.spec.resources import Resources


def gang(job: str, cpus: float = 1.0, priority: int = 0) -> GangRequest:
    slot = SlotRequest(TaskKey(Role.WORKER, 0), Resources(cpus, 128))
    return GangRequest(job, 0, (slot,), priority=priority)


def test_the_line_is_by_priority_then_first_come() -> None:
    queue: dict[str, Waiting] = {}
    for at, (job, priority) in enumerate([("a", 0), ("b", 0), ("urgent", 10), ("c", 0), ("mid", 5)]):
        enqueue(queue, job, Waiting(gang(job, priority=priority), float(at), float(at)))
    assert list(queue) == ["urgent", "mid", "a", "b", "c"]
    assert head_of(queue.items()) == ("urgent", queue["urgent"])
    # who is ahead of whom
    assert head_of(queue.items(), before=0.0, exclude="a", priority=0) == ("urgent", queue["urgent"])
    assert head_of(queue.items(), before=2.0, exclude="urgent", priority=10) is None
    assert head_of(queue.items(), before=4.0, exclude="mid", priority=5) == ("urgent", queue["urgent"])


def test_equal_priorities_keep_first_come_exactly() -> None:
    queue: dict[str, Waiting] = {}
    for at, job in enumerate("abc"):
        enqueue(queue, job, Waiting(gang(job), float(at), float(at)))
    assert list(queue) == ["a", "b", "c"]
    assert head_of(queue.items(), before=0.0, exclude="a") is None
    assert head_of(queue.items(), before=1.0, exclude="b") == ("a", queue["a"])


def test_the_reducer_puts_a_later_high_priority_job_first() -> None:
    run = Run()
    run.subscribe()
    decide.on_event(run.policy, msg.PlaceAsked(gang("low")), 1.0)
    decide.on_event(run.policy, msg.PlaceAsked(gang("high", priority=9)), 2.0)
    assert list(run.policy.queue) == ["high", "low"]
    assert decide_offers.head(run.policy) is not None and decide_offers.head(run.policy)[0] == "high"  # type: ignore[index]
    # asking again keeps its place; a changed priority moves it
    decide.on_event(run.policy, msg.PlaceAsked(gang("low")), 3.0)
    assert list(run.policy.queue) == ["high", "low"]
    decide.on_event(run.policy, msg.PlaceAsked(gang("low", priority=20)), 4.0)
    assert list(run.policy.queue) == ["low", "high"]
    assert run.policy.queue["low"].first_asked == 1.0


def test_what_the_high_priority_head_needs_is_withheld_from_an_earlier_low_job() -> None:
    agent = AgentOffer("a1", "a1.example", 4.0, 4096, 0, ((31000, 31010),))
    queue: dict[str, Waiting] = {}
    enqueue(queue, "low", Waiting(gang("low", cpus=2), 0.0, 0.0))
    enqueue(queue, "high", Waiting(gang("high", cpus=3, priority=5), 10.0, 10.0))
    low = place_in_line(queue["low"], queue, [agent], 11.0, 300.0, PlacementOptions())
    assert not isinstance(low.fit, GangFit), "the head's 3 cpus are withheld: 1 is left for low"
    high = place_in_line(queue["high"], queue, [agent], 11.0, 300.0, PlacementOptions())
    assert isinstance(high.fit, GangFit)


def test_the_shortfall_is_what_the_held_offers_lack_in_total() -> None:
    from tfdeclare.backends.mesos.queueing import shortfall

    one = AgentOffer("a1", "a1.example", 1.0, 1024, 0, ((31000, 31010),))
    two = AgentOffer("a2", "a2.example", 1.5, 512, 1, ((31000, 31010),))
    assert shortfall(gang("g", cpus=4), [one, two]) == Resources(1.5, 0, 0)
    # enough in all: only the spread keeps it out (``rooms`` says where room is wanted)
    assert shortfall(gang("g", cpus=2), [one, two]) == Resources(0.0, 0, 0)
    gpus = GangRequest("g", 0, (SlotRequest(TaskKey(Role.WORKER, 0), Resources(1, 2048, 2)),))
    assert shortfall(gpus, [one, two]) == Resources(0.0, 512, 1)


def test_the_rooms_are_the_agents_the_gang_may_use_with_what_they_hold_free() -> None:
    from tfdeclare.backends.mesos.queueing import rooms

    ports = ((31000, 31010),)
    capacities = [
        AgentOffer("a1", "h", 4.0, 4096, 0, ports, {"zone": "a"}),
        AgentOffer("a2", "h", 4.0, 4096, 0, ports, {"zone": "b"}),  # same host name, own agent
        AgentOffer("a3", "h3", 4.0, 4096, 0, ports, {"zone": "a"}),  # nothing offered now
        AgentOffer("g1", "g", 8.0, 8192, 2, ports, {"zone": "a"}, gpu_agent=True),  # CPU tasks stay off
    ]
    held = [
        AgentOffer("a1", "h", 1.0, 1024, 0, ports),
        AgentOffer("a1", "h", 0.5, 512, 0, ports, role="team"),  # two roles of one agent add up
        AgentOffer("a2", "h", 2.0, 2048, 0, ports),
    ]
    assert rooms(gang("g"), held, capacities, PlacementOptions()) == (
        ("a1", Resources(1.5, 1536)),
        ("a2", Resources(2.0, 2048)),
        ("a3", Resources(0.0, 0)),
    )
    zoned = GangRequest(
        "g",
        0,
        gang("g").slots,
        constraints=(AttributeConstraint("zone", ConstraintOperator.IN, ("a",)),),
    )
    assert [a for a, _ in rooms(zoned, held, capacities, PlacementOptions())] == ["a1", "a3"]
    assert [a for a, _ in rooms(zoned, held, capacities, PlacementOptions(cpu_tasks_on_gpu_agents=True))] == [
        "a1",
        "a3",
        "g1",
    ]
