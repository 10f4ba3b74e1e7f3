"""Every golden plan case (tests/golden_plans.py) renders exactly its expected text, JSON and
Markdown."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.golden_plans import cases, run_case
from tfdeclare.core.plan.markdown import render_markdown
from tfdeclare.core.plan.planner import Action, PlanReason
from tfdeclare.core.plan.render import plan_json, render_text

UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.name)
def test_golden_plan(case: Path) -> None:
    result = run_case(case)
    text = render_text(result)
    data = json.dumps(plan_json(result), indent=2, ensure_ascii=False) + "\n"
    markdown = render_markdown(result)
    if UPDATE:
        (case / "expected.txt").write_text(text)
        (case / "expected.json").write_text(data)
        (case / "expected.md").write_text(markdown)
    assert text == (case / "expected.txt").read_text()
    assert data == (case / "expected.json").read_text()
    assert markdown == (case / "expected.md").read_text()


def test_every_action_and_reason_has_a_golden_case() -> None:
    seen_actions: set[str] = set()
    seen_reasons: set[str] = set()
    for case in cases():
        data = json.loads((case / "expected.json").read_text())
        for job in data["jobs"]:
            seen_actions.add(job["action"])
            seen_reasons.update(job["reasons"])
    assert {a.value for a in Action} <= seen_actions
    assert {r.value for r in PlanReason} <= seen_reasons
