"""The daemon's Prometheus metrics, kept in memory and rendered in the text format."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.passes = 0
        self.pass_seconds_sum = 0.0
        self.pass_buckets = [0] * len(_BUCKETS)
        self.last_pass_time = 0.0
        self.pass_errors = 0
        self.source_errors = 0
        self.launched = 0
        self.stopped = 0
        self.jobs_by_phase: Mapping[str, int] = {}
        self.tasks_by_state: Mapping[str, int] = {}
        self.restarts: Mapping[str, int] = {}
        self.applied_revision: str | None = None
        self.attempted_revision: str | None = None

    def observe_pass(self, seconds: float, at: float, launched: int, stopped: int, errors: int) -> None:
        with self._lock:
            self.passes += 1
            self.pass_seconds_sum += seconds
            for i, bound in enumerate(_BUCKETS):
                if seconds <= bound:
                    self.pass_buckets[i] += 1
            self.last_pass_time = at
            self.launched += launched
            self.stopped += stopped
            self.pass_errors += errors

    def set_jobs(self, phases: Mapping[str, str], tasks: Counter[str], restarts: Mapping[str, int]) -> None:
        with self._lock:
            self.jobs_by_phase = Counter(phases.values())
            self.tasks_by_state = dict(tasks)
            self.restarts = dict(restarts)

    def render(self) -> str:
        with self._lock:
            out: list[str] = []

            def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
                out.append(f"# HELP {name} {help_text}")
                out.append(f"# TYPE {name} {kind}")
                out.extend(f"{name}{labels} {value:g}" for labels, value in samples)

            metric(
                "tfdeclare_reconcile_passes_total", "counter", "Reconcile passes run.", [("", self.passes)]
            )
            name = "tfdeclare_reconcile_pass_duration_seconds"
            out.append(f"# HELP {name} How long reconcile passes take.")
            out.append(f"# TYPE {name} histogram")
            out.extend(
                f'{name}_bucket{{le="{bound:g}"}} {count}'
                for bound, count in zip(_BUCKETS, self.pass_buckets, strict=True)
            )
            out.append(f'{name}_bucket{{le="+Inf"}} {self.passes}')
            out.append(f"{name}_sum {self.pass_seconds_sum:g}")
            out.append(f"{name}_count {self.passes}")
            metric(
                "tfdeclare_last_pass_timestamp_seconds",
                "gauge",
                "When the last pass finished (unix time).",
                [("", self.last_pass_time)],
            )
            metric(
                "tfdeclare_reconcile_errors_total",
                "counter",
                "Backend errors met by passes.",
                [("", self.pass_errors)],
            )
            metric(
                "tfdeclare_source_errors_total",
                "counter",
                "Failures to read the source (fetch, clone, folder).",
                [("", self.source_errors)],
            )
            metric("tfdeclare_tasks_launched_total", "counter", "Tasks launched.", [("", self.launched)])
            metric("tfdeclare_tasks_stopped_total", "counter", "Task stops requested.", [("", self.stopped)])
            metric(
                "tfdeclare_jobs",
                "gauge",
                "Jobs by phase.",
                [(f'{{phase="{_escape(p)}"}}', n) for p, n in sorted(self.jobs_by_phase.items())],
            )
            metric(
                "tfdeclare_tasks",
                "gauge",
                "Tasks of the current attempts by state.",
                [(f'{{state="{_escape(s)}"}}', n) for s, n in sorted(self.tasks_by_state.items())],
            )
            metric(
                "tfdeclare_job_restarts",
                "gauge",
                "Restarts after failures, per job.",
                [(f'{{job="{_escape(j)}"}}', n) for j, n in sorted(self.restarts.items())],
            )
            revisions = []
            if self.applied_revision:
                revisions.append((f'{{revision="{_escape(self.applied_revision)}",kind="applied"}}', 1.0))
            if self.attempted_revision:
                revisions.append((f'{{revision="{_escape(self.attempted_revision)}",kind="attempted"}}', 1.0))
            metric(
                "tfdeclare_revision_info",
                "gauge",
                "The last applied and attempted source revisions.",
                revisions,
            )
            return "\n".join(out) + "\n"
