"""Importing the Mesos client and backend has no side effects, and a backend that is not used
starts nothing (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters importing httpx and the backend

PROBE = r"""
import json, logging, signal, sys, threading

def snapshot():
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handlers[int(sig)] = repr(signal.getsignal(sig))
        except (ValueError, OSError):
            pass
    loggers = {name: len(lg.handlers) for name, lg in logging.root.manager.loggerDict.items()
               if isinstance(lg, logging.Logger)}
    return {
        "signals": handlers,
        "threads": sorted(t.name for t in threading.enumerate()),
        "root_handlers": len(logging.root.handlers),
        "logger_handlers": {k: v for k, v in loggers.items() if v},
        "excepthook": repr(sys.excepthook),
        "threading_excepthook": repr(threading.excepthook),
    }

before = snapshot()
import tfdeclare.backends.mesos
import tfdeclare.backends.mesos.auth, tfdeclare.backends.mesos.calls, tfdeclare.backends.mesos.client
import tfdeclare.backends.mesos.errors, tfdeclare.backends.mesos.events, tfdeclare.backends.mesos.info
import tfdeclare.backends.mesos.leader, tfdeclare.backends.mesos.recordio
import tfdeclare.backends.mesos.backend, tfdeclare.backends.mesos.pipeline, tfdeclare.backends.mesos.sandbox
from pathlib import Path
import tempfile
from tfdeclare.backends.mesos.backend import MesosBackend
from tfdeclare.backends.mesos.config import MesosConfig
MesosBackend(Path(tempfile.mkdtemp()), MesosConfig(master="http://127.0.0.1:1"))  # connects lazily
after = snapshot()
kazoo = any(m.startswith("kazoo") for m in sys.modules)
print(json.dumps({"before": before, "after": after, "kazoo": kazoo}))
"""


def test_import_has_no_side_effects() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    result = json.loads(out.stdout)
    assert result["after"] == result["before"]
    assert result["after"]["threads"] == ["MainThread"]
    assert result["kazoo"] is False  # imported only when a zk:// master is started
    assert out.stderr == ""


def test_a_client_that_is_not_started_starts_nothing() -> None:
    probe = (
        "import threading\n"
        "from tfdeclare.backends.mesos import BaseHandler, ClientConfig, FrameworkInfo, SchedulerClient\n"
        "c = SchedulerClient(ClientConfig('127.0.0.1:1', FrameworkInfo(user='u', name='n')), BaseHandler())\n"
        "print(threading.active_count())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "1"
