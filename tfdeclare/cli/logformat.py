"""The text log line of the daemon and of the background controller (``tfdeclare-keeper``).

``LineFormatter`` keeps a record one line whatever it quotes (a spec's file name or value, a
commit subject, a backend's message): its message is written ``visible``. A traceback, added
after the message, keeps its own lines. (Its own module: ``logging`` is not imported by the
commands that never log, such as ``validate``.)
"""

from __future__ import annotations

import logging

from tfdeclare.core.visible import visible


class LineFormatter(logging.Formatter):
    """A log record's message with its control characters written out (``visible``), so that
    a value quoted from a spec or a commit neither forges a log line nor reaches the terminal
    as an escape sequence."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = visible(record.message)
        return super().formatMessage(record)
