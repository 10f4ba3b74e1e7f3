"""A stand-in training task for bench/preempt_bench.py: no TensorFlow, the same stop behaviour.

    python preempt_task.py OUT MODE

At start it writes ``OUT/<role>-<index>.<attempt>.up`` holding the wall-clock time it started.
Then, per MODE: ``serve`` runs until stopped; ``save=S`` runs until SIGTERM, then takes S
seconds (what ``PreemptionCheckpointHandler`` does on SIGTERM: finish the step in flight, save
a checkpoint), writes ``.down`` with the time and exits 0; ``ignore`` ignores SIGTERM (a task
that never saves: only the kill at the end of the grace period stops it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def main() -> int:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    name = "{}-{}.{}".format(
        os.environ.get("TFDECLARE_ROLE", "task"),
        os.environ.get("TFDECLARE_INDEX", "0"),
        os.environ.get("TFDECLARE_ATTEMPT", "0"),
    )
    _write(out / f"{name}.up", repr(time.time()))
    if mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif mode.startswith("save="):
        seconds = float(mode.split("=", 1)[1])

        def save(signum: int, frame: object) -> None:
            time.sleep(seconds)  # the step in flight and the checkpoint
            _write(out / f"{name}.down", repr(time.time()))
            sys.exit(0)

        signal.signal(signal.SIGTERM, save)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
