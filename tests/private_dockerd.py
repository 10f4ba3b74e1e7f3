"""A Docker engine of one test's own, to stop and start under running jobs without
disturbing the engine the other tests share (``tests/docker_env.py``): Debian's ``dockerd``
with its own socket, data root, exec root (so its own containerd), pid file and an empty
config file, host networking only, in a short temporary folder (a unix socket path is
bounded). ``stop`` sends SIGTERM, as systemd does, and waits for it to exit (it stops its
containers first); ``start`` starts it again on the same data, as a restart does. Whatever it
started is stopped and removed at ``close``. Without ``dockerd`` or root the test skips (fails
under ``CI=true``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.components import missing
from tests.docker_env import STOP_WAIT_S, _ping
from tests.waiting import wait_until


class PrivateEngine:
    def __init__(self) -> None:
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            missing("a private Docker engine needs Debian's dockerd (docker.io) and root")
        self.dockerd = dockerd
        self.folder = Path(tempfile.mkdtemp(prefix="tfd-engine-"))
        (self.folder / "daemon.json").write_text("{}\n")
        self.address = f"unix://{self.folder / 'd.sock'}"
        self.process: subprocess.Popen[bytes] | None = None
        self._log = open(self.folder / "dockerd.log", "ab")  # noqa: SIM115 - closed in close()

    def start(self, wait_s: float = 60.0) -> None:
        self.process = subprocess.Popen(
            [
                self.dockerd,
                "--host", self.address,
                "--config-file", str(self.folder / "daemon.json"),
                "--data-root", str(self.folder / "data"),
                "--exec-root", str(self.folder / "exec"),
                "--pidfile", str(self.folder / "d.pid"),
                "--iptables=false", "--ip6tables=false", "--bridge=none",
            ],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True,
        )  # fmt: skip
        wait_until(lambda: _ping(self.address) or self.process.poll() is not None, wait_s, interval=0.2)  # type: ignore[union-attr]
        assert _ping(self.address), f"dockerd did not answer: {self.log()[-3000:]}"

    def stop(self) -> None:
        """SIGTERM, as systemd stops it; returns once it has exited."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.address, timeout=300)

    def log(self) -> str:
        return (self.folder / "dockerd.log").read_text(errors="replace")

    def close(self) -> None:
        """Its containers removed, the engine stopped, its folder removed."""
        if self.process is not None and self.process.poll() is None:
            client = self.client()
            try:
                for container in client.containers.list(all=True, ignore_removed=True):
                    container.remove(force=True)
            finally:
                client.close()
        self.stop()
        self._log.close()
        subprocess.run(["umount", "-R", str(self.folder / "exec")], capture_output=True, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
