"""How the status page looks at a glance: pure helpers for ``page.py`` and its template.

- A tone by meaning, never by the word ``True`` or ``False``: a phase's badge (``phase_tone``:
  Running is good, Succeeded is done — a badge of its own, not Running's green —, Failed is
  bad, Pending/Restarting/Deleting wait, Suspended is neutral) and a condition's status
  (``condition_tone``: ``Ready True`` good, ``Stalled True`` bad, ``Ready False`` of a
  Succeeded job done, of a Failed one bad, of a waiting one waiting, ...).
- Problems first (``card_order``): Failed, then Stalled, then Restarting, then any other job
  with a bad condition, then the healthy ones; by name within each.
- Inline Markdown in messages (``inline_markdown``): `code` spans, on text escaped first, so
  nothing a message brings becomes markup.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from itertools import cycle
from typing import Any, assert_never

import markupsafe

from tfdeclare.core.enums import Phase
from tfdeclare.core.run.record import ConditionType


class Look(StrEnum):
    """The tones of the page: CSS classes ``tone-good``, ``tone-bad``, ..."""

    GOOD = "good"
    BAD = "bad"
    DONE = "done"  # finished well: not alarming, not running either
    WAIT = "wait"
    NEUTRAL = "neutral"


_PHASE_LOOKS = {
    Phase.RUNNING: Look.GOOD,
    Phase.SUCCEEDED: Look.DONE,
    Phase.FAILED: Look.BAD,
    Phase.PENDING: Look.WAIT,
    Phase.RESTARTING: Look.WAIT,
    Phase.DELETING: Look.WAIT,
    Phase.SUSPENDED: Look.NEUTRAL,
}


def _phase(value: object) -> Phase | None:
    try:
        return Phase(str(value))
    except ValueError:  # a phase of a newer release: shown, but neutral
        return None


def phase_tone(phase: object) -> str:
    known = _phase(phase)
    return (Look.NEUTRAL if known is None else _PHASE_LOOKS[known]).value


def condition_tone(kind: object, status: object, phase: object) -> str:
    """A condition's tone from its type, its status and its job's phase."""
    known = _phase(phase)
    if status not in ("True", "False"):
        return Look.NEUTRAL.value
    true = status == "True"
    match _condition_type(kind):
        case ConditionType.READY:
            if true:
                return Look.GOOD.value
            return phase_tone(phase) if known is not Phase.RUNNING else Look.WAIT.value
        case ConditionType.STALLED:
            return (Look.BAD if true else Look.GOOD).value
        case ConditionType.SYNCED:  # False: it runs as last applied, not as its files say
            return (Look.GOOD if true else Look.BAD).value
        case ConditionType.RECONCILING:
            return (Look.WAIT if true else Look.NEUTRAL).value
        case ConditionType.SUSPENDED | None:  # suspended on purpose; a type of a newer release
            return Look.NEUTRAL.value
        case unknown:
            assert_never(unknown)


def _condition_type(value: object) -> ConditionType | None:
    try:
        return ConditionType(str(value))
    except ValueError:  # a condition of a newer release: shown, but neutral
        return None


def _conditions(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in job.get("conditions") or () if isinstance(c, Mapping)]


PROBLEM_FREE = 4  # the rank of a job without a problem


def problem_rank(job: Mapping[str, Any]) -> int:
    """0 Failed, 1 Stalled, 2 Restarting, 3 another bad condition, ``PROBLEM_FREE`` healthy."""
    phase = _phase(job.get("phase"))
    if phase is Phase.FAILED:
        return 0
    tones = [condition_tone(c.get("type"), c.get("status"), job.get("phase")) for c in _conditions(job)]
    if any(c.get("type") == ConditionType.STALLED and c.get("status") == "True" for c in _conditions(job)):
        return 1
    if phase is Phase.RESTARTING:
        return 2
    return 3 if Look.BAD.value in tones else PROBLEM_FREE


def card_order(job: Mapping[str, Any]) -> tuple[int, str]:
    """The sort key of a job's card: problems first, then by name."""
    return problem_rank(job), str(job.get("name", ""))


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def inline_markdown(value: object) -> markupsafe.Markup:
    """A message with its `code` spans as ``<code>``: every piece of the text escaped (the
    spans' contents by ``Markup.format``), only our own tag added; never the text marked safe."""
    parts = _CODE_SPAN.split("" if value is None else str(value))  # text, code, text, ...
    code = markupsafe.Markup("<code>{}</code>")
    return markupsafe.Markup("").join(
        code.format(part) if odd else markupsafe.escape(part)
        for odd, part in zip(cycle((False, True)), parts)
    )
