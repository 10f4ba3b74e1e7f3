"""Webhooks: the daemon posts a JSON notice to each configured URL when a job enters a phase.

``Notifier.notify`` never blocks the reconcile pass: each webhook has its own thread and a
bounded queue (``QUEUE_SIZE``; when full, the oldest notice is dropped, logged and counted).
A delivery is retried with exponential backoff (``BACKOFF_INITIAL_S`` doubling to
``BACKOFF_MAX_S``) on connection errors, 408, 429 and 5xx, up to the webhook's
``maxAttempts``; other answers are final. Secret references (URL, headers) are resolved at each
attempt and never logged: logs and metrics name a webhook by its ``name``, never its URL.

The body (README, "Webhooks")::

    {"apiVersion": "tfdeclare/v1", "kind": "JobPhaseChanged", "id": "<uuid, one per notice>",
     "job": "a", "phase": "Failed", "previousPhase": "Running" | null,
     "time": "2026-12-03T10:00:00Z", "revision": "<commit>" | null, "restarts": 3,
     "message": "..."}

and, to every webhook whatever its ``phases``, when a source problem appears or clears (a
file that cannot be applied, a failed fetch, an unverified commit: ``core.plan.problems``)::

    {"apiVersion": "tfdeclare/v1", "kind": "SourceProblemAppeared" | "SourceProblemCleared",
     "id": "<uuid>", "time": "...", "path": "jobs/a.yaml", "problemKind": "invalid-spec",
     "message": "jobs/a.yaml:4:7: error: ...", "since": "...", "revision": "<commit>" | null,
     "jobs": ["a"], "diagnostics": [...]}

The ``X-Tfdeclare-Event`` header names the ``kind``.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx

from tfdeclare import __version__
from tfdeclare.backends.secrets import SecretUnavailable, read_secret
from tfdeclare.core.config import WebhookConfig
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.problems import Problem
from tfdeclare.core.run.record import rfc3339
from tfdeclare.core.spec.secrets import SecretRef

log = logging.getLogger("tfdeclare.daemon")

QUEUE_SIZE = 1000
BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 60.0
_RETRIED = frozenset({408, 429})


class WebhookResult(StrEnum):
    """What became of one notice to one webhook (the ``result`` label of its metric)."""

    DELIVERED = "delivered"
    FAILED = "failed"  # a final answer, a secret that cannot be read, or attempts used up
    DROPPED = "dropped"  # the queue was full, or the daemon stopped before it was sent


@dataclass(frozen=True, slots=True)
class PhaseChange:
    """A job entered ``phase`` (``previous`` None: a job new to the daemon)."""

    job: str
    phase: Phase
    previous: Phase | None
    at: float
    revision: str | None
    restarts: int
    message: str

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": "tfdeclare/v1",
            "kind": "JobPhaseChanged",
            "id": str(uuid.uuid4()),
            "job": self.job,
            "phase": self.phase.value,
            "previousPhase": self.previous.value if self.previous else None,
            "time": rfc3339(self.at),
            "revision": self.revision,
            "restarts": self.restarts,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class ProblemChange:
    """A source problem appeared (``cleared`` False) or is gone (True) at ``at``."""

    problem: Problem
    cleared: bool
    at: float

    def body(self) -> dict[str, Any]:
        problem = self.problem.to_json()
        return {
            "apiVersion": "tfdeclare/v1",
            "kind": "SourceProblemCleared" if self.cleared else "SourceProblemAppeared",
            "id": str(uuid.uuid4()),
            "time": rfc3339(self.at),
            "path": problem["path"],
            "problemKind": problem["kind"],
            "message": problem["message"],
            "since": problem["since"],
            "revision": problem["revision"],
            "jobs": problem["jobs"],
            "diagnostics": problem["diagnostics"],
        }


def _what(body: dict[str, Any]) -> str:
    """A notice as logs name it (never its URL)."""
    if body["kind"] == "JobPhaseChanged":
        return f"job {body['job']} {body['phase']}"
    return f"{body['kind']} {body['path']}"


def resolve(value: str | SecretRef) -> str:
    """A config value, its secret read now (``SecretUnavailable`` names no value)."""
    return value if isinstance(value, str) else read_secret("webhook", value, os.environ)


class _Webhook:
    """One webhook's queue and delivery thread."""

    def __init__(self, config: WebhookConfig, count: Callable[[WebhookResult], None]) -> None:
        self.config = config
        self._count = count
        self._queue: collections.deque[dict[str, Any]] = collections.deque()
        self._ready = threading.Condition()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"webhook-{config.name}", daemon=True)
        self._thread.start()

    def put(self, body: dict[str, Any]) -> None:
        with self._ready:
            if len(self._queue) >= QUEUE_SIZE:
                dropped = self._queue.popleft()
                log.warning(
                    "%s: %d notices waiting, dropped the oldest (%s)",
                    self.config.name,
                    QUEUE_SIZE,
                    _what(dropped),
                )
                self._count(WebhookResult.DROPPED)
            self._queue.append(body)
            self._ready.notify()

    def close(self, timeout: float) -> None:
        self._stopping.set()
        with self._ready:
            self._ready.notify()
        self._thread.join(timeout)
        with self._ready:
            left = len(self._queue)
            self._queue.clear()
        if left:
            log.warning("%s: %d notices not sent (the daemon stopped)", self.config.name, left)
            for _ in range(left):
                self._count(WebhookResult.DROPPED)

    def _run(self) -> None:
        with httpx.Client(follow_redirects=False) as client:
            while True:
                with self._ready:
                    while not self._queue and not self._stopping.is_set():
                        self._ready.wait()
                    if self._stopping.is_set():
                        return
                    body = self._queue.popleft()  # in flight: no longer the queue's to drop
                self._count(self._deliver(client, body) or WebhookResult.DROPPED)

    def _deliver(self, client: httpx.Client, body: dict[str, Any]) -> WebhookResult | None:
        """One notice, with its retries; None when the daemon stopped meanwhile."""
        name, what = self.config.name, _what(body)
        data = json.dumps(body).encode()
        delay = BACKOFF_INITIAL_S
        for attempt in range(1, self.config.max_attempts + 1):
            try:
                url = resolve(self.config.url)
                headers = {k: resolve(v) for k, v in self.config.headers.items()}
            except SecretUnavailable as err:
                log.error("%s: not sent (%s): %s", name, what, err)
                return WebhookResult.FAILED
            headers = {
                "Content-Type": "application/json",
                "User-Agent": f"tfdeclare/{__version__}",
                "X-Tfdeclare-Event": body["kind"],
                "X-Tfdeclare-Delivery": body["id"],
                **headers,
            }
            try:
                response = client.post(url, content=data, headers=headers, timeout=self.config.timeout_s)
                if 200 <= response.status_code < 300:
                    return WebhookResult.DELIVERED
                problem = f"answered HTTP {response.status_code}"
                retry = response.status_code in _RETRIED or response.status_code >= 500
            except httpx.HTTPError as err:
                problem = f"cannot post: {type(err).__name__}"  # the message may quote the URL
                retry = True
            if not retry:
                log.error("%s: %s %s; not retried", name, what, problem)
                return WebhookResult.FAILED
            if attempt == self.config.max_attempts:
                break
            log.warning("%s: %s %s; retrying in %gs", name, what, problem, delay)
            if self._stopping.wait(delay):
                return None
            delay = min(delay * 2, BACKOFF_MAX_S)
        log.error("%s: %s given up after %d attempts", name, what, self.config.max_attempts)
        return WebhookResult.FAILED


class Notifier:
    """Every configured webhook; ``notify`` queues a phase change for those that want it,
    ``notify_problem`` a source problem for all."""

    def __init__(self, webhooks: tuple[WebhookConfig, ...], count: Callable[[WebhookResult], None]) -> None:
        self._webhooks = [_Webhook(config, count) for config in webhooks]

    def notify(self, change: PhaseChange) -> None:
        body = change.body()
        for webhook in self._webhooks:
            if change.phase in webhook.config.phases:
                webhook.put(dict(body))

    def notify_problem(self, change: ProblemChange) -> None:
        """Queue a problem's appearance or clearance for every webhook."""
        body = change.body()
        for webhook in self._webhooks:
            webhook.put(dict(body))

    def close(self, timeout: float = 5.0) -> None:
        """Stop delivering: a retry waiting is abandoned, a request in flight may finish."""
        for webhook in self._webhooks:
            webhook.close(timeout)
