"""The closed vocabularies hold together: every reason a backend or the lifecycle can give is
a ``Reason``, every ``Reason`` is a token the status schema accepts, and records keep them."""

from __future__ import annotations

import json
import re

import pytest

from tfdeclare.core.enums import Reason
from tfdeclare.core.run.record import Condition, ConditionType
from tfdeclare.core.run.tasks import UnplacedReason
from tfdeclare.core.spec.schema import schema_text


def test_every_unplaced_reason_is_a_job_reason() -> None:
    for unplaced in UnplacedReason:
        assert Reason(unplaced) == unplaced.value


def test_every_reason_is_a_token_the_status_schema_accepts() -> None:
    schema = json.loads(schema_text("status"))
    pattern = schema["properties"]["conditions"]["items"]["properties"]["reason"]["pattern"]
    for reason in Reason:
        assert re.fullmatch(pattern, reason.value), reason


@pytest.mark.parametrize("reason", list(Reason))
def test_a_condition_keeps_its_reason_through_json(reason: Reason) -> None:
    condition = Condition(ConditionType.READY, "False", reason, "m", 1.0)
    again = Condition.from_json(json.loads(json.dumps(condition.to_json())))
    assert again == condition
    assert again.reason is reason


def test_an_unknown_reason_in_a_record_is_refused() -> None:
    data = Condition(ConditionType.READY, "False", Reason.CREATED, "m", 1.0).to_json()
    data["reason"] = "SomethingElse"
    with pytest.raises(ValueError, match="SomethingElse"):
        Condition.from_json(data)


def test_only_reasons_that_need_a_change_stall_a_job() -> None:
    stalled = {r for r in Reason if r.stalled}
    assert stalled == {
        Reason.UNSCHEDULABLE,
        Reason.LAUNCH_REFUSED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        Reason.DEADLINE_EXCEEDED,
        Reason.PERMANENT_EXIT_CODE,
        Reason.TASK_FAILED,
        Reason.PLATFORM_RESTART_LIMIT_EXCEEDED,
        Reason.TERMINAL_ERROR,
    }


def test_a_status_document_holds_plain_strings_only() -> None:
    """Status files are dumped with a safe YAML dumper, which knows no enums."""
    import yaml

    from tfdeclare.core.run.record import JobRecord
    from tfdeclare.core.run.status import conditions

    record = JobRecord(name="a", uid="u", canonical={}, spec_hash="h", reason=Reason.BACKING_OFF)
    record = record.evolve(conditions=conditions(record, 1.0))
    yaml.safe_dump([c.to_json() for c in record.conditions])
    yaml.safe_dump(record.to_json())
