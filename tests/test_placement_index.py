"""The indexed placement gives the straightforward placement's answers (issue 23).

``place_gang`` over an ``AgentIndex`` (built at once, kept current by ``put``/``drop`` as the
offer pool keeps it, or amended for reservations and the head of the queue) is compared with
``tests/placement_reference.py``, the placement as it was before the index (a bin per agent,
sorted each decision), on random clusters and gangs: pack and spread, GPU and CPU tasks on
GPU and CPU agents, ports (few, none, shared hostnames), previous and pinned addresses,
attribute constraints, roles (one agent offering for two roles), and many ties (values from
small sets). The whole answer is compared, refusals' reasons and messages included.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.placement_reference import reference_backfill_views, reference_place_gang
from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_backfill import backfill_views
from tfdeclare.backends.mesos.placement_index import AgentIndex, AgentKey
from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions
from tfdeclare.backends.mesos.queueing import Waiting, head_of, place_in_line
from tfdeclare.core.enums import ConstraintOperator, PlacementStrategy, Role
from tfdeclare.core.run.tasks import Address, GangRequest, SlotRequest
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey
from tfdeclare.core.spec.resources import Resources

CPUS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0)
MEMS = (0.0, 256.0, 512.0, 1024.0, 2048.0, 8192.0)
PORT_RANGES = ((), ((31000, 31000),), ((31000, 31002),), ((31000, 31001), (31005, 31009)), ((31003, 31012),))
SHAPES = (
    Resources(0.5, 256, 0),
    Resources(1, 1024, 0),
    Resources(2, 512, 0),
    Resources(1, 1024, 1),
    Resources(2, 2048, 2),
    Resources(4, 256, 1),
)
CONSTRAINTS = (
    (),
    (AttributeConstraint("rack", ConstraintOperator.NOT_IN, ("r1",)),),
    (AttributeConstraint("rack", ConstraintOperator.IN, ("r0", "r2")),),
    (AttributeConstraint("ssd", ConstraintOperator.EXISTS, ()),),
)


@st.composite
def views(draw: st.DrawFn, count: int | None = None) -> list[AgentOffer]:
    """Offers of up to 24 agents (ids a00-a23), some for two roles, some sharing a hostname."""
    keys = draw(
        st.lists(
            st.tuples(st.integers(0, 23), st.sampled_from(("*", "ml"))),
            unique=True,
            max_size=count if count is not None else 30,
        )
    )
    out = []
    for number, role in keys:
        attributes = {}
        rack = draw(st.sampled_from(("r0", "r1", "r2", None)))
        if rack is not None:
            attributes["rack"] = rack
        if draw(st.booleans()):
            attributes["ssd"] = "true"
        gpus = draw(st.sampled_from((0, 0, 0, 1, 2, 3, 4)))
        out.append(
            AgentOffer(
                f"a{number:02d}",
                f"h{number % 8}",  # agents a00 and a08 share host h0: told apart by port
                draw(st.sampled_from(CPUS)),
                draw(st.sampled_from(MEMS)),
                gpus,
                draw(st.sampled_from(PORT_RANGES)),
                attributes,
                role,
                gpu_agent=gpus > 0 or draw(st.booleans()),
            )
        )
    return out


@st.composite
def gangs(draw: st.DrawFn) -> GangRequest:
    slots = []
    for i in range(draw(st.integers(1, 10))):
        previous = None
        pinned = False
        if draw(st.integers(0, 3)) == 0:
            previous = Address(f"h{draw(st.integers(0, 8))}", draw(st.integers(30999, 31012)))
            pinned = draw(st.integers(0, 3)) == 0
        role = draw(st.sampled_from((Role.WORKER, Role.PS)))
        slots.append(SlotRequest(TaskKey(role, i), draw(st.sampled_from(SHAPES)), previous, pinned))
    return GangRequest(
        "job",
        0,
        tuple(slots),
        draw(st.sampled_from(list(PlacementStrategy))),
        draw(st.sampled_from(CONSTRAINTS)),
    )


options_ = st.builds(PlacementOptions, st.booleans())
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def kept_current(
    final: list[AgentOffer], noise: list[AgentOffer], seed: int, lists_first: bool
) -> AgentIndex:
    """An index that ends holding ``final`` after puts, replacements and drops in a random
    order (as the offer pool changes it): ``noise`` views (half of them on another host) go
    in first, then the final views replace them or join them, and the noise views no final
    view replaced are dropped. ``lists_first``: the index's lazy lists (by host, in order)
    are made before the changes, so they are kept current through them."""
    rng = random.Random(seed)
    index = AgentIndex()
    for i, view in enumerate(noise):
        moved = f"h{(int(view.agent_id[1:]) + 1) % 8}"  # a host previous addresses name
        index.put(replace(view, hostname=moved) if i % 2 else view)
    if lists_first:
        index.keys_on_host("h0")
        index.keys_of("a00")
    final_keys = {(v.agent_id, v.role) for v in final}
    steps = [("put", v) for v in final]
    steps += [("drop", v) for v in noise if (v.agent_id, v.role) not in final_keys]
    rng.shuffle(steps)
    for step, view in steps:
        if step == "put":
            index.put(view)
            assert index.get(view.agent_id, view.role) == view
        else:
            index.drop(view.agent_id, view.role)
            assert index.get(view.agent_id, view.role) is None
    return index


@SETTINGS
@given(views(), views(), gangs(), options_, st.integers(0, 2**16))
def test_an_index_kept_current_places_as_the_straightforward_placement(
    final: list[AgentOffer],
    noise: list[AgentOffer],
    request: GangRequest,
    options: PlacementOptions,
    seed: int,
) -> None:
    expected = reference_place_gang(request, final, options)
    assert place_gang(request, final, options) == expected
    for lists_first in (False, True):
        index = kept_current(final, noise, seed, lists_first)
        assert list(index) == sorted(final, key=lambda v: (v.agent_id, v.role))
        assert len(index) == len(final)
        assert place_gang(request, index, options) == expected


@SETTINGS
@given(views(), gangs(), options_, st.data())
def test_an_amended_index_places_as_the_straightforward_placement(
    base: list[AgentOffer], request: GangRequest, options: PlacementOptions, data: st.DataObject
) -> None:
    """Views replaced (less free, as after a reservation) or removed (drained) in an amended
    index: the same answer as the straightforward placement on what is left."""
    index = AgentIndex(base)
    changes: dict[AgentKey, AgentOffer | None] = {}
    for view in base:
        what = data.draw(st.sampled_from(("keep", "keep", "less", "gone")))
        if what == "less":
            changes[view.agent_id, view.role] = replace(
                view,
                cpus=max(0.0, view.cpus - data.draw(st.sampled_from((0.0, 0.5, 1.0, 4.0)))),
                gpus=max(0, view.gpus - data.draw(st.integers(0, 2))),
                ports=data.draw(st.sampled_from(PORT_RANGES)),
            )
        elif what == "gone":
            changes[view.agent_id, view.role] = None
    amended = index.amended(changes)
    left = [changes.get((v.agent_id, v.role), v) for v in base]
    remaining = [v for v in left if v is not None]
    assert place_gang(request, amended, options) == reference_place_gang(request, remaining, options)
    assert place_gang(request, index, options) == reference_place_gang(request, base, options)


@SETTINGS
@given(views(), gangs(), gangs(), st.sampled_from((0.0, 30.0, 90.0)), options_)
def test_place_in_line_over_an_index_gives_the_straightforward_answer(
    offers: list[AgentOffer],
    head: GangRequest,
    request: GangRequest,
    waited: float,
    options: PlacementOptions,
) -> None:
    """The head of the queue's share (its placement subtracted, or the agents drained for
    it) taken from the index, then the gang placed: as the straightforward backfill."""
    head = replace(head, job="head")
    capacities = [replace(v, cpus=8.0, mem_mib=8192.0, gpus=4 if v.gpu_agent else 0) for v in offers]
    capacities = list({v.agent_id: v for v in capacities}.values())
    left = reference_backfill_views(head, waited, offers, 60.0, options, capacities)
    assert backfill_views(head, waited, offers, 60.0, options, capacities) == left
    queue = {"head": Waiting(head, 0.0, 0.0), "job": Waiting(request, 1.0, 1.0)}
    if head_of(queue.items(), before=1.0, exclude="job") is None:  # a pinned head holds no line
        left = reference_backfill_views(None, waited, offers, 60.0, options, capacities)
    expected = reference_place_gang(request, left.views, options)
    decision = place_in_line(queue["job"], queue, AgentIndex(offers), waited, 60.0, options, capacities)
    assert (decision.fit, decision.note) == (expected, left.note)


def test_an_amended_index_is_void_once_its_index_changes() -> None:
    a = AgentOffer("a", "h", 4.0, 4096.0, 0, ((31000, 31009),))
    index = AgentIndex([a])
    amended = index.amended({("a", "*"): replace(a, cpus=1.0)})
    assert [v.cpus for v in amended] == [1.0] and [v.cpus for v in index] == [4.0]
    with pytest.raises(TypeError):
        amended.put(a)
    index.put(replace(a, cpus=2.0))
    with pytest.raises(RuntimeError):
        list(amended)
    with pytest.raises(KeyError):
        index.amended({("b", "*"): None})
    with pytest.raises(ValueError, match="keep its agent, role and hostname"):
        index.amended({("a", "*"): replace(a, hostname="elsewhere")})
    with pytest.raises(ValueError, match="two views of agent a"):
        AgentIndex([a, a])
