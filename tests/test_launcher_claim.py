"""A container task's launcher claims its task (backends/local/launcher.py ``_claim``) even when
the controller's look holds the task's lock shared at that instant; a lock held for long is
another launcher's, and the task is left to it."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

from tfdeclare.backends.local.launcher import _claim
from tfdeclare.backends.local.record import LocalTask, write_task


def test_a_launcher_claims_its_task_though_a_look_holds_the_lock_shared_for_an_instant(
    tmp_path: Path,
) -> None:
    """The controller's look takes a task's lock shared for an instant to see whether a
    launcher is at work (``supervisor_holds``); a launcher claiming the task just then used to
    give it up as "another launcher's" and exit, and the task failed 30 s later ("its launcher
    exited before its container was made"). Only a lock held for long is another launcher's."""
    task = LocalTask.from_json(
        {
            "taskId": "j.a0.l1.worker-0", "job": "j", "role": "worker", "index": 0, "attempt": 0,
            "configHash": "c" * 16, "specHash": "s" * 64, "argv": ["true"], "env": {},
            "cwd": str(tmp_path), "workDir": str(tmp_path), "sourceDir": None, "resources": [0.1, 64, 0],
            "gpuDevices": [], "image": "tf:2", "user": "0:0", "volumes": [], "runtime": "docker",
            "host": "127.0.0.1", "port": 20000, "logPath": str(tmp_path / "log"),
        }
    )  # fmt: skip
    folder = tmp_path / "task"
    folder.mkdir()
    write_task(folder, task)

    def look_for(seconds: float) -> threading.Thread:
        probe = os.open(folder / "task.json", os.O_RDONLY)
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        done = threading.Timer(seconds, os.close, (probe,))
        done.start()
        return done

    look = look_for(0.05)  # a look, as the launcher starts
    claimed = _claim(folder)
    look.join()
    assert claimed is not None, "claimed once the look let go"
    os.close(claimed[1])
    busy = look_for(1.0)  # held for long: another launcher at work
    assert _claim(folder) is None
    busy.join()
