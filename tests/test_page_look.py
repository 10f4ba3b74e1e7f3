"""The status page's tones, order and inline Markdown (``daemon.page_look``), as pure
functions, and through ``page.render``: colours by meaning, problems first, code spans on
escaped text."""

from __future__ import annotations

from typing import Any

import pytest

from tfdeclare.daemon import page
from tfdeclare.daemon.page_look import card_order, condition_tone, inline_markdown, phase_tone


def _job(name: str, phase: str, *conditions: tuple[str, str], message: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "phase": phase,
        "message": message,
        "conditions": [{"type": t, "status": s, "reason": "R", "message": ""} for t, s in conditions],
        "tasks": [],
    }


@pytest.mark.parametrize(
    ("kind", "status", "phase", "tone"),
    [
        ("Ready", "True", "Running", "good"),
        ("Ready", "False", "Succeeded", "done"),  # finished well: not red
        ("Ready", "False", "Failed", "bad"),
        ("Ready", "False", "Pending", "wait"),
        ("Ready", "False", "Suspended", "neutral"),
        ("Stalled", "True", "Pending", "bad"),  # True, and bad
        ("Synced", "True", "Running", "good"),
        ("Synced", "False", "Running", "bad"),
        ("Reconciling", "True", "Restarting", "wait"),
        ("Suspended", "True", "Suspended", "neutral"),
        ("Ready", "Unknown", "Running", "neutral"),
        ("SomethingNewer", "True", "Running", "neutral"),
    ],
)
def test_a_condition_is_toned_by_its_meaning(kind: str, status: str, phase: str, tone: str) -> None:
    assert condition_tone(kind, status, phase) == tone


def test_done_and_running_have_their_own_tones() -> None:
    assert phase_tone("Running") == "good" and phase_tone("Succeeded") == "done"
    assert phase_tone("Failed") == "bad" and phase_tone("Pending") == "wait"
    assert phase_tone("NewerPhase") == "neutral"


def test_problems_first_then_by_name() -> None:
    jobs = [
        _job("a-fine", "Running", ("Ready", "True"), ("Synced", "True")),
        _job("b-done", "Succeeded", ("Ready", "False"), ("Synced", "True")),
        _job("c-out-of-sync", "Running", ("Ready", "True"), ("Synced", "False")),
        _job("d-restarting", "Restarting", ("Ready", "False"), ("Reconciling", "True")),
        _job("e-stalled", "Pending", ("Ready", "False"), ("Stalled", "True")),
        _job("f-failed", "Failed", ("Ready", "False"), ("Stalled", "True")),
        _job("g-failed", "Failed", ("Ready", "False")),
        _job("h-waiting", "Pending", ("Ready", "False"), ("Reconciling", "True")),
    ]
    order = [j["name"] for j in sorted(jobs, key=card_order)]
    assert order == [
        "f-failed",
        "g-failed",
        "e-stalled",
        "d-restarting",
        "c-out-of-sync",
        "a-fine",
        "b-done",
        "h-waiting",
    ]
    html = page.render(jobs, [], {"status": "ok"}, 0)
    assert [html.index(f'id="job-{name}"') for name in order] == sorted(
        html.index(f'id="job-{name}"') for name in order
    )


def test_code_spans_on_escaped_text() -> None:
    shown = inline_markdown("see `local` in <b>the config</b>: `<i>x</i>` & `unclosed")
    assert shown == (
        "see <code>local</code> in &lt;b&gt;the config&lt;/b&gt;: <code>&lt;i&gt;x&lt;/i&gt;</code>"
        " &amp; `unclosed"
    )
    assert inline_markdown(None) == ""
    html = page.render(
        [_job("j", "Pending", ("Stalled", "True"), message="needs `gpus`<script>alert(1)</script>")],
        [],
        {"status": "ok"},
        0,
    )
    assert "needs <code>gpus</code>&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html
