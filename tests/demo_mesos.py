"""``make demo-mesos``: the example jobs of specs/ on the Mesos backend, without a cluster.

Starts the Mesos master emulator in the background (``python -m tests.mesos_emulator``: a
master and two agents on this machine speaking the v1 scheduler API; its agents run each task
as a real process, so the jobs train with real TensorFlow), applies ``specs/`` with
``--backend mesos`` until every job has finished, prints their status and stops the emulator,
also when something fails or the demo is interrupted. Everything it writes is under
``.demo-mesos/`` (config, state, status, the agents' sandboxes, the emulator's log).

What differs on a real cluster is in the README ("Mesos" section).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

ROOT = Path(".demo-mesos")
AGENTS = "2"
AGENT_RESOURCES = "cpus:4;mem:16384;ports:[31000-31099]"
START_TIMEOUT_S = 60.0


def _config(master: str) -> str:
    # sharedFilesystem: the emulator's agents run on this machine, so tasks start in their
    # spec file's folder as on the local backend. Short timings suit a demo.
    return (
        "backend: mesos\n"
        "restartBackoff: {initialSeconds: 0.5, maxSeconds: 5}\n"
        f"mesos: {{master: '{master}', sharedFilesystem: true, offerHoldSeconds: 1, refuseSeconds: 1,\n"
        "  failoverTimeoutSeconds: 600, subscribeTimeoutSeconds: 30}\n"
    )


def _start_emulator(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    log = (ROOT / "emulator.log").open("w")
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.mesos_emulator",
            "--port",
            "0",
            "--agents",
            AGENTS,
            "--agent-resources",
            AGENT_RESOURCES,
            "--sandbox-root",
            str((ROOT / "sandboxes").absolute()),
            "--allocation-interval",
            "0.2",
            "--heartbeat-interval",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
        start_new_session=True,  # a Ctrl-C reaches the demo, which stops the emulator in order
    )
    assert emulator.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = emulator.stdout.readline()
        if not line:
            break  # it exited
        found = re.search(r"listening on (\S+)", line)
        if found:
            return emulator, found.group(1)
    _stop(emulator)
    raise SystemExit(f"demo-mesos: the emulator did not start (see {ROOT / 'emulator.log'})")


def _stop(emulator: subprocess.Popen[str]) -> None:
    """SIGTERM: the emulator kills every task it started and exits."""
    if emulator.poll() is None:
        emulator.terminate()
        try:
            emulator.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(emulator.pid, signal.SIGKILL)
            emulator.wait()


def _tfdeclare(*args: str, env: dict[str, str]) -> int:
    dirs = ("--config", str(ROOT / "tfdeclare.yaml"), "--state-dir", str(ROOT / "state"))
    dirs += ("--status-dir", str(ROOT / "status"))
    command = [sys.executable, "-m", "tfdeclare", *args, *dirs]
    print("$ tfdeclare " + " ".join(args), flush=True)
    return subprocess.run(command, env=env, check=False).returncode


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    for previous in ("state", "status", "sandboxes"):  # each demo starts from scratch, as its master
        shutil.rmtree(ROOT / previous, ignore_errors=True)
    ROOT.mkdir(exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupted)
    # `python` in the example commands is the one tfdeclare runs in, on the emulator's agents too
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path}
    emulator, master = _start_emulator(env)
    print(f"demo-mesos: Mesos master emulator on {master} with {AGENTS} agents ({AGENT_RESOURCES})")
    try:
        (ROOT / "tfdeclare.yaml").write_text(_config(master))
        applied = _tfdeclare("apply", "specs", "--wait", "--timeout", "900", env=env)
        _tfdeclare("status", env=env)
        return applied
    except KeyboardInterrupt:
        print("demo-mesos: interrupted", file=sys.stderr)
        return 130
    finally:
        _stop(emulator)
        print("demo-mesos: emulator stopped")


if __name__ == "__main__":
    sys.exit(main())
