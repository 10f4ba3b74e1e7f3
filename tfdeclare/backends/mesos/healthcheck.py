"""A role's ``healthCheck`` as a Mesos ``HealthCheck`` in the TaskInfo (reference §1.9): pure.

The built-in executors run it and kill the task after ``consecutive_failures`` failures in a
row, sending ``TASK_RUNNING`` updates with ``healthy`` (reason
``REASON_TASK_HEALTH_CHECK_STATUS_UPDATED``) as the result changes and ``healthy: false`` on
the task's terminal update; ``taskstate`` reads those back. The fields map one to one:
``initialDelaySeconds`` -> ``delay_seconds``, ``periodSeconds`` -> ``interval_seconds``,
``timeoutSeconds`` -> ``timeout_seconds``, ``failureThreshold`` -> ``consecutive_failures``,
and ``grace_period_seconds`` is 0 (Kubernetes' rules: the initial delay is the only grace).

- ``tcpSocket``: a ``TCP`` check of the task's port.
- ``exec``: a ``COMMAND`` check, the argv without a shell (``shell: false``), with the task's
  environment; in the task's working directory when it has one (the same ``cd`` wrapper as
  the task's own command, taskinfo's ``CD_SCRIPT``: the folder is a positional parameter,
  never shell text).
- ``progress``: a ``COMMAND`` check, ``python3 -c`` with a fixed script of ours and the
  folder, path and limit as arguments: the newest modification time of the path (relative to
  the working directory, else the sandbox), or of the sandbox's ``stdout`` and ``stderr``
  when no path is given, must be within ``stalledSeconds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind

JSON = dict[str, Any]

PROGRESS_SCRIPT = """\
import os, sys, time
folder, path, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
sandbox = os.environ.get("MESOS_SANDBOX") or os.getcwd()
base = os.path.join(sandbox, folder) if folder else sandbox
names = [os.path.join(base, path)] if path else [os.path.join(sandbox, n) for n in ("stdout", "stderr")]
times = []
for name in names:
    try:
        times.append(os.stat(name).st_mtime)
    except OSError:
        pass
if not times:
    sys.exit(" and ".join(names) + ": does not exist")
idle = time.time() - max(times)
if idle > limit:
    sys.exit("%s: not written for %.0f s (stalledSeconds %g)" % (path or "the log", idle, limit))
"""


def _command(
    argv: Sequence[str], env: Sequence[tuple[str, str]], directory: str | None, cd_script: str
) -> JSON:
    if directory is not None:
        command: JSON = {
            "shell": False,
            "value": "/bin/sh",
            "arguments": ["sh", "-c", cd_script, "tfdeclare-workdir", directory, *argv],
        }
    else:
        command = {"shell": False, "value": argv[0], "arguments": list(argv)}
    if env:
        command["environment"] = {"variables": [{"name": k, "value": v} for k, v in env]}
    return command


def health_check_json(
    check: HealthCheck,
    port: int,
    env: Sequence[tuple[str, str]],
    directory: str | None,
    cd_script: str,
) -> JSON:
    """The TaskInfo's ``health_check`` for ``check`` of a task on ``port``, whose command runs
    in ``directory`` (None: the sandbox or the image's own)."""
    out: JSON = {
        "delay_seconds": check.initial_delay_s,
        "interval_seconds": check.period_s,
        "timeout_seconds": check.timeout_s,
        "consecutive_failures": check.failure_threshold,
        "grace_period_seconds": 0.0,
    }
    if check.kind is HealthCheckKind.TCP:
        out.update(type="TCP", tcp={"port": port})
    elif check.kind is HealthCheckKind.EXEC:
        out.update(type="COMMAND", command=_command(check.command, env, directory, cd_script))
    else:
        folder = directory or ""
        argv = ["python3", "-c", PROGRESS_SCRIPT, folder, check.path or "", f"{check.stalled_s:g}"]
        out.update(type="COMMAND", command=_command(argv, env, None, cd_script))
    return out
