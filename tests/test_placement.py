"""Tables for ``tfdeclare.backends.mesos.placement``: gang placement over offers, pure and deterministic."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tfdeclare.backends.mesos.placement import place_gang
from tfdeclare.backends.mesos.placement_backfill import backfill_views, drain_set
from tfdeclare.backends.mesos.placement_capacity import never_fits
from tfdeclare.backends.mesos.placement_rules import matches
from tfdeclare.backends.mesos.placement_values import (
    AgentOffer,
    GangFit,
    NoFit,
    PlacementOptions,
    remove_ports,
)
from tfdeclare.core.enums import ConstraintOperator, PlacementStrategy, Role
from tfdeclare.core.run.tasks import Address, GangRequest, SlotRequest, UnplacedReason
from tfdeclare.core.spec.keys import AttributeConstraint, TaskKey
from tfdeclare.core.spec.resources import Resources

ONE = Resources(1, 1024, 0)
GPU = Resources(1, 1024, 1)


def agent(
    name: str,
    cpus: float = 4,
    mem: float = 4096,
    gpus: int = 0,
    ports: tuple[tuple[int, int], ...] = ((31000, 31009),),
    host: str | None = None,
    gpu_agent: bool | None = None,
    **attributes: str,
) -> AgentOffer:
    return AgentOffer(
        name,
        host or f"{name}.example",
        cpus,
        mem,
        gpus,
        ports,
        attributes,
        gpu_agent=gpus > 0 if gpu_agent is None else gpu_agent,
    )


def gang(
    n: int = 1,
    resources: Resources = ONE,
    *,
    strategy: PlacementStrategy = PlacementStrategy.PACK,
    constraints: tuple[AttributeConstraint, ...] = (),
    previous: dict[int, Address] | None = None,
    ps: int = 0,
    ps_resources: Resources = ONE,
) -> GangRequest:
    slots = [SlotRequest(TaskKey(Role.PS, i), ps_resources) for i in range(ps)]
    slots += [SlotRequest(TaskKey(Role.WORKER, i), resources, (previous or {}).get(i)) for i in range(n)]
    return GangRequest("job", 0, tuple(slots), strategy, constraints)


def where(fit: GangFit | NoFit) -> dict[str, tuple[str, int]]:
    assert isinstance(fit, GangFit), fit
    return {a.key.name: (a.agent_id, a.port) for a in fit.assignments}


def agents_used(fit: GangFit | NoFit) -> set[str]:
    return {agent_id for agent_id, _ in where(fit).values()}


# ---- strategies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "offers", "n", "expected_agents"),
    [
        # pack: the tightest agent that takes the whole gang
        (PlacementStrategy.PACK, [agent("a", 8), agent("b", 4), agent("c", 16)], 4, {"b"}),
        # pack: nobody takes it whole -> start with the largest, then keep filling
        (PlacementStrategy.PACK, [agent("a", 2), agent("b", 3), agent("c", 2)], 5, {"a", "b"}),
        # spread: one per agent while agents last
        (PlacementStrategy.SPREAD, [agent("a"), agent("b"), agent("c")], 3, {"a", "b", "c"}),
        # spread with more slots than agents: every agent used
        (PlacementStrategy.SPREAD, [agent("a"), agent("b")], 4, {"a", "b"}),
    ],
)
def test_strategies(
    strategy: PlacementStrategy, offers: list[AgentOffer], n: int, expected_agents: set[str]
) -> None:
    fit = place_gang(gang(n, strategy=strategy), offers)
    assert agents_used(fit) == expected_agents


def test_pack_fills_few_agents_and_spread_balances() -> None:
    offers = [agent(f"a{i}", 8, 8192) for i in range(4)]
    packed = place_gang(gang(8), offers)
    spread = place_gang(gang(8, strategy=PlacementStrategy.SPREAD), offers)
    assert len(agents_used(packed)) == 1
    counts: dict[str, int] = {}
    for agent_id, _ in where(spread).values():
        counts[agent_id] = counts.get(agent_id, 0) + 1
    assert sorted(counts.values()) == [2, 2, 2, 2]


def test_ports_are_distinct_and_from_the_offered_ranges() -> None:
    offers = [agent("a", 8, ports=((31000, 31001), (32000, 32005)))]
    placed = where(place_gang(gang(4), offers))
    ports = [port for _, port in placed.values()]
    assert len(set(ports)) == 4
    assert all(31000 <= p <= 31001 or 32000 <= p <= 32005 for p in ports)


def test_no_ports_no_placement() -> None:
    fit = place_gang(gang(3), [agent("a", 8, ports=((31000, 31001),))])
    assert isinstance(fit, NoFit) and fit.reason is UnplacedReason.WAITING_FOR_OFFERS


# ---- all or nothing ---------------------------------------------------------------------------


def test_all_or_nothing() -> None:
    offers = [agent("a", 2), agent("b", 2)]
    assert isinstance(place_gang(gang(4), offers), GangFit)
    refused = place_gang(gang(5), offers)
    assert isinstance(refused, NoFit)
    assert refused.reason is UnplacedReason.WAITING_FOR_OFFERS
    assert "needs cpus 5" in refused.message


def test_memory_counts_too() -> None:
    fit = place_gang(gang(2, Resources(0.5, 3000)), [agent("a", 8, 4096)])
    assert isinstance(fit, NoFit)


# ---- GPUs -------------------------------------------------------------------------------------


def test_gpu_tasks_only_on_gpu_agents_and_cpu_tasks_off_them() -> None:
    offers = [agent("cpu", 8), agent("gpu", 8, gpus=2)]
    placed = where(place_gang(gang(2, GPU, ps=1), offers))
    assert placed["worker-0"][0] == placed["worker-1"][0] == "gpu"
    assert placed["ps-0"][0] == "cpu"


def test_cpu_tasks_wait_rather_than_use_a_gpu_agent() -> None:
    fit = place_gang(gang(1), [agent("gpu", 8, gpus=2)])
    assert isinstance(fit, NoFit) and fit.reason is UnplacedReason.WAITING_FOR_OFFERS
    allowed = place_gang(gang(1), [agent("gpu", 8, gpus=2)], PlacementOptions(cpu_tasks_on_gpu_agents=True))
    assert agents_used(allowed) == {"gpu"}


def test_an_agent_with_every_gpu_in_use_is_still_a_gpu_agent() -> None:
    busy_gpu_agent = agent("gpu", 8, gpus=0, gpu_agent=True)
    assert isinstance(place_gang(gang(1), [busy_gpu_agent]), NoFit)


def test_whole_gpus_and_the_gpu_reason() -> None:
    offers = [agent("g1", 8, gpus=1), agent("g2", 8, gpus=1)]
    assert agents_used(place_gang(gang(2, GPU), offers)) == {"g1", "g2"}
    short = place_gang(gang(3, GPU), offers)
    assert isinstance(short, NoFit) and short.reason is UnplacedReason.WAITING_FOR_GPUS
    two = place_gang(gang(1, Resources(1, 1024, 2)), offers)
    assert isinstance(two, NoFit) and two.reason is UnplacedReason.WAITING_FOR_GPUS


# ---- constraints ------------------------------------------------------------------------------


def c(attribute: str, operator: ConstraintOperator, *values: str) -> AttributeConstraint:
    return AttributeConstraint(attribute, operator, values)


@pytest.mark.parametrize(
    ("constraints", "attributes", "ok"),
    [
        ((c("rack", ConstraintOperator.IN, "r1", "r2"),), {"rack": "r1"}, True),
        ((c("rack", ConstraintOperator.IN, "r1"),), {"rack": "r3"}, False),
        ((c("rack", ConstraintOperator.IN, "r1"),), {}, False),
        ((c("rack", ConstraintOperator.NOT_IN, "r1"),), {"rack": "r2"}, True),
        ((c("rack", ConstraintOperator.NOT_IN, "r1"),), {"rack": "r1"}, False),
        ((c("rack", ConstraintOperator.NOT_IN, "r1"),), {}, True),
        ((c("ssd", ConstraintOperator.EXISTS),), {"ssd": "true"}, True),
        ((c("ssd", ConstraintOperator.EXISTS),), {}, False),
        ((c("spot", ConstraintOperator.DOES_NOT_EXIST),), {}, True),
        ((c("spot", ConstraintOperator.DOES_NOT_EXIST),), {"spot": "1"}, False),
        (
            (c("rack", ConstraintOperator.IN, "r1"), c("ssd", ConstraintOperator.EXISTS)),
            {"rack": "r1"},
            False,
        ),
    ],
)
def test_constraint_operators(
    constraints: tuple[AttributeConstraint, ...], attributes: dict[str, str], ok: bool
) -> None:
    assert matches(attributes, constraints) is ok


def test_constraints_choose_the_agents() -> None:
    offers = [agent("a", 16, rack="r1"), agent("b", 16, rack="r2"), agent("c", 16)]
    only_r2 = (c("rack", ConstraintOperator.IN, "r2"),)
    assert agents_used(place_gang(gang(3, constraints=only_r2), offers)) == {"b"}
    none = place_gang(gang(3, constraints=(c("rack", ConstraintOperator.IN, "r9"),)), offers)
    assert isinstance(none, NoFit)


# ---- previous addresses ---------------------------------------------------------------------


def test_previous_host_and_port_are_reused() -> None:
    offers = [agent("a", 8, ports=((31000, 31009),)), agent("b", 8, ports=((31000, 31009),))]
    previous = {0: Address("b.example", 31007), 1: Address("a.example", 31003)}
    placed = where(place_gang(gang(2, previous=previous), offers))
    assert placed == {"worker-0": ("b", 31007), "worker-1": ("a", 31003)}


def test_previous_port_not_offered_means_a_new_one() -> None:
    offers = [agent("a", 8, ports=((31000, 31009),))]
    placed = where(place_gang(gang(1, previous={0: Address("a.example", 40000)}), offers))
    assert placed["worker-0"][0] == "a" and 31000 <= placed["worker-0"][1] <= 31009


def test_other_slots_leave_previous_ports_alone() -> None:
    # worker-1 wants 31000 back; worker-0 (no previous) must not take it first.
    offers = [agent("a", 8, ports=((31000, 31001),))]
    placed = where(place_gang(gang(2, previous={1: Address("a.example", 31000)}), offers))
    assert placed == {"worker-0": ("a", 31001), "worker-1": ("a", 31000)}


def test_same_hostname_agents_are_told_apart_by_port() -> None:
    offers = [
        agent("a", 8, ports=((31000, 31099),), host="127.0.0.1"),
        agent("b", 8, ports=((31100, 31199),), host="127.0.0.1"),
    ]
    placed = where(place_gang(gang(1, previous={0: Address("127.0.0.1", 31150)}), offers))
    assert placed["worker-0"] == ("b", 31150)


# ---- determinism ---------------------------------------------------------------------------


def test_same_input_same_answer_whatever_the_order() -> None:
    rng = random.Random(7)
    offers = [agent(f"a{i:02}", rng.choice([2, 4, 8]), rng.choice([2048, 8192])) for i in range(20)]
    for strategy in PlacementStrategy:
        request = gang(12, Resources(1, 1024), strategy=strategy, ps=2)
        first = place_gang(request, offers)
        for _ in range(5):
            shuffled = offers[:]
            rng.shuffle(shuffled)
            assert place_gang(request, shuffled) == first


# ---- never fits ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "capacities", "expected"),
    [
        (gang(1, Resources(64, 128)), [agent("a", 4)], "worker-0 needs cpus 64"),
        (gang(3, Resources(3, 1024)), [agent("a", 4), agent("b", 4)], "together"),
        (gang(1, GPU), [agent("a", 4)], "needs an agent with GPUs"),
        (gang(1), [agent("g", 4, gpus=1)], "no GPUs"),
        (
            gang(1, constraints=(c("rack", ConstraintOperator.IN, "r9"),)),
            [agent("a", 4, rack="r1")],
            "constraints",
        ),
        (gang(3), [agent("a", 8, ports=((1, 2),))], "port"),
        (gang(2, Resources(2, 1024)), [agent("a", 4)], None),
        (gang(4, Resources(64, 128)), [], None),  # nothing seen yet: unknown, keep waiting
        # enough in all, but one task an agent: two agents of 4 cpus never hold three of 2.5
        (gang(3, Resources(2.5, 256)), [agent("a", 4), agent("b", 4)], "hold 2 of them at most"),
        (gang(3, Resources(0.5, 2500)), [agent("a", 4), agent("b", 4)], "hold 2 of them at most"),  # memory
        (gang(2, Resources(1, 256, 1)), [agent("g", 4, gpus=1), agent("h", 4, gpus=1)], None),
        (
            gang(3, Resources(2.5, 256, 1)),
            [agent("g", 4, gpus=3), agent("h", 4, gpus=3)],
            "hold 2 of them at most",
        ),
        (
            gang(2, Resources(2, 1024), ps=2, ps_resources=Resources(2, 1024)),
            [agent("a", 4), agent("b", 4)],
            None,
        ),
    ],
)
def test_never_fits(request_: GangRequest, capacities: list[AgentOffer], expected: str | None) -> None:
    why = never_fits(request_, capacities)
    if expected is None:
        assert why is None
    else:
        assert why is not None and expected in why


def test_a_gang_said_never_to_fit_is_never_placed_on_the_whole_agents() -> None:
    """``never_fits`` is a necessary condition: whatever it refuses, placement on the agents'
    whole capacities (nothing else running) cannot place either."""
    rng = random.Random(33)
    refused = 0
    for _ in range(400):
        agents = [
            agent(
                f"a{i}",
                rng.choice([2, 4, 6]),
                rng.choice([1024, 4096]),
                ports=((31000, 31000 + rng.randint(0, 4)),),
            )
            for i in range(rng.randint(1, 4))
        ]
        request = gang(
            rng.randint(1, 6),
            Resources(rng.choice([0.5, 1, 2.5, 3]), rng.choice([256, 1024, 3000])),
            ps=rng.randint(0, 2),
            ps_resources=Resources(rng.choice([0.5, 1, 2]), rng.choice([256, 2048])),
        )
        if never_fits(request, agents) is not None:
            refused += 1
            assert not isinstance(place_gang(request, agents), GangFit), (request, agents)
    assert refused > 50, "the draw exercises refusals"


# ---- FIFO with backfill ----------------------------------------------------------------------


def test_backfill_without_head_or_before_the_bound_uses_everything() -> None:
    offers = [agent("a", 2), agent("b", 2)]
    big = replace(gang(8), job="big")
    assert backfill_views(None, 0, offers, 60).views == tuple(offers)
    early = backfill_views(big, 5, offers, 60)
    assert early.views == tuple(offers) and early.note == ""


def test_backfill_after_the_bound_keeps_what_the_head_can_use() -> None:
    offers = [agent("a", 2), agent("b", 2), agent("g", 8, gpus=1)]
    big = replace(gang(8), job="big")  # cpu only: cannot use the GPU agent
    late = backfill_views(big, 61, offers, 60)
    assert [v.agent_id for v in late.views] == ["g"]
    assert "big" in late.note


def test_a_long_waiting_head_drains_only_the_fewest_freest_agents_that_hold_it() -> None:
    """Two 8-GPU tasks wait: the two freest GPU agents (8 GPUs each when empty) are kept for
    them; the rest of the cluster keeps backfilling."""
    free = {"a": 2, "b": 6, "c": 4, "d": 1}
    offers = [agent(n, 32, 65536, gpus=g) for n, g in free.items()]
    capacities = [agent(n, 32, 65536, gpus=8) for n in free]
    head = replace(gang(2, Resources(8, 8192, 8)), job="big")
    assert drain_set(head, offers, capacities) == {"b", "c"}
    late = backfill_views(head, 61, offers, 60, capacities=capacities)
    assert sorted(v.agent_id for v in late.views) == ["a", "d"]
    assert late.note == "big has waited 61 s for resources; 2 agent(s) are kept for it"
    # Unknown capacities, or capacities that cannot hold it: every agent it can use drains.
    assert drain_set(head, offers, ()) == set(free)
    assert drain_set(head, offers, capacities[:1]) == set(free)


def test_backfill_leaves_the_heads_placement_alone_when_it_fits() -> None:
    offers = [agent("a", 4), agent("b", 4)]
    head = replace(gang(4), job="head")  # packs onto one agent
    rest = backfill_views(head, 0, offers, 60)
    free = sorted((v.agent_id, v.cpus) for v in rest.views)
    assert free == [("a", 0), ("b", 4)]  # equal agents: the lower id


def test_remove_ports() -> None:
    assert remove_ports(((10, 20),), {10, 15, 20}) == ((11, 14), (16, 19))
    assert remove_ports(((10, 10), (12, 13)), {10}) == ((12, 13),)


# ---- properties over random inputs ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_random_gangs_respect_every_rule(seed: int) -> None:
    rng = random.Random(seed)
    offers = [
        agent(
            f"a{i:03}",
            rng.choice([0.5, 1, 2, 4, 8]),
            rng.choice([512, 2048, 8192]),
            gpus=rng.choice([0, 0, 0, 1, 2]),
            ports=((31000 + 10 * i, 31000 + 10 * i + rng.randint(0, 4)),),
            rack=f"r{i % 3}",
        )
        for i in range(rng.randint(1, 30))
    ]
    shapes = [Resources(0.5, 256), Resources(1, 1024), Resources(2, 512), Resources(1, 1024, 1)]
    slots = tuple(SlotRequest(TaskKey(Role.WORKER, i), rng.choice(shapes)) for i in range(rng.randint(1, 24)))
    constraints = (c("rack", ConstraintOperator.NOT_IN, "r1"),) if rng.random() < 0.3 else ()
    strategy = rng.choice(list(PlacementStrategy))
    request = GangRequest("job", 0, slots, strategy, constraints)
    fit = place_gang(request, offers)
    shuffled = offers[:]
    rng.shuffle(shuffled)
    assert place_gang(request, shuffled) == fit
    if isinstance(fit, NoFit):
        return
    assert sorted(a.key for a in fit.assignments) == sorted(s.key for s in slots)
    by_id = {o.agent_id: o for o in offers}
    used: dict[str, list[Resources]] = {}
    for a in fit.assignments:
        view = by_id[a.agent_id]
        assert any(b <= a.port <= e for b, e in view.ports)
        assert matches(view.attributes, constraints)
        assert (a.resources.gpus > 0) == (view.gpus > 0), "GPU tasks on GPU agents, others off them"
        used.setdefault(a.agent_id, []).append(a.resources)
    for agent_id, taken in used.items():
        view = by_id[agent_id]
        assert sum(r.cpus for r in taken) <= view.cpus + 1e-6
        assert sum(r.mem_mib for r in taken) <= view.mem_mib
        assert sum(r.gpus for r in taken) <= view.gpus
    ports = [(a.agent_id, a.port) for a in fit.assignments]
    assert len(ports) == len(set(ports))
