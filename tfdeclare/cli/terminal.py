"""Colour on a terminal, and only there.

``use_color`` decides per stream: never with ``NO_COLOR`` set (https://no-color.org), never for
machine output (``-o json``, ``-o yaml``, ``-o markdown``), never when ``TERM=dumb``; with ``FORCE_COLOR``
set (not ``0``) always; otherwise only when the stream is a terminal. ``painter`` turns the
core's tones into ANSI SGR sequences (eight standard colours, bold, dim: what every terminal
and CI log viewer shows; a library for six codes would cost ``validate`` its start-up time).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from tfdeclare.core.diagnostics import Diagnostic, Severity
from tfdeclare.core.tone import Painter, Tone, plain

_SGR = {
    Tone.ADDED: "32",
    Tone.REMOVED: "31",
    Tone.CHANGED: "33",
    Tone.REPLACED: "35",
    Tone.GOOD: "32",
    Tone.BAD: "1;31",
    Tone.WARN: "33",
    Tone.ACTIVE: "36",
    Tone.STRONG: "1",
    Tone.MUTED: "2",
}
MACHINE_FORMATS = frozenset({"json", "yaml", "markdown"})


def use_color(stream: TextIO, output: str = "text", env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("NO_COLOR") or output in MACHINE_FORMATS:
        return False
    force = env.get("FORCE_COLOR")
    if force is not None and force != "":
        return force != "0"
    if env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def ansi(text: str, tone: Tone) -> str:
    return f"\x1b[{_SGR[tone]}m{text}\x1b[0m" if text else text


def painter(stream: TextIO, output: str = "text") -> Painter:
    """The painter for what a command writes to ``stream`` in the ``output`` format."""
    return ansi if use_color(stream, output) else plain


def diagnostic_line(diagnostic: Diagnostic, paint: Painter) -> str:
    """``PATH:LINE:COL: error: MESSAGE`` with the severity word coloured, as compilers do."""
    text = diagnostic.format()
    word = f": {diagnostic.severity.value}: "
    place, _, rest = text.partition(word)
    tone = Tone.BAD if diagnostic.severity is Severity.ERROR else Tone.WARN
    return f"{paint(place, Tone.STRONG)}: {paint(diagnostic.severity.value, tone)}: {rest}"
