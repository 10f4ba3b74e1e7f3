"""The daemon's Prometheus metrics: what the loop counts, kept in memory, exposed through
``prometheus-client`` (a custom collector reading this state at scrape time, the process
collector and ``tfdeclare_build_info``).

Values are exact: the client writes floats with all their digits (a last-pass timestamp of
``1796280000.123`` reads ``1.796280000123e+09``, a counter of 1,234,567 reads
``1.234567e+06``), never rounded as ``%g`` would.
"""

from __future__ import annotations

import platform
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tfdeclare import __version__
from tfdeclare.core.run.progress import Progress

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """What the daemon's loop counts; thread-safe (the loop writes, the HTTP threads read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.passes = 0
        self.pass_seconds_sum = 0.0
        self.pass_buckets = [0] * len(_BUCKETS)  # cumulative: passes at most each bound
        self.last_pass_time = 0.0
        self.pass_errors = 0
        self.source_errors = 0
        self.launched = 0
        self.stopped = 0
        self.jobs_by_phase: Mapping[str, int] = {}
        self.tasks_by_state: Mapping[str, int] = {}
        self.restarts: Mapping[str, int] = {}
        self.preemptions: Mapping[str, int] = {}  # per job, apart from restarts
        self.suspensions: Mapping[str, int] = {}
        self.progress: Mapping[str, Progress] = {}  # per job that has some (issue 34)
        self.clock: Callable[[], float] = time.time  # for ages at scrape time
        self.platform_restarts: Mapping[str, int] = {}  # per job, apart from restarts
        self.applied_revision: str | None = None
        self.attempted_revision: str | None = None
        self.storage_writable: Mapping[str, bool] = {}  # "state"/"status" -> can take a write
        self.write_failures = 0  # files the last pass could not write (and a failed pass)
        self.webhook_results: Counter[str] = Counter()  # WebhookResult value -> deliveries
        self.problems_by_kind: Mapping[str, int] = {}  # standing source problems (ProblemKind value -> count)
        self.backend_connected: Mapping[str, bool] = {}  # backend name -> reaches its cluster (last pass)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)

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

    def set_jobs(
        self,
        phases: Mapping[str, str],
        tasks: Counter[str],
        restarts: Mapping[str, int],
        preemptions: Mapping[str, int] | None = None,
        suspensions: Mapping[str, int] | None = None,
        progress: Mapping[str, Progress] | None = None,
        platform_restarts: Mapping[str, int] | None = None,
    ) -> None:
        with self._lock:
            self.progress = dict(progress or {})
            self.jobs_by_phase = Counter(phases.values())
            self.tasks_by_state = dict(tasks)
            self.restarts = dict(restarts)
            self.preemptions = dict(preemptions or {})
            self.suspensions = dict(suspensions or {})
            self.platform_restarts = dict(platform_restarts or {})

    def set_storage(self, writable: Mapping[str, bool], write_failures: int) -> None:
        with self._lock:
            self.storage_writable = dict(writable)
            self.write_failures = write_failures

    def set_backend_connected(self, backend: str, connected: bool) -> None:
        with self._lock:
            self.backend_connected = {**self.backend_connected, backend: connected}

    def set_problems(self, by_kind: Mapping[str, int]) -> None:
        with self._lock:
            self.problems_by_kind = dict(by_kind)

    def count_webhook(self, result: str) -> None:
        with self._lock:
            self.webhook_results[result] += 1

    def render(self) -> str:
        return generate_latest(self.registry).decode()

    def samples(self) -> list[Metric]:
        with self._lock:
            return list(self._families())

    def _families(self) -> Iterator[Metric]:
        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, value=value)

        yield counter("tfdeclare_reconcile_passes", "Reconcile passes run.", self.passes)
        yield HistogramMetricFamily(
            "tfdeclare_reconcile_pass_duration_seconds",
            "How long reconcile passes take.",
            buckets=[
                *((repr(bound), count) for bound, count in zip(_BUCKETS, self.pass_buckets, strict=True)),
                ("+Inf", self.passes),
            ],
            sum_value=self.pass_seconds_sum,
        )
        yield GaugeMetricFamily(
            "tfdeclare_last_pass_timestamp_seconds",
            "When the last pass finished (unix time).",
            value=self.last_pass_time,
        )
        yield counter("tfdeclare_reconcile_errors", "Backend errors met by passes.", self.pass_errors)
        yield counter(
            "tfdeclare_source_errors",
            "Failures to read the source (fetch, clone, folder).",
            self.source_errors,
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_source_problems",
            "Source problems standing now, by kind: files that cannot be applied (invalid, unreadable, "
            "refused by policy, a duplicate name), a failed fetch, an unverified commit. 0 once fixed.",
            "kind",
            self.problems_by_kind,
        )
        yield counter("tfdeclare_tasks_launched", "Tasks launched.", self.launched)
        yield counter("tfdeclare_tasks_stopped", "Task stops requested.", self.stopped)
        yield _labelled(GaugeMetricFamily, "tfdeclare_jobs", "Jobs by phase.", "phase", self.jobs_by_phase)
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_tasks",
            "Tasks of the current attempts by state.",
            "state",
            self.tasks_by_state,
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_job_restarts",
            "Restarts after failures, per job.",
            "job",
            self.restarts,
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_storage_writable",
            "Whether the state and status folders can take a write now (0: read-only or full).",
            "folder",
            {kind: int(ok) for kind, ok in self.storage_writable.items()},
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_backend_connected",
            "Whether the backend reached its cluster in the last pass (0: e.g. no Mesos subscription).",
            "backend",
            {name: int(ok) for name, ok in self.backend_connected.items()},
        )
        yield GaugeMetricFamily(
            "tfdeclare_write_failures",
            "Record and status files the last pass could not write (a full or read-only disk).",
            value=self.write_failures,
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_job_preemptions",
            "Times a job of higher priority stopped the job (not counted as restarts), per job.",
            "job",
            self.preemptions,
        )
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_job_suspensions",
            "Times spec.suspend stopped the job (not counted as restarts), per job.",
            "job",
            self.suspensions,
        )
        yield from self._progress_families()
        yield _labelled(
            GaugeMetricFamily,
            "tfdeclare_job_platform_restarts",
            "Restarts of the job for the platform's own events (lost or drained agents, maintenance, "
            "a controller restart): not counted against backoffLimit, per job.",
            "job",
            self.platform_restarts,
        )
        revisions = GaugeMetricFamily(
            "tfdeclare_revision_info",
            "The last applied and attempted source revisions.",
            labels=["revision", "kind"],
        )
        for kind, revision in (("applied", self.applied_revision), ("attempted", self.attempted_revision)):
            if revision:
                revisions.add_metric([revision, kind], 1.0)
        yield revisions
        yield _labelled(
            CounterMetricFamily,
            "tfdeclare_webhook_deliveries",
            "Webhook notifications by outcome (delivered, failed after retries, dropped from a full queue).",
            "result",
            self.webhook_results,
        )
        build = GaugeMetricFamily(
            "tfdeclare_build_info",
            "tfdeclare's version and Python's (always 1).",
            labels=["version", "python"],
        )
        build.add_metric([__version__, platform.python_version()], 1.0)
        yield build

    def _progress_families(self) -> Iterator[Metric]:
        """Each job's progress (``core/run/progress``), where known: its latest step, steps
        per second, latest checkpoint's step and age, and the seconds left to ``totalSteps``."""
        now = self.clock()
        values: dict[str, dict[str, float]] = {
            "step": {},
            "rate": {},
            "checkpoint": {},
            "age": {},
            "left": {},
        }
        for job, seen in sorted(self.progress.items()):
            if seen.step is not None:
                values["step"][job] = seen.step
            if seen.steps_per_second is not None:
                values["rate"][job] = seen.steps_per_second
            if seen.checkpoint is not None and seen.checkpoint.step is not None:
                values["checkpoint"][job] = seen.checkpoint.step
            if seen.checkpoint is not None:
                values["age"][job] = max(0.0, now - seen.checkpoint.at)
            eta = seen.estimated_completion
            if eta is not None:
                values["left"][job] = max(0.0, eta - now)
        for key, name, doc in (
            ("step", "tfdeclare_job_progress_step", "The latest training step seen, per job."),
            ("rate", "tfdeclare_job_steps_per_second", "Training steps per second, per job."),
            ("checkpoint", "tfdeclare_job_checkpoint_step", "The latest checkpoint's step, per job."),
            ("age", "tfdeclare_job_checkpoint_age_seconds", "Seconds since the latest checkpoint, per job."),
            (
                "left",
                "tfdeclare_job_estimated_seconds_left",
                "Seconds until spec.checkpoint.totalSteps at the present rate, per job.",
            ),
        ):
            metric = GaugeMetricFamily(name, doc, labels=["job"])
            for job, value in values[key].items():
                metric.add_metric([job], value)
            yield metric


def _labelled(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    doc: str,
    label: str,
    values: Mapping[str, int],
) -> Metric:
    metric = family(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        metric.add_metric([key], value)
    return metric


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics.samples()
