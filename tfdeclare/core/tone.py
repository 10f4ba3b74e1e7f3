"""Tones of output text (what a piece of text *is*: an addition, a failure, ...) and painters
that render them. The core marks text with a tone; whether a tone becomes a colour is the
command line's business (a terminal, ``NO_COLOR``, ``FORCE_COLOR``), so the core stays pure.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from tfdeclare.core.enums import Phase


class Tone(StrEnum):
    ADDED = "added"  # created, a field added
    REMOVED = "removed"  # deleted, a field removed
    CHANGED = "changed"  # updated in place, resized, a field changed
    REPLACED = "replaced"  # restarted, moved
    GOOD = "good"  # valid, succeeded, no changes
    BAD = "bad"  # errors, failed
    WARN = "warn"  # warnings, waiting, restarting
    ACTIVE = "active"  # running
    STRONG = "strong"  # headings, summaries
    MUTED = "muted"  # notes, comments


Painter = Callable[[str, Tone], str]


def plain(text: str, tone: Tone) -> str:  # a Painter that paints nothing
    return text


PHASE_TONES = {
    Phase.PENDING: Tone.WARN,
    Phase.RUNNING: Tone.ACTIVE,
    Phase.RESTARTING: Tone.WARN,
    Phase.SUCCEEDED: Tone.GOOD,
    Phase.FAILED: Tone.BAD,
    Phase.DELETING: Tone.MUTED,
    Phase.SUSPENDED: Tone.MUTED,
}
