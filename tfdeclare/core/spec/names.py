"""Job names: lowercase DNS labels, so a name can never escape a folder it names a file in."""

from __future__ import annotations

import re

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def is_job_name(name: str) -> bool:
    return len(name) <= 63 and bool(_NAME.match(name))
