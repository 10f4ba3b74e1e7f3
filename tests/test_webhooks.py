"""Webhooks (``tfdeclare/daemon/webhooks.py``): the config section, delivery to a real local
HTTP server with retries and backoff, a bounded queue that never blocks the caller, secrets
never logged, and the daemon's loop posting the phases its jobs enter."""

from __future__ import annotations

import json
import logging
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.controller_world import World, job_text
from tfdeclare.backends import registry
from tfdeclare.core.config import WebhookConfig
from tfdeclare.core.enums import Phase, Role, SecretSource
from tfdeclare.core.spec.secrets import SecretRef
from tfdeclare.daemon import webhooks
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import FolderSource
from tfdeclare.daemon.webhooks import Notifier, PhaseChange, WebhookResult

SECRET = "s3cr3t-token-value"


class Receiver:
    """A real HTTP server on 127.0.0.1 that answers each POST with the next of ``answers``
    (then 200), optionally holding requests until ``release`` is set."""

    def __init__(self, answers: list[int] | None = None, hold: bool = False) -> None:
        self.answers = list(answers or [])
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.changed = threading.Condition()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.release.wait(30)
                with receiver.changed:
                    code = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.requests.append((dict(self.headers), body))
                    receiver.changed.notify_all()
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # polled often, so that close() (shutdown) returns at once rather than after 0.5 s
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook?token={SECRET}"

    def wait(self, count: int, timeout: float = 10.0) -> list[tuple[dict[str, str], dict[str, Any]]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.requests) >= count, timeout), self.requests
            return list(self.requests)

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhooks, "BACKOFF_INITIAL_S", 0.01)


class Results:
    def __init__(self) -> None:
        self.counts: Counter[WebhookResult] = Counter()
        self.changed = threading.Condition()

    def __call__(self, result: WebhookResult) -> None:
        with self.changed:
            self.counts[result] += 1
            self.changed.notify_all()

    def wait(self, result: WebhookResult, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.counts[result] >= count, 10), self.counts


def change(job: str = "a", phase: Phase = Phase.FAILED) -> PhaseChange:
    return PhaseChange(job, phase, Phase.RUNNING, 1796280000.0, "9a1b2c3", 3, "worker-0 exited with 1")


def test_config_section_parsed_with_defaults_and_secret_references() -> None:
    text = textwrap.dedent(
        """\
        webhooks:
          - url: https://hooks.example.com/t
            phases: [Succeeded, Failed]
            headers: {Authorization: {secretRef: {env: HOOK_TOKEN}}, X-Team: vision}
          - name: chat
            url: {secretRef: {file: chat-url}}
            timeoutSeconds: 2
        """
    )
    config, problems = registry.parse_config_file("c.yaml", text.encode(), "/cfg")
    assert problems == [] and config is not None
    first, second = config.webhooks
    assert first == WebhookConfig(
        "webhook 1",
        "https://hooks.example.com/t",
        {"Authorization": SecretRef(SecretSource.ENV, "HOOK_TOKEN"), "X-Team": "vision"},
        frozenset({Phase.SUCCEEDED, Phase.FAILED}),
        5.0,
        5,
    )
    assert second.name == "chat" and second.url == SecretRef(SecretSource.FILE, "/cfg/chat-url")
    assert second.phases == frozenset(Phase) and second.timeout_s == 2.0 and second.max_attempts == 5


def test_config_errors_have_file_line_and_path() -> None:
    text = "webhooks:\n  - url: ftp://x\n  - url: http://y\n    phases: [Done]\n"
    _, problems = registry.parse_config_file("c.yaml", text.encode(), "/cfg")
    shown = [p.format() for p in problems]
    assert any(s.startswith("c.yaml:2:") and "$.webhooks[0].url" in s for s in shown), shown
    assert any(s.startswith("c.yaml:4:") and "$.webhooks[1].phases[0]" in s for s in shown), shown


def test_delivered_after_retries_with_secret_header_never_logged(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", f"Bearer {SECRET}")
    receiver.answers = [503, 500]
    results = Results()
    hook = WebhookConfig(
        "ops",
        receiver.url,
        {"Authorization": SecretRef(SecretSource.ENV, "HOOK_TOKEN")},
        frozenset({Phase.FAILED}),
    )
    notifier = Notifier((hook,), results)
    caplog.set_level(logging.INFO, logger="tfdeclare")
    try:
        notifier.notify(change(phase=Phase.RUNNING))  # not a phase this webhook wants
        notifier.notify(change())
        results.wait(WebhookResult.DELIVERED, 1)
    finally:
        notifier.close()
    requests = receiver.wait(3)
    assert len(requests) == 3, "two retries, then delivered"
    headers, body = requests[-1]
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Tfdeclare-Delivery"] == body["id"]
    assert {k: v for k, v in body.items() if k != "id"} == {
        "apiVersion": "tfdeclare/v1",
        "kind": "JobPhaseChanged",
        "job": "a",
        "phase": "Failed",
        "previousPhase": "Running",
        "time": "2026-12-03T06:40:00Z",
        "revision": "9a1b2c3",
        "restarts": 3,
        "message": "worker-0 exited with 1",
    }
    assert {b["id"] for _, b in requests} == {body["id"]}, "a retry is the same notice"
    assert "ops: job a Failed answered HTTP 503; retrying" in caplog.text
    assert SECRET not in caplog.text and "127.0.0.1" not in caplog.text


def test_a_final_answer_is_not_retried_and_a_missing_secret_is_reported(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.answers = [404]
    results = Results()
    hooks = (
        WebhookConfig("gone", receiver.url),
        WebhookConfig("unset", SecretRef(SecretSource.ENV, "TFDECLARE_TEST_NO_SUCH_VARIABLE")),
    )
    notifier = Notifier(hooks, results)
    try:
        notifier.notify(change())
        results.wait(WebhookResult.FAILED, 2)
    finally:
        notifier.close()
    assert len(receiver.requests) == 1
    assert "gone: job a Failed answered HTTP 404; not retried" in caplog.text
    assert (
        "unset: not sent (job a Failed): webhook: the variable TFDECLARE_TEST_NO_SUCH_VARIABLE is not set"
        in (caplog.text)
    )


def test_attempts_are_bounded() -> None:
    failing = Receiver([503] * 10)
    results = Results()
    notifier = Notifier((WebhookConfig("down", failing.url, max_attempts=3),), results)
    try:
        notifier.notify(change())
        results.wait(WebhookResult.FAILED, 1)
    finally:
        notifier.close()
        failing.close()
    assert len(failing.requests) == 3


def test_a_stuck_receiver_never_blocks_notify_and_the_queue_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(webhooks, "QUEUE_SIZE", 50)  # the same bound as 1,000, at a twentieth of the posts
    stuck = Receiver(hold=True)
    results = Results()
    notifier = Notifier((WebhookConfig("slow", stuck.url, timeout_s=30),), results)
    try:
        notifier.notify(change("first"))
        stuck.wait(0)
        for i in range(webhooks.QUEUE_SIZE + 10):  # returns at once, though nothing is answered
            notifier.notify(change(f"j{i}"))
        results.wait(WebhookResult.DROPPED, 10)
        stuck.release.set()
        with results.changed:  # every notice is accounted for once: delivered or dropped
            assert results.changed.wait_for(
                lambda: (
                    results.counts[WebhookResult.DROPPED] + results.counts[WebhookResult.DELIVERED]
                    >= webhooks.QUEUE_SIZE + 11
                ),
                10,
            )
    finally:
        notifier.close()
        stuck.close()
    jobs = [body["job"] for _, body in stuck.requests]
    assert jobs[-1] == f"j{webhooks.QUEUE_SIZE + 9}", "the newest notices are kept"
    assert len(jobs) == results.counts[WebhookResult.DELIVERED] >= webhooks.QUEUE_SIZE
    assert sum(results.counts.values()) == webhooks.QUEUE_SIZE + 11


def test_the_daemon_posts_the_phases_its_jobs_enter(tmp_path: Path, receiver: Receiver) -> None:
    world = World(tmp_path)
    world.write("a", job_text("a", "chief: {count: 1, resources: {cpus: 0.5, mem: 64}}"))
    options = DaemonOptions(
        interval_s=3600, debounce_s=0.0, settle_s=0.0, webhooks=(WebhookConfig("ops", receiver.url),)
    )
    daemon = Daemon(
        FolderSource(world.specs, [world.root / "state", world.status_dir]),
        world.controller,
        world.files,
        world.status_dir,
        options,
        clock=world.clock,
    )
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        world.controller.wait_for_pass(0, lambda: world.record("a").phase is Phase.RUNNING)
        world.backend.finish(world.task("a", Role.CHIEF).task_id, 0)
        world.controller.wait_for_pass(0, lambda: world.record("a").phase is Phase.SUCCEEDED)
        requests = receiver.wait(3)
    finally:
        daemon.stop()
        thread.join(10)
        daemon.source.close()
    phases = [(body["previousPhase"], body["phase"]) for _, body in requests]
    assert phases == [(None, "Pending"), ("Pending", "Running"), ("Running", "Succeeded")]
    assert [(e.previous, e.phase) for e in daemon.shown.events] == [
        (Phase.RUNNING, Phase.SUCCEEDED),
        (Phase.PENDING, Phase.RUNNING),
        (None, Phase.PENDING),
    ]
    assert 'tfdeclare_webhook_deliveries_total{result="delivered"} 3.0' in daemon.metrics_text()
