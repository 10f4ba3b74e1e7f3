"""``/metrics`` through prometheus-client (``tfdeclare/daemon/metrics.py``): the metric names
the docs and dashboards use, exact values (no ``%g`` rounding), the process and build-info
metrics. Parsed back with prometheus-client's own parser."""

from __future__ import annotations

from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from tfdeclare import __version__
from tfdeclare.daemon.metrics import Metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_values_are_exact_and_names_kept() -> None:
    metrics = Metrics()
    at = 1796280000.123456  # %g printed 1.79628e+09: 1.4 hours off
    metrics.observe_pass(0.02, at, 1234567, 3, 0)
    metrics.observe_pass(7.0, at + 1, 1, 0, 2)
    metrics.source_errors = 1000001
    metrics.set_jobs({"a": "Running", "b": "Running", "c": "Failed"}, Counter(running=2), {"a": 1})
    metrics.applied_revision = metrics.attempted_revision = "9a1b2c3"
    metrics.count_webhook("delivered")
    text = metrics.render()
    got = samples(text)
    assert got[("tfdeclare_last_pass_timestamp_seconds", ())] == at + 1
    assert got[("tfdeclare_tasks_launched_total", ())] == 1234568
    assert got[("tfdeclare_source_errors_total", ())] == 1000001
    assert got[("tfdeclare_reconcile_errors_total", ())] == 2
    assert got[("tfdeclare_reconcile_passes_total", ())] == 2
    assert got[("tfdeclare_tasks_stopped_total", ())] == 3
    assert got[("tfdeclare_reconcile_pass_duration_seconds_bucket", (("le", "0.025"),))] == 1
    assert got[("tfdeclare_reconcile_pass_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    assert got[("tfdeclare_reconcile_pass_duration_seconds_sum", ())] == 7.02
    assert got[("tfdeclare_jobs", (("phase", "Running"),))] == 2
    assert got[("tfdeclare_jobs", (("phase", "Failed"),))] == 1
    assert got[("tfdeclare_tasks", (("state", "running"),))] == 2
    assert got[("tfdeclare_job_restarts", (("job", "a"),))] == 1
    assert got[("tfdeclare_revision_info", (("kind", "applied"), ("revision", "9a1b2c3")))] == 1
    assert got[("tfdeclare_webhook_deliveries_total", (("result", "delivered"),))] == 1
    build = [k for k in got if k[0] == "tfdeclare_build_info"]
    assert len(build) == 1 and ("version", __version__) in build[0][1]
    assert got[("process_resident_memory_bytes", ())] > 0
    assert "1.79628e+09" not in text


def test_labels_are_escaped() -> None:
    metrics = Metrics()
    metrics.applied_revision = 'odd"rev\\ision\n'
    got = samples(metrics.render())
    assert got[("tfdeclare_revision_info", (("kind", "applied"), ("revision", 'odd"rev\\ision\n')))] == 1


def test_preemptions_and_suspensions_are_counted_apart_from_restarts() -> None:
    metrics = Metrics()
    metrics.set_jobs(
        {"low": "Suspended", "paused": "Suspended", "high": "Running"},
        Counter(running=1),
        {"low": 0, "paused": 2, "high": 0},
        {"low": 3, "paused": 0, "high": 0},
        {"low": 0, "paused": 1, "high": 0},
    )
    got = samples(metrics.render())
    assert got[("tfdeclare_jobs", (("phase", "Suspended"),))] == 2
    assert got[("tfdeclare_job_preemptions", (("job", "low"),))] == 3
    assert got[("tfdeclare_job_suspensions", (("job", "paused"),))] == 1
    assert got[("tfdeclare_job_restarts", (("job", "low"),))] == 0
    assert got[("tfdeclare_job_restarts", (("job", "paused"),))] == 2


def test_platform_restarts_are_counted_apart_from_restarts() -> None:
    metrics = Metrics()
    metrics.set_jobs(
        {"moved": "Running", "steady": "Running"},
        Counter(running=2),
        {"moved": 1, "steady": 0},
        platform_restarts={"moved": 3, "steady": 0},
    )
    got = samples(metrics.render())
    assert got[("tfdeclare_job_platform_restarts", (("job", "moved"),))] == 3
    assert got[("tfdeclare_job_platform_restarts", (("job", "steady"),))] == 0
    assert got[("tfdeclare_job_restarts", (("job", "moved"),))] == 1
