"""mesos-docker-executor: the Docker containerizer's executor for realmesos' agents (v1 API).

An agent started with ``--containerizers=docker,mesos`` runs a task that has a
``ContainerInfo.docker`` and no executor of its own through ``<launcher_dir>/mesos-docker-executor``
(upstream ``src/docker/executor.cpp``, a program the package lacks). This module owns a rewrite
of its behaviour in Python (standard library and the ``docker`` command line the agent itself
uses, ``--docker``), on top of the command executor's connection handling (``executor.py``:
SUBSCRIBE, re-subscription, UPDATE resends, acknowledgements, SHUTDOWN, the acknowledgement
timeout):

- on LAUNCH sends TASK_STARTING and runs ``docker -H unix://<--docker_socket> run`` attached
  (its output is the executor's: the sandbox's stdout and stderr) with ``--name <--container>``,
  the sandbox mounted at ``--mapped_directory``, the task's volumes (a relative host path is
  taken from the sandbox; ``RO`` read-only), ``--net=host`` for HOST networking (BRIDGE and
  USER as upstream: ``bridge`` / the named network), the DockerInfo ``parameters`` as
  ``--key=value``, ``--cpu-shares`` and ``--memory`` from the task's resources, the
  environment (``--task_environment``, then the command's; ``MESOS_SANDBOX`` and
  ``MESOS_CONTAINER_NAME``; on ``docker run``'s command line, as upstream, though not in
  the executor's log), then the image and the command: ``shell`` runs ``/bin/sh -c
  value`` as the entrypoint, otherwise ``value`` and ``arguments`` follow the image (its
  entrypoint stays); ``force_pull_image`` adds ``--pull=always``;
- TASK_RUNNING once ``docker inspect`` shows the container started;
- on KILL (the event's kill policy over the task's, else 3 s): TASK_KILLING when the framework
  has TASK_KILLING_STATE, then ``docker stop --time=<grace>`` (SIGTERM to the container's
  PID 1, SIGKILL when the grace period ends); a later kill may only shorten it, by sending
  SIGKILL (``docker kill``) at the shorter deadline;
- when ``docker run`` exits: TASK_FINISHED (0), TASK_FAILED (else) or TASK_KILLED (after a
  kill), message ``Container exited with status N``; exits once the terminal update is
  acknowledged.

Every container it starts is labelled ``tfdeclare.realmesos.sandbox=<sandbox>`` (the test
harness removes the containers of its clusters' work folders by it). Not implemented (the
README's real-Mesos tier section lists them): health and general checks,
``docker_mesos_image``, ``--default_container_dns``, CFS quotas, port mappings for BRIDGE
networking, ``LinuxInfo`` devices and capabilities, ``max_completion_time``, re-attaching to
a container after the executor itself restarted, and removing the container (the agent does
that after ``--docker_remove_delay``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from executor import Executor, log, sandbox_stdio  # beside this file

SANDBOX_IN_CONTAINER = "/mnt/mesos/sandbox"
STARTED_NEVER = "0001-01-01T00:00:00Z"
SANDBOX_LABEL = "tfdeclare.realmesos.sandbox"  # the harness finds its clusters' containers by it


class DockerExecutor(Executor):
    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self.container = self.flags.get("container", f"mesos-{self.executor_id['value']}")
        self.sandbox = self.flags.get("sandbox_directory", os.environ.get("MESOS_DIRECTORY", os.getcwd()))
        self.mapped = self.flags.get("mapped_directory", SANDBOX_IN_CONTAINER)
        self.running_sent = False

    def docker(self, *args: str) -> list[str]:
        argv = [self.flags.get("docker", "docker")]
        socket = self.flags.get("docker_socket")
        if socket:
            argv += ["-H", f"unix://{socket}"]
        return [*argv, *args]

    def run_argv(self, task: dict[str, Any]) -> list[str]:
        container = task.get("container", {})
        info = container.get("docker", {})
        command = task.get("command", {})
        argv = self.docker("run", f"--name={self.container}")
        argv.append(f"--label={SANDBOX_LABEL}={self.sandbox}")
        for resource in task.get("resources", []):
            value = float(resource.get("scalar", {}).get("value", 0))
            if resource.get("name") == "cpus" and value > 0:
                argv.append(f"--cpu-shares={max(2, int(value * 1024))}")
            elif resource.get("name") == "mem" and value > 0:
                argv.append(f"--memory={max(32, int(value))}m")
        environment: dict[str, str] = {}
        if "task_environment" in self.flags:
            environment.update(json.loads(self.flags["task_environment"]))
        for variable in command.get("environment", {}).get("variables", []):
            if variable.get("type", "VALUE") == "VALUE":
                environment[variable["name"]] = variable.get("value", "")
        environment["MESOS_SANDBOX"] = self.mapped
        environment["MESOS_CONTAINER_NAME"] = self.container
        for name, value in environment.items():
            argv.append(f"--env={name}={value}")
        argv.append(f"--volume={self.sandbox}:{self.mapped}")
        for volume in container.get("volumes", []):
            host = volume.get("host_path")
            if not host:  # image or secret volumes: not handled here
                continue
            if not os.path.isabs(host):
                host = os.path.join(self.sandbox, host)
            mode = "ro" if volume.get("mode") == "RO" else "rw"
            argv.append(f"--volume={host}:{volume['container_path']}:{mode}")
        network = info.get("network", "HOST")
        if network == "HOST":
            argv.append("--net=host")
        elif network == "BRIDGE":
            argv.append("--net=bridge")
        elif network == "USER":
            names = [n["name"] for n in container.get("network_infos", []) if n.get("name")]
            argv.append(f"--net={names[0] if names else 'none'}")
        for parameter in info.get("parameters", []):
            argv.append(f"--{parameter['key']}={parameter['value']}")
        if info.get("force_pull_image"):
            argv.append("--pull=always")
        if command.get("shell", True) and command.get("value"):
            argv += ["--entrypoint=/bin/sh", info["image"], "-c", command["value"]]
        else:
            argv.append(info["image"])
            if command.get("value"):
                argv.append(command["value"])
            argv += list(command.get("arguments", []))
        return argv

    def launch(self, task: dict[str, Any]) -> None:
        if self.task is not None:
            self.send_failed_second(task)
            return
        self.task = task
        self.forward("TASK_STARTING")
        argv = self.run_argv(task)
        shown = ["--env=" + a.split("=")[1] + "=..." if a.startswith("--env=") else a for a in argv]
        log(f"Starting task {task['task_id']['value']}: {' '.join(shown)}")
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        threading.Thread(target=self.reap, args=(self.process,), daemon=True).start()
        threading.Thread(target=self.watch_start, daemon=True).start()

    def started(self) -> bool:
        """Whether docker shows the container started (it may have ended since)."""
        done = subprocess.run(
            self.docker("inspect", "--format={{.State.StartedAt}}", self.container),
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode == 0 and done.stdout.strip() not in ("", STARTED_NEVER)

    def watch_start(self) -> None:
        process = self.process
        while process is not None and process.poll() is None:
            if self.started():
                self.events.put(("container started", None))
                return
            time.sleep(0.2)

    def running(self) -> None:
        if not self.running_sent and not self.terminated:
            self.running_sent = True
            self.forward("TASK_RUNNING")

    def signal_tree(self, signum: int) -> None:
        """The container is the task: SIGKILL it through docker, then its ``docker run``."""
        if self.process is None:
            return
        subprocess.run(self.docker("kill", self.container), capture_output=True, check=False)
        super().signal_tree(signum)

    def kill(self, grace: float) -> None:
        if self.terminated or self.process is None:
            return
        now = time.monotonic()
        if self.killed:
            if self.kill_started is not None and self.kill_deadline is not None:
                self.kill_deadline = min(self.kill_deadline, self.kill_started + grace)
            return
        capabilities = {c.get("type") for c in self.framework_info.get("capabilities", [])}
        if "TASK_KILLING_STATE" in capabilities:
            self.forward("TASK_KILLING")
        seconds = max(0, int(grace + 0.999))
        log(f"Stopping container {self.container} with a grace period of {seconds}s")
        stop = self.docker("stop", f"--time={seconds}", self.container)
        threading.Thread(
            target=subprocess.run, args=(stop,), kwargs={"capture_output": True}, daemon=True
        ).start()
        self.killed = True
        self.kill_started = now
        self.kill_deadline = now + max(0.0, grace) + 1.0  # docker stop's own SIGKILL comes first

    def reaped(self, status: int) -> None:
        if not self.running_sent and self.started():
            self.running()
        self.terminated = True
        if self.killed:
            state = "TASK_KILLED"
        elif status == 0:
            state = "TASK_FINISHED"
        else:
            state = "TASK_FAILED"
        message = (
            f"Container exited with status {status}" if status >= 0 else f"docker run got signal {-status}"
        )
        log(message)
        self.forward(state, message)
        self.ack_deadline = time.monotonic() + 60

    def run(self) -> int:
        log(f"Started with {' '.join(sys.argv[1:])}")
        return super().run()

    def other(self, kind: str, value: Any) -> None:
        if kind == "container started":
            self.running()


def main() -> int:
    sandbox_stdio()
    return DockerExecutor(sys.argv[1:]).run()


if __name__ == "__main__":
    sys.exit(main())
