"""The real components some tests need (contract section 9: a Docker engine, an image
registry (Debian's docker-registry), ZooKeeper, Chromium, zsh and fish, openssl, gpg, root for
a tmpfs). Without one a test skips with one line; under ``CI=true``, where ``.ci/run``
installs and starts them all, it fails instead, so a missing component never hides a test."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    """Skip the calling test for want of a component, or fail it under ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: .ci/run installs and starts what the tests need)")
    pytest.skip(message)
