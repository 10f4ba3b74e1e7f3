"""The emulator's allocator among several frameworks, as the upstream hierarchical allocator
orders them: DRF over roles, then over frameworks within a role; refuse filters and
suppression per framework and role; only what nobody holds is offered."""

from __future__ import annotations

from dataclasses import dataclass

from tests.mesos_emulator.allocator import Allocator
from tests.mesos_emulator.clock import ManualClock
from tests.mesos_emulator.resources import Resources


@dataclass
class FakeAgent:
    id: str
    total: Resources
    available: Resources
    has_gpus: bool = False
    schedulable: bool = True


def agents(n: int, spec: str = "cpus:4;mem:4096") -> list[FakeAgent]:
    return [FakeAgent(f"a{i}", Resources.parse(spec), Resources.parse(spec)) for i in range(n)]


def allocator(*frameworks: tuple[str, list[str]]) -> tuple[Allocator, ManualClock]:
    clock = ManualClock()
    made = Allocator(clock, 1.0, True, seed=0)
    for fid, roles in frameworks:
        made.add_framework(fid, roles, (), gpu_aware=False)
    return made, clock


def test_the_framework_with_the_smaller_dominant_share_is_offered_first() -> None:
    alloc, _ = allocator(("fa", ["*"]), ("fb", ["*"]))
    # fa holds 3 of the cluster's 8 cpus: fb (share 0) gets the first agent, then fb's share
    # (4/8) is larger than fa's (3/8), so fa gets the second.
    grants = alloc.allocate(agents(2), [("fa", "*", Resources.parse("cpus:3;mem:128"))])
    assert [g[0] for g in grants] == ["fb", "fa"]
    # The dominant share is the largest of the resource kinds: mem decides here.
    grants = alloc.allocate(
        agents(1), [("fa", "*", Resources.parse("cpus:1")), ("fb", "*", Resources.parse("mem:2048"))]
    )
    assert [g[0] for g in grants] == ["fa"]


def test_roles_are_sorted_before_the_frameworks_in_them() -> None:
    alloc, _ = allocator(("fa", ["ml"]), ("fb", ["ml"]), ("fc", ["batch"]))
    held = [("fa", "ml", Resources.parse("cpus:1")), ("fc", "batch", Resources.parse("cpus:1.5"))]
    # Role ml holds 1 cpu, batch 1.5: ml first; within ml, fb (0) before fa (1).
    [first] = alloc.allocate(agents(1, "cpus:8;mem:4096"), held)
    assert first[:2] == ("fb", "ml")


def test_suppressed_and_filtered_frameworks_are_skipped_and_revive_clears_filters() -> None:
    alloc, clock = allocator(("fa", ["*"]), ("fb", ["*"]))
    alloc.suppress("fa", [])
    assert [g[0] for g in alloc.allocate(agents(2))] == ["fb", "fb"]
    alloc.revive("fa", [])
    free = Resources.parse("cpus:4;mem:4096")
    alloc.refuse("fb", "*", "a0", free, 5.0)
    grants = {g[2]: g[0] for g in alloc.allocate(agents(2), [("fa", "*", Resources.parse("cpus:6"))])}
    assert grants["a0"] == "fa"  # fb refused a0 (its filter contains what a0 has free)
    clock.advance(6.0)
    grants = {g[2]: g[0] for g in alloc.allocate(agents(2), [("fa", "*", Resources.parse("cpus:6"))])}
    assert set(grants.values()) == {"fb"}  # the filter expired: fb has the smaller share


def test_reserved_resources_go_only_to_their_role_and_the_rest_to_the_next_framework() -> None:
    total = Resources.parse("cpus(ml):2;cpus:2;mem:1024;gpus(ml):1")
    assert (
        total.describe()
        == "cpus(reservations: [(STATIC,ml)]):2; cpus:2; mem:1024; gpus(reservations: [(STATIC,ml)]):1"
    )
    assert total.scalar("cpus") == 4.0 and total.for_role("*").describe() == "cpus:2; mem:1024"
    agent = FakeAgent("a0", total, total.copy(), has_gpus=True)
    alloc, _ = allocator(("fa", ["*"]), ("fb", ["ml"]))
    for fid in ("fa", "fb"):
        alloc.frameworks[fid].gpu_aware = True
    # fa is first (smaller share): it gets the unreserved part; fb then gets what is reserved to ml.
    grants = alloc.allocate([agent], [("fb", "ml", Resources.parse("cpus:0.5"))])
    assert [(g[0], g[1], str(g[3])) for g in grants] == [
        ("fa", "*", "cpus:2; mem:1024"),
        ("fb", "ml", "cpus(reservations: [(STATIC,ml)]):2; gpus(reservations: [(STATIC,ml)]):1"),
    ]
    # The agent's --default_role reserves what has no role; JSON in both formats.
    pool = Resources.parse("cpus:4;gpus:1", default_role="ml")
    pre = {r["name"]: r for r in pool.to_json("ml", pre_refinement=True)}
    post = {r["name"]: r for r in pool.to_json("ml", pre_refinement=False)}
    assert pre["gpus"]["role"] == "ml" and "reservations" not in pre["gpus"]
    assert post["gpus"]["reservations"] == [{"type": "STATIC", "role": "ml"}] and "role" not in post["gpus"]
    assert post["cpus"]["allocation_info"] == {"role": "ml"}
    [listed] = Resources.parse("gpus(ml):1").to_json(None, pre_refinement=False, endpoint=True)
    assert listed["role"] == "ml" and listed["reservations"] == [{"type": "STATIC", "role": "ml"}]
