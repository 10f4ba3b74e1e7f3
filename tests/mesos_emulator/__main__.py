"""Command line: ``python -m tests.mesos_emulator --port 0 --agents 2 ...``.

Owns argument parsing and the process lifecycle: prints one line containing
``listening`` and the master URL once both servers are up, then serves until SIGTERM or
SIGINT, when it kills every task process group it started and exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from .config import DEFAULT_AGENT_RESOURCES, EmulatorConfig
from .emulator import Emulator


def _credentials(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    return {entry["principal"]: entry.get("secret", "") for entry in data["credentials"]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.mesos_emulator",
        description="A protocol-faithful Mesos master emulator (v1 scheduler HTTP API).",
    )
    add = parser.add_argument
    add("--port", type=int, default=5050, help="master port (0: ephemeral)")
    add("--agent-port", type=int, default=0, help="port of the shared agent HTTP server")
    add("--agents", type=int, default=1, help="number of agents to start")
    add("--agent-resources", default=DEFAULT_AGENT_RESOURCES, help="e.g. 'cpus:4;mem:8192;gpus(ml):1'")
    add("--agent-attributes", default="", help="e.g. 'rack:r1;gen:3'")
    add(
        "--agent-default-role",
        "--default_role",
        dest="agent_default_role",
        default="*",
        help="the agents' --default_role: resources without a role are reserved to it",
    )
    add("--agent-hostname", default="127.0.0.1")
    add(
        "--agent-port-offset",
        type=int,
        default=None,
        help="shift of each agent's port ranges (default: disjoint ranges when they fit)",
    )
    add("--executor", choices=("process", "simulated"), default="process")
    add(
        "--containerizers",
        default=None,
        help="like the agent flag, e.g. 'docker,mesos': run tasks that ask for a container in one "
        "on a Docker engine (default: every task a host process)",
    )
    add("--docker", default="docker", help="the docker CLI the agents run")
    add("--docker-socket", default=None, help="engine address (default: DOCKER_HOST or the default socket)")
    add("--heartbeat-interval", type=float, default=15.0)
    add("--allocation-interval", type=float, default=1.0)
    add("--offer-timeout", type=float, default=None)
    add("--agent-ping-timeout", type=float, default=15.0)
    add("--max-agent-ping-timeouts", type=int, default=5)
    add("--agent-reregister-timeout", type=float, default=600.0)
    add("--update-retry-interval", type=float, default=10.0)
    add("--kill-grace-period", type=float, default=3.0)
    add(
        "--no-filter-gpu-resources",
        action="store_true",
        help="offer GPU agents to frameworks without GPU_RESOURCES",
    )
    add(
        "--credentials",
        default=None,
        help='JSON file {"credentials":[{"principal":..,"secret":..}]}: enables Basic auth',
    )
    add("--chunk-mode", choices=("record", "split", "coalesce", "bytes"), default="record")
    add("--sandbox-root", default=None)
    add("--seed", type=int, default=0)
    add("--zk", default=None, help="zk://host:port/path: register there as a Mesos master (needs kazoo)")
    add(
        "--agent-users",
        default=None,
        help="comma-separated users tasks may run as on the agents (default: this machine's users)",
    )
    add("--version", default="1.11.0", help="the Mesos version claimed (below 1.9: no UPDATE_FRAMEWORK)")
    add("--log-level", default="WARNING")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    config = EmulatorConfig(
        agents=args.agents,
        agent_resources=args.agent_resources,
        agent_attributes=args.agent_attributes,
        agent_default_role=args.agent_default_role,
        agent_hostname=args.agent_hostname,
        agent_port_offset=args.agent_port_offset,
        port=args.port,
        agent_port=args.agent_port,
        executor=args.executor,
        containerizers=tuple(args.containerizers.split(",")) if args.containerizers else None,
        docker=args.docker,
        docker_socket=args.docker_socket,
        heartbeat_interval=args.heartbeat_interval,
        allocation_interval=args.allocation_interval,
        offer_timeout=args.offer_timeout,
        agent_ping_timeout=args.agent_ping_timeout,
        max_agent_ping_timeouts=args.max_agent_ping_timeouts,
        agent_reregister_timeout=args.agent_reregister_timeout,
        update_retry_interval=args.update_retry_interval,
        kill_grace_period=args.kill_grace_period,
        filter_gpu_resources=not args.no_filter_gpu_resources,
        credentials=_credentials(args.credentials),
        chunk_mode=args.chunk_mode,
        sandbox_root=args.sandbox_root,
        seed=args.seed,
        zookeeper=args.zk,
        version=args.version,
        agent_users=frozenset(filter(None, args.agent_users.split(","))) if args.agent_users else None,
    )

    def ready(emulator: Emulator) -> None:
        print(
            f"mesos-emulator listening on {emulator.url} (agents on {emulator.agent_url})",
            flush=True,
        )

    Emulator(config).run_forever(on_ready=ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
