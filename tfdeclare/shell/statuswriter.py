"""Status files: ``<status-dir>/<name>.yaml``, written atomically and only when they change.

Job names are DNS labels (checked again here), so a file name can never leave the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tfdeclare.core.spec.names import is_job_name
from tfdeclare.files import remove, write_atomic

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class StatusWriter:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._last: dict[str, dict[str, Any]] = {}  # what was written, less updatedAt

    def path(self, name: str) -> Path:
        if not is_job_name(name):
            raise ValueError(f"{name!r} is not a job name")
        return self.root / f"{name}.yaml"

    def write(self, document: dict[str, Any]) -> bool:
        """Write unless only ``updatedAt`` would change; says whether it wrote."""
        name = document["name"]
        comparable = {k: v for k, v in document.items() if k != "updatedAt"}
        if self._last.get(name) == comparable and self.path(name).exists():
            return False
        # libyaml's emitter: PyYAML's own took 1.8 s for the status of a 2,000-task job
        text = yaml.dump(
            document, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, default_flow_style=False
        )
        write_atomic(self.path(name), text.encode("utf-8"))
        self._last[name] = comparable
        return True

    def written(self, name: str) -> bool:
        """Whether this writer has written the job's status file (it is the only writer)."""
        return name in self._last

    def remove(self, name: str) -> None:
        remove(self.path(name))
        self._last.pop(name, None)

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            data = yaml.safe_load(self.path(name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data if isinstance(data, dict) else None

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.yaml") if is_job_name(p.stem))
