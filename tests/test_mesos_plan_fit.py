"""``plan`` on Mesos says what apply will find (issue 32): a job that can never fit the cluster's
largest agent is a warning at its line; the master is asked once, read-only, within a bound.

The verdict (``fit.fit_findings``) is table-tested against agents as the master lists them; the
read-only operator call (``readonly.ask``) against the master emulator (redirect, credentials,
a dead master of a list); the command line against ``python -m tests.mesos_emulator``, and
against a master that never answers (plan goes on, with one warning, in bounded time).
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml
from tests.mesos_fixtures import start_emulator
from tests.test_plainhttp import SLOW, peer
from tfdeclare.backends.mesos import survey
from tfdeclare.backends.mesos.auth import Credentials, Secret
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.errors import AuthenticationError, MesosError
from tfdeclare.backends.mesos.fit import fit_findings, gang_of
from tfdeclare.backends.mesos.placement_capacity import never_fits
from tfdeclare.backends.mesos.placement_values import AgentOffer, PlacementOptions, PortRanges
from tfdeclare.backends.mesos.plugin import PLUGIN
from tfdeclare.backends.mesos.readonly import agents_of, ask
from tfdeclare.core.diagnostics import Code, Diagnostic, JsonPath, Severity
from tfdeclare.core.spec.loader import LoadedJob, load_file

PORTS: PortRanges = ((31000, 31099),)


def agent(
    name: str, cpus: float, mem: float, gpus: int = 0, ports: PortRanges = PORTS, **attributes: str
) -> AgentOffer:
    return AgentOffer(name, f"{name}.example", cpus, mem, gpus, ports, attributes, gpu_agent=gpus > 0)


def job(roles: str, extra: str = "") -> LoadedJob:
    (loaded,) = load_file("j.yaml", job_yaml("j", roles=roles, extra=extra).encode()).jobs
    return loaded


WORKERS = "worker: {{count: {count}, resources: {{cpus: {cpus}, mem: {mem}{gpus}}}}}"


def workers(count: int, cpus: float, mem: int = 256, gpus: int = 0) -> str:
    return WORKERS.format(count=count, cpus=cpus, mem=mem, gpus=f", gpus: {gpus}" if gpus else "")


FOUR = agent("a1", 4, 8192)
BOARD = "  tensorboard: {{logDir: /tmp/logs, resources: {{cpus: {cpus}, mem: {mem}}}}}\n"
CONSTRAINED = "  placement: {constraints: [{attribute: rack, operator: In, values: [r9]}]}\n"

# (name, roles, extra spec text, agents, cpu tasks on GPU agents, [(json path, words in it)])
CASES: list[tuple[str, str, str, list[AgentOffer], bool, list[tuple[JsonPath, str]]]] = [
    ("fits one agent", workers(1, 2, 1024), "", [FOUR], False, []),
    (
        "a task larger than the only agent",
        workers(1, 8),
        "",
        [FOUR],
        False,
        [
            (
                ("spec", "replicas", "worker", "resources"),
                "a worker task needs cpus 8, mem 256 MiB, and a task runs on one agent: the largest "
                "agent of the Mesos cluster it may use (a1.example, of 1) has cpus 4, mem 8192 MiB in "
                "all; apply will leave the job Pending as Unschedulable",
            )
        ],
    ),
    # per task, not per resource: the most cpus and the most memory are on different agents
    (
        "no one agent has both",
        workers(1, 6, 6000),
        "",
        [agent("a1", 8, 4096), agent("a2", 4, 16384)],
        False,
        [(("spec", "replicas", "worker", "resources"), "(a1.example, of 2) has cpus 8, mem 4096 MiB")],
    ),
    (
        "tasks spread over agents",
        workers(3, 3),
        "",
        [FOUR, agent("a2", 4, 8192), agent("a3", 4, 8192)],
        False,
        [],
    ),
    (
        "tasks that fit one each but not all together",
        workers(3, 3),
        "",
        [FOUR],
        False,
        [(("spec",), "its tasks need cpus 9, mem 768 MiB together, more than all usable agents have")],
    ),
    (
        "more GPUs than the largest GPU agent",
        workers(1, 1, gpus=2),
        "",
        [agent("g1", 8, 8192, gpus=1), agent("g2", 8, 8192, gpus=1)],
        False,
        [(("spec", "replicas", "worker", "resources"), "needs cpus 1, mem 256 MiB, gpus 2")],
    ),
    (
        "GPUs on a cluster without any",
        workers(1, 1, gpus=1),
        "",
        [FOUR],
        False,
        [(("spec", "replicas", "worker", "resources"), "needs an agent with GPUs, and no agent")],
    ),
    (
        "a CPU task where every agent has GPUs",
        workers(1, 1),
        "",
        [agent("g1", 8, 8192, gpus=1)],
        False,
        [(("spec", "replicas", "worker", "resources"), "mesos.cpuTasksOnGpuAgents is off")],
    ),
    ("a CPU task on a GPU agent when allowed", workers(1, 1), "", [agent("g1", 8, 8192, gpus=1)], True, []),
    (
        "TensorBoard larger than any agent",
        workers(1, 1),
        BOARD.format(cpus=1, mem="64Gi"),
        [FOUR],
        False,
        [(("spec", "tensorboard", "resources"), "a tensorboard task needs cpus 1, mem 65536 MiB")],
    ),
    (
        "every role named",
        "{chief: {count: 1, resources: {cpus: 16, mem: 64}}, " + workers(1, 1, 16384) + "}",
        "",
        [FOUR],
        False,
        [
            (("spec", "replicas", "chief", "resources"), "a chief task needs cpus 16"),
            (("spec", "replicas", "worker", "resources"), "a worker task needs cpus 1, mem 16384 MiB"),
        ],
    ),
    (
        "constraints no agent matches",
        workers(1, 1),
        CONSTRAINED,
        [agent("a1", 4, 8192, rack="r1")],
        False,
        [
            (
                ("spec", "placement", "constraints"),
                "no agent matches the placement constraints (rack In ['r9'])",
            )
        ],
    ),
    (
        "the largest agent among those the constraints allow",
        workers(1, 6),
        CONSTRAINED,
        [agent("a1", 16, 8192, rack="r1"), agent("a2", 4, 8192, rack="r9")],
        False,
        [(("spec", "replicas", "worker", "resources"), "(a2.example, of 1) has cpus 4")],
    ),
    (
        "an agent without ports",
        workers(1, 1),
        "",
        [agent("a1", 4, 8192, ports=())],
        False,
        [(("spec", "replicas", "worker", "resources"), "has cpus 4, mem 8192 MiB and no ports in all")],
    ),
    ("no agent known (an empty cluster): nothing said", workers(1, 64), "", [], False, []),
]


@pytest.mark.parametrize(
    ("roles", "extra", "agents", "cpu_on_gpu", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_fit_findings(
    roles: str, extra: str, agents: list[AgentOffer], cpu_on_gpu: bool, expected: list[tuple[JsonPath, str]]
) -> None:
    loaded = job(roles, extra)
    options = PlacementOptions(cpu_tasks_on_gpu_agents=cpu_on_gpu)
    found = fit_findings("j", loaded.spec, agents, options)
    assert [f.at for f in found] == [at for at, _ in expected]
    for finding, (_, words) in zip(found, expected, strict=True):
        assert words in finding.message, finding.message
    # plan warns exactly when apply's placement would call the job Unschedulable
    assert bool(found) == (never_fits(gang_of("j", loaded.spec), agents, options) is not None)


def _at(path: tuple[str | int, ...], message: str) -> Diagnostic:
    return Diagnostic("j.yaml", 1, None, message, ".".join(map(str, path)), Code.BACKEND)


def test_an_unreachable_master_is_said_once_by_plan_and_nothing_of_fit() -> None:
    config = MesosConfig(master="http://127.0.0.1:1", user="svc", framework_name="unreachable-test")
    big = job(workers(1, 64))
    # plan's check: nothing at the spec's line (the cluster was not asked)...
    assert PLUGIN.check_environment is not None
    assert PLUGIN.check_environment(config, big, _at, False) == []
    assert PLUGIN.check_environment(config, big, _at, False) == []  # a second job
    # ...and one warning of the plugin's, said once
    (said,) = PLUGIN.warnings(config, [big, big])
    assert said.startswith(
        "could not ask the Mesos master (http://127.0.0.1:1) for its agents within 2 s (GET_AGENTS: "
    ), said
    assert "plan says nothing of whether jobs fit the cluster's largest agent" in said
    assert PLUGIN.warnings(config, [big]) == []
    # apply and the daemon never ask here
    assert PLUGIN.check_environment(config, big, _at, True) == []
    assert PLUGIN.warnings(config, [big]) == []
    (warning,) = survey.plan_warnings(config, big, _at, (FOUR,))
    assert warning.severity is Severity.WARNING and warning.json_path == "spec.replicas.worker.resources"


def test_the_answer_serves_a_plan_and_is_asked_again_later() -> None:
    config = MesosConfig(master="http://127.0.0.1:1", framework_name="survey-cache-test")
    now = [1000.0]
    first = survey.survey(config, clock=lambda: now[0])
    assert first.unasked is not None and "127.0.0.1:1" in first.unasked
    now[0] += survey.SEEN_S - 1
    assert survey.survey(config, clock=lambda: now[0]) is first
    now[0] += 2
    assert survey.survey(config, clock=lambda: now[0]) is not first


# ---- the read-only operator call against the master emulator ------------------------------------


def test_ask_follows_the_redirect_to_the_leader_and_skips_a_dead_master(tmp_path: Path) -> None:
    leader = start_emulator(tmp_path / "a", agents=2)
    follower = start_emulator(tmp_path / "b", agents=1)
    try:
        follower.set_leader(False, leader.url.removeprefix("http://"))
        with socket.socket() as dead:  # a port nobody listens on
            dead.bind(("127.0.0.1", 0))
            gone = f"127.0.0.1:{dead.getsockname()[1]}"
        body = ask(f"{gone},{follower.url}", "GET_AGENTS", timeout_s=5)
        listed = agents_of(body)
        assert sorted(a["agent_info"]["id"]["value"] for a in listed) == sorted(leader.agent_ids())
        assert {r["name"] for r in listed[0]["total_resources"]} >= {"cpus", "mem", "ports"}
        # the backend's own reading of the same answer: what each agent has for our roles
        (big,) = {(a.cpus, a.mem_mib) for a in survey.agents_now(MesosConfig(master=follower.url))}
        assert big == (4, 4096)
    finally:
        follower.stop()
        leader.stop()


def test_ask_sends_the_frameworks_credentials(tmp_path: Path) -> None:
    emulator = start_emulator(tmp_path, credentials={"tfd": "s3cret"})
    try:
        with pytest.raises(AuthenticationError):
            ask(emulator.url, "GET_AGENTS", timeout_s=5)
        body = ask(emulator.url, "GET_AGENTS", timeout_s=5, credentials=Credentials("tfd", Secret("s3cret")))
        assert len(agents_of(body)) == 1
    finally:
        emulator.stop()


def test_ask_without_the_operator_api_is_an_error_not_an_empty_cluster(tmp_path: Path) -> None:
    emulator = start_emulator(tmp_path, operator_api=False)  # behind a proxy: /api/v1 is a 404
    try:
        with pytest.raises(MesosError, match="404"):
            ask(emulator.url, "GET_AGENTS", timeout_s=5)
    finally:
        emulator.stop()


# ---- through the command line -------------------------------------------------------------------


@pytest.fixture
def master(tmp_path: Path) -> Iterator[str]:
    """``python -m tests.mesos_emulator``: two agents of 4 cpus and 4 GiB each; its URL."""
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.mesos_emulator", "--port", "0", "--agents", "2"),
            *("--agent-resources", "cpus:4;mem:4096;ports:[31000-31099]", "--allocation-interval", "0.2"),
            *("--sandbox-root", str(tmp_path / "sandboxes")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        found = re.search(r"listening on (\S+)", line)
        assert found, f"the emulator did not start: {line!r}"
        yield found.group(1)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _write_specs(folder: Path, master_url: str) -> None:
    (folder / "specs").mkdir(exist_ok=True)
    (folder / "tfdeclare.yaml").write_text(f"backend: mesos\nmesos: {{master: '{master_url}'}}\n")
    (folder / "specs" / "big.yaml").write_text(job_yaml("fit-big", roles=workers(2, 8)))
    # 3 tasks of 2 cpus: more than one agent has, but each fits one: no warning
    (folder / "specs" / "wide.yaml").write_text(job_yaml("fit-wide", roles=workers(3, 2, 1024)))


def test_plan_warns_at_the_line_of_a_task_no_agent_could_hold(tmp_path: Path, master: str) -> None:
    _write_specs(tmp_path, master)
    result = cli("plan", "specs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # a warning: plan still plans the job
    assert "+ fit-big will be created" in result.stdout and "+ fit-wide will be created" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("specs/")]
    assert warnings == [
        "specs/big.yaml:8:24: warning: a worker task needs cpus 8, mem 256 MiB, and a task runs on one "
        "agent: the largest agent of the Mesos cluster it may use (127.0.0.1, of 2) has cpus 4, mem "
        "4096 MiB in all; apply will leave the job Pending as Unschedulable (lower the resources, or "
        "add a larger agent) (at $.spec.replicas.worker.resources)"
    ]
    as_json = cli("plan", "specs", "-o", "json", cwd=tmp_path)  # warnings on stderr, the plan parseable
    assert "specs/big.yaml:8:24: warning: a worker task needs cpus 8" in as_json.stderr
    assert {entry["action"] for entry in json.loads(as_json.stdout)["jobs"]} == {"create"}
    # validate judges files only: it never asks the cluster
    validated = cli("validate", "specs", cwd=tmp_path)
    assert validated.returncode == 0 and "agent" not in validated.stderr, validated.stderr


def test_a_master_that_answers_a_byte_at_a_time_costs_plan_its_bound() -> None:
    """Each read within the bound is not enough: a master that sends its answer slowly, a
    byte every half second, is cut off when the call's time is up."""
    with peer(SLOW, 0.5) as url:
        started = time.monotonic()
        with pytest.raises(MesosError, match="GET_AGENTS"):
            ask(url, "GET_AGENTS", timeout_s=2)
        took = time.monotonic() - started
    assert took < 30, took  # the bound is 2 s; the answer as sent takes 100 s


def test_plan_asks_an_http_master_without_importing_httpx(tmp_path: Path, master: str) -> None:
    """``plan``'s one question goes through ``http.client``: importing httpx and httpcore was
    a tenth of a second of every plan's start (issue 33, item 3); the answer is the same."""
    _write_specs(tmp_path, master)
    probe = (
        "import sys\n"
        "from tfdeclare.cli.main import main\n"
        "try:\n"
        "    code = main(['plan', 'specs'])\n"
        "finally:\n"
        "    print('HTTPX', sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "specs/big.yaml:8:24: warning: a worker task needs cpus 8" in result.stderr, result.stderr
    assert "HTTPX []" in result.stdout, result.stdout


def test_plan_with_a_master_that_never_answers_warns_once_and_goes_on(tmp_path: Path) -> None:
    with socket.socket() as silent:  # connections are taken (the backlog) and never answered
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        _write_specs(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        result = cli("plan", "specs", cwd=tmp_path)
        took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "+ fit-big will be created" in result.stdout
    assert result.stderr.count("could not ask the Mesos master") == 1, result.stderr
    assert "tfdeclare: warning: could not ask the Mesos master (http://127.0.0.1:" in result.stderr
    assert "specs/" not in result.stderr  # about the cluster, not about a spec's line
    assert "within 2 s" in result.stderr and "largest agent of" not in result.stderr
    # bounded: the scheduler client's own call timeout is 75 s; plan gives up after 2
    assert took < 30, took
