"""Golden files of ``tfdeclare convert``: each case under ``tests/golden/convert/`` is a
``manifest.yaml`` and the ``expected.yaml`` that convert writes for it — every comment kept
beside its own key, the comments of what is not carried over left out with it, other
documents as they were. ``UPDATE_GOLDEN=1`` rewrites the expected files after an intended
change (then read the diff)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfdeclare.core.spec.loader import load_file
from tfdeclare.shell.convert import convert_text

CASES = sorted((Path(__file__).parent / "golden" / "convert").iterdir())
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_golden_convert(case: Path) -> None:
    manifest = (case / "manifest.yaml").read_text()
    converted = convert_text(manifest).text
    if UPDATE:
        (case / "expected.yaml").write_text(converted)
    assert converted == (case / "expected.yaml").read_text()
    direct = load_file("manifest.yaml", manifest.encode())
    native = load_file("expected.yaml", converted.encode())
    assert not native.has_errors, [d.format() for d in native.diagnostics]
    assert [j.spec_hash for j in native.jobs] == [j.spec_hash for j in direct.jobs]
