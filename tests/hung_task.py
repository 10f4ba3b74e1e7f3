"""A task that hangs once, for the health-check tests: its first launch works a little, then
stops answering (``port``: closes its TF server port; ``file``: removes the file its check
looks for; ``quiet``: stops writing its log) and sleeps; the next launch of its slot (its
working folder keeps a marker) works and exits 0. Usage: hung_task.py port|file|quiet SECONDS"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main() -> int:
    mode, seconds = sys.argv[1], float(sys.argv[2])
    config = json.loads(os.environ["TF_CONFIG"])
    task = config["task"]
    marker = os.path.join(os.environ.get("MARKERS", "."), f"launched-{task['type']}-{task['index']}")
    first = not os.path.exists(marker)
    with open(marker, "a") as markers:
        markers.write(f"{os.getpid()}\n")
    port = int(config["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
    server = socket.create_server(("", port))
    server.listen()
    with open("alive", "w") as alive:
        alive.write("yes\n")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        print("step", flush=True)
        time.sleep(0.1)
    if not first:
        return 0
    print("hanging", flush=True)
    if mode == "port":
        server.close()
    elif mode == "file":
        os.remove("alive")
    time.sleep(600)  # hung: only a health check notices
    return 1


if __name__ == "__main__":
    sys.exit(main())
