"""The real-Mesos build's cache is shared by every checkout of the machine: a build whose
executor wrapper names an interpreter that is gone (the venv of a removed checkout) gets the
wrapper rewritten, instead of every task of the real-Mesos tier dying "Executor terminated"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tools.realmesos import build as builder


def test_a_wrapper_naming_a_removed_interpreter_is_rewritten_for_this_one(tmp_path: Path) -> None:
    (tmp_path / "stamp").write_text(builder.sources_digest() + "\n")
    gone = tmp_path / "removed-checkout" / ".venv" / "bin" / "python"
    (tmp_path / "mesos-executor").write_text(f'#!/bin/sh\nexec "{gone}" "$(dirname "$0")/executor.py" "$@"\n')
    assert builder.interpreter_gone(tmp_path)

    assert builder.build(tmp_path) == tmp_path

    wrapper = (tmp_path / "mesos-executor").read_text()
    assert f'exec "{sys.executable}"' in wrapper
    assert os.access(tmp_path / "mesos-executor", os.X_OK)
    assert not builder.interpreter_gone(tmp_path)
    assert not list(tmp_path.glob(".mesos-executor.tmp"))


def test_a_wrapper_naming_a_live_interpreter_is_left_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "stamp").write_text(builder.sources_digest() + "\n")
    text = f'#!/bin/sh\nexec "{sys.executable}" "$(dirname "$0")/executor.py" "$@"\n'
    (tmp_path / "mesos-executor").write_text(text)
    before = (tmp_path / "mesos-executor").stat().st_mtime_ns

    builder.build(tmp_path)

    assert (tmp_path / "mesos-executor").stat().st_mtime_ns == before
