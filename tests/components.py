"""The real components some tests need (contract section 9: a Docker engine, an image
registry (Debian's docker-registry), ZooKeeper, Chromium, zsh and fish, openssl, gpg, root for
a tmpfs). Without one a test skips with one line; under ``CI=true``, where ``.ci/run``
installs and starts them all, it fails instead, so a missing component never hides a test."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, NoReturn

import pytest


def missing(message: str) -> NoReturn:
    """Skip the calling test for want of a component, or fail it under ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: .ci/run installs and starts what the tests need)")
    pytest.skip(message)


def stop_group(process: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
    """Stop a component started in a session of its own: SIGTERM to its process group, then
    SIGKILL when it has not exited within ``grace_s``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace_s)
