"""A ParameterServerStrategy job's tasks without TensorFlow, for tests of how its tasks are
stopped (issue 34): what the chief's save on SIGTERM needs is the ps still serving.

    python pss_stand_in.py OUT

By ``TFDECLARE_ROLE``: a ``ps`` listens on its own address from ``TF_CONFIG`` and, like
TensorFlow's servers (which install no SIGTERM handler), dies at once on SIGTERM, writing
``OUT/ps-<index>.<attempt>.term`` with the time first; a ``worker`` serves until stopped; the
``chief`` (the coordinator) runs until SIGTERM, then "saves": it waits 0.5 s (a checkpoint's
write), connects to every ps address and writes ``OUT/chief-0.<attempt>.saved`` (``ok``, or
``ps gone: ...`` when one no longer answers) with the time, and exits 42. Each task writes
``OUT/<role>-<index>.<attempt>.up`` once it serves.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


def _write(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def main() -> int:
    out = Path(sys.argv[1])
    role = os.environ["TFDECLARE_ROLE"]
    index = os.environ.get("TFDECLARE_INDEX", "0")
    attempt = os.environ.get("TFDECLARE_ATTEMPT", "0")
    name = f"{role}-{index}.{attempt}"
    config = json.loads(os.environ["TF_CONFIG"])
    ps = list(config["cluster"].get("ps", []))
    if role == "ps":

        def dies(signum: int, frame: object) -> None:
            _write(out / f"{name}.term", repr(time.time()))
            os._exit(128 + signum)

        signal.signal(signal.SIGTERM, dies)
        port = ps[int(index)].rsplit(":", 1)[1]
        server = socket.create_server(("", int(port)))
        _write(out / f"{name}.up", repr(time.time()))
        while True:
            conn, _ = server.accept()
            conn.close()
    if role == "chief":

        def save(signum: int, frame: object) -> None:
            time.sleep(0.5)
            said = "ok"
            for address in ps:
                host, port = address.rsplit(":", 1)
                try:
                    socket.create_connection((host, int(port)), timeout=2).close()
                except OSError as err:
                    said = f"ps gone: {address}: {err}"
            _write(out / f"{name}.saved", f"{said}\n{time.time()!r}")
            os._exit(42)

        signal.signal(signal.SIGTERM, save)
    _write(out / f"{name}.up", repr(time.time()))
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
