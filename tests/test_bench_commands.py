"""The benchmarks run the product's real commands on files they generate (``make bench``, which
CI does not run): those commands must be ones the product accepts. ``core_bench`` once planned
10,000 files after ``policy.maxJobs`` began refusing more than 3,000 a state folder, and
``make bench`` failed on it unnoticed. Here its plan at the policy's maximum runs once (no
figure is judged: speed is measured in bench/, not in tests)."""

from __future__ import annotations

from pathlib import Path

from bench import core_bench
from bench.common import MAX_JOBS


def test_the_plan_benchmark_plans_what_the_policy_allows(tmp_path: Path) -> None:
    results = core_bench.plan_at_max_jobs(tmp_path, 1)  # a refused plan raises (exit 1)
    assert len(list((tmp_path / "specs-max").iterdir())) == MAX_JOBS
    assert [len(result.samples) for result in results] == [1] * len(results)
