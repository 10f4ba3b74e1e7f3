"""A stand-in task for end-to-end tests: records what it was given, then behaves as told.

    python e2e_task.py MODE [ARGS...]

It writes ``$OUT/<role>-<index>.<attempt>.json`` with its argv, TF_CONFIG, pid and the
TFDECLARE_* variables, then per MODE: ``serve`` sleeps until stopped; ``exit=N`` exits N;
``fail-once`` exits 1 on its first attempt and 0 later; ``wait=N`` waits until N records
exist (the whole cluster is up) and exits 0; ``sleep=S`` sleeps S seconds and exits 0; ``until=NAME`` waits until ``$OUT/NAME`` exists (the
test's go-ahead, so that a loaded machine cannot end the task before the test has looked) and
exits 0;
``term`` serves until SIGTERM, then writes ``$OUT/<role>-<index>.<attempt>.term`` (what a
checkpoint on a graceful stop would be) and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    mode = sys.argv[1]
    out = Path(os.environ["OUT"])
    role = os.environ.get("TFDECLARE_ROLE", "unknown")
    index = os.environ.get("TFDECLARE_INDEX", "0")
    attempt = os.environ.get("TFDECLARE_ATTEMPT", "0")
    record = {
        "argv": sys.argv,
        "tfConfig": json.loads(os.environ["TF_CONFIG"]) if "TF_CONFIG" in os.environ else None,
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "env": {
            k: v for k, v in os.environ.items() if k.startswith("TFDECLARE_") or k == "CUDA_VISIBLE_DEVICES"
        },
    }
    tmp = out / f".{role}-{index}.{attempt}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.rename(out / f"{role}-{index}.{attempt}.json")
    if mode == "term":

        def saved(signum: int, frame: object) -> None:
            (out / f"{role}-{index}.{attempt}.term").write_text(str(os.getpid()))
            sys.exit(0)

        signal.signal(signal.SIGTERM, saved)
        while True:
            signal.pause()
    if mode == "serve":
        while True:
            signal.pause()
    if mode.startswith("exit="):
        return int(mode.split("=", 1)[1])
    if mode == "fail-once":
        return 1 if attempt == "0" else 0
    if mode.startswith("wait="):
        want = int(mode.split("=", 1)[1])
        while len(list(out.glob(f"*.{attempt}.json"))) < want:
            time.sleep(0.05)
        return 0
    if mode.startswith("until="):
        while not (out / mode.split("=", 1)[1]).exists():
            time.sleep(0.05)
        return 0
    if mode.startswith("sleep="):
        time.sleep(float(mode.split("=", 1)[1]))
        return 0
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
