"""The log lines of the daemon and of the background controller (``tfdeclare-keeper``): text or,
for the daemon's ``--log-format json``, JSON.

``LineFormatter`` keeps a record one line whatever it quotes (a spec's file name or value, a
commit subject, a backend's message): its message is written ``visible``. A traceback, added
after the message, keeps its own lines. ``JsonFormatter`` writes a record as one JSON object a
line (``json_line``: the exact message, its controls escaped, C1 and U+2028 too). (Its own
module: ``logging`` is not imported by the commands that never log, such as ``validate``.)
"""

from __future__ import annotations

import logging
import time

from tfdeclare.core.visible import json_line, visible


class LineFormatter(logging.Formatter):
    """A log record's message with its control characters written out (``visible``), so that
    a value quoted from a spec or a commit neither forges a log line nor reaches the terminal
    as an escape sequence."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = visible(record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: ``time``, ``level``, ``logger``, ``message`` and, with
    a traceback, ``exception``. Every string keeps its exact value; no character in it acts on
    a terminal or breaks the line for a JavaScript reader (``json_line``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json_line(line)
