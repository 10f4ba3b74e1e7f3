"""Out-of-band delivery of a job's cluster (``mesos.clusterServer``): the documents served
reproduce the in-band TF_CONFIG and legacy flags byte for byte (tables over the roles and
styles), the delivery choice, the real bootstrap run as a process against the real cluster
server (TF_CONFIG and argv as in band, exit 86 on a stale token), the server under hostile
requests, and the wait for fetches at close in virtual time."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.waiting import wait_until
from tfdeclare.backends.mesos.bootstrap import BOOTSTRAP, FETCH_FAILED_EXIT, URL_ENV
from tfdeclare.backends.mesos.clusterserver import MAX_ANSWERING, ROUTE, ClusterServer
from tfdeclare.backends.mesos.clusterwire import ClusterWire, Delivery, delivery, fetches
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.taskinfo import task_info, task_labels
from tfdeclare.backends.mesos.taskstate import cause_of
from tfdeclare.core.enums import EndCause, Role, TaskState
from tfdeclare.core.run.causes import classify
from tfdeclare.core.run.clusterdoc import document, generation, payload_bytes
from tfdeclare.core.run.clusterspec import substitute
from tfdeclare.core.run.launches import launches, placed
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import Placement, Slot, TaskKey, TaskLaunch
from tfdeclare.core.spec.loader import load_file

PRINTER = (
    "import json,os,sys;print(json.dumps([os.environ.get('TF_CONFIG'),sys.argv[1:],sorted(os.environ)]))"
)
FLAGS = ["--ps={ps_hosts}", "--w={worker_hosts}", "--job={job_name}", "--i={task_index}", "{x}"]


def job_launches(
    replicas: str,
    style: str = "tf_config",
    host: str = "h",
    command: list[str] | None = None,
    extra: str = "",
) -> list[TaskLaunch]:
    """Every launch of a job as the controller makes them (``launches``), on made-up hosts."""
    argv = command or [sys.executable, "-c", PRINTER, *FLAGS]
    text = textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: j}}
        spec:
          command: {json.dumps(argv)}
          clusterSpec: {style}
          replicas: {replicas}
        """
    )
    loaded = load_file("j.yaml", (text + extra).encode())
    assert not loaded.diagnostics, loaded.diagnostics
    job = loaded.jobs[0]
    record = JobRecord(name="j", uid="u1", canonical=job.canonical, spec_hash=job.spec_hash)
    keys = record.spec.task_keys()
    slots = tuple(Slot(key, f"{host}{n}", 2000 + n) for n, key in enumerate(keys))
    placement = Placement("j", 0, slots, "t")
    record = placed(record, placement)
    return launches(record, placement, None)


ROLES = [
    "{worker: {count: 2}}",
    "{chief: {count: 1}, ps: {count: 2}, worker: {count: 3}, evaluator: {count: 1}}",
    "{ps: {count: 1}, worker: {count: 1}, evaluator: {count: 1}}",
    "{chief: {count: 1}}",
]


LEGACY_ROLES = ["{worker: {count: 2}}", "{ps: {count: 2}, worker: {count: 3}}"]  # legacy flags: ps and worker
STYLED = [
    *((r, s) for r in ROLES for s in ("tf_config", "both")),
    *((r, "legacy_flags") for r in LEGACY_ROLES),
]


@pytest.mark.parametrize(("replicas", "style"), STYLED)
def test_the_document_is_what_the_task_gets_in_band(replicas: str, style: str) -> None:
    for launch in job_launches(replicas, style):
        assert launch.cluster is not None
        served = document(launch.cluster, launch.key)
        assert served.get("env", {}).get("TF_CONFIG") == dict(launch.env).get("TF_CONFIG")
        template = launch.cluster.argv[launch.key.role]
        flags = served.get("flags")
        assert (substitute(template, flags) if flags else template) == launch.argv
        assert ("flags" in served) == (style != "tf_config")


def test_tensorboard_is_in_no_cluster() -> None:
    extra = "  tensorboard: {logDir: /tmp/tb}\n"
    board = [t for t in job_launches("{worker: {count: 1}}", extra=extra) if not t.key.role.in_cluster]
    assert board and board[0].cluster is None


def test_payload_is_the_largest_task_s_in_band_description() -> None:
    tasks = job_launches(
        "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}, evaluator: {count: 1}}", "both"
    )
    source = tasks[0].cluster
    assert source is not None
    evaluator = next(t for t in tasks if t.key.role is Role.EVALUATOR)
    hosts = "--ps=h1:2001--w=h2:2002,h3:2003"
    assert "".join(evaluator.argv).count(hosts) == 1
    assert payload_bytes(source) == len(dict(evaluator.env)["TF_CONFIG"]) + len(hosts) - len("--ps=--w=")
    flagged = job_launches("{worker: {count: 1}}", "legacy_flags", command=["t", "{task_index}"])[0].cluster
    assert flagged is not None and payload_bytes(flagged) == 0


@pytest.mark.parametrize(
    ("settings", "entrypoint", "in_cluster", "payload", "expected"),
    [
        (None, False, True, 10**6, Delivery.ENV),  # unset: always in band
        (ClusterServerConfig(min_bytes=100), False, True, 101, Delivery.FETCH),
        (ClusterServerConfig(min_bytes=100), False, True, 100, Delivery.ENV),  # small jobs keep env
        (ClusterServerConfig(min_bytes=0), True, True, 10**6, Delivery.ENV),  # an image's entrypoint
        (ClusterServerConfig(min_bytes=0), False, False, 10**6, Delivery.ENV),  # TensorBoard
    ],
)
def test_delivery(
    settings: ClusterServerConfig | None, entrypoint: bool, in_cluster: bool, payload: int, expected: Delivery
) -> None:
    launch = job_launches("{worker: {count: 1}}")[0]
    launch = replace(launch, entrypoint=entrypoint, cluster=launch.cluster if in_cluster else None)
    assert delivery(launch, settings, payload) is expected


def test_generation_changes_with_any_address_or_the_attempt() -> None:
    first = job_launches("{worker: {count: 2}}")[0].cluster
    moved = job_launches("{worker: {count: 2}}", host="k")[0].cluster
    assert first is not None and moved is not None
    assert generation("j", 0, first) == generation("j", 0, job_launches("{worker: {count: 2}}")[0].cluster)  # type: ignore[arg-type]
    assert generation("j", 0, first) != generation("j", 0, moved)
    assert generation("j", 0, first) != generation("j", 1, first)


# ---- the real bootstrap against the real server -------------------------------------------------


@pytest.fixture
def wire() -> Iterator[ClusterWire]:
    wire = ClusterWire(ClusterServerConfig(min_bytes=0))
    try:
        yield wire
    finally:
        if wire.server is not None:
            wire.server.close()


def run_task(launch: TaskLaunch, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``launch`` as the Mesos command executor runs it: its argv (``python3`` first) with its
    environment and this machine's PATH, without a shell."""
    env = {**dict(launch.env), "PATH": os.environ["PATH"]}
    return subprocess.run(
        list(launch.argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    ("replicas", "style"),
    [
        ("{chief: {count: 1}, ps: {count: 2}, worker: {count: 2}, evaluator: {count: 1}}", "tf_config"),
        ("{ps: {count: 2}, worker: {count: 2}}", "legacy_flags"),
        ("{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}, evaluator: {count: 1}}", "both"),
    ],
)
def test_every_task_sees_what_it_sees_in_band(wire: ClusterWire, replicas: str, style: str) -> None:
    tasks = job_launches(replicas, style)
    fetching = wire.prepare(tasks)
    assert wire.server is not None and wire.server.pending() == {t.task_id for t in tasks}
    for in_band, launch in zip(tasks, fetching, strict=True):
        assert launch.argv[:3] == ("python3", "-c", BOOTSTRAP)
        assert "TF_CONFIG" not in dict(launch.env)
        assert "h1:" not in "".join(launch.argv) + "".join(v for _, v in launch.env)
        done = run_task(launch)
        assert done.returncode == 0, done.stderr
        tf_config, argv, names = json.loads(done.stdout)
        assert tf_config == dict(in_band.env).get("TF_CONFIG")
        assert argv == list(in_band.argv[3:])  # after sys.executable -c PRINTER
        assert URL_ENV not in names  # the token is not handed on
    assert wire.server.pending() == set()
    assert wire.close(lambda ids: set()) == set()


def test_a_small_job_keeps_its_cluster_in_band() -> None:
    wire = ClusterWire(ClusterServerConfig())  # minBytes 2048
    tasks = job_launches("{worker: {count: 3}}")
    assert wire.prepare(tasks) == tasks and wire.server is None
    assert ClusterWire(None).prepare(tasks) == tasks


def token_of(launch: TaskLaunch) -> str:
    return parse_qs(urlsplit(dict(launch.env)[URL_ENV]).query)["token"][0]


def test_a_stale_token_fails_the_task_at_once_with_its_exit_code(wire: ClusterWire) -> None:
    old = wire.prepare(job_launches("{worker: {count: 2}}"))
    again = wire.prepare(job_launches("{worker: {count: 2}}"))  # the same generation: same token
    assert token_of(again[0]) == token_of(old[0]) and len(token_of(old[0])) == 32
    new = wire.prepare(job_launches("{worker: {count: 2}}", host="k"))  # restarted elsewhere
    assert token_of(new[0]) != token_of(old[0])
    done = run_task(old[0])
    assert done.returncode == FETCH_FAILED_EXIT
    assert done.stderr == "tfdeclare: cannot fetch the cluster: HTTP Error 403: Forbidden\n"
    assert run_task(new[1]).returncode == 0


def test_an_unrunnable_program_ends_the_task_with_a_message(wire: ClusterWire) -> None:
    launch = wire.prepare(job_launches("{worker: {count: 1}}", command=["no-such-program-here"]))[0]
    done = run_task(launch)
    assert done.returncode == 1 and "tfdeclare: cannot run no-such-program-here: [Errno 2]" in done.stderr


def test_the_task_info_is_small_and_carries_no_address() -> None:
    tasks = job_launches("{worker: {count: 1000}}", command=["python3", "train.py"])
    wire = ClusterWire(ClusterServerConfig(min_bytes=0, listen="127.0.0.1:0"))
    try:
        for in_band, fetching in zip(tasks, wire.prepare(tasks), strict=True):
            sizes = [
                len(json.dumps(task_info(t, "agent-1", "*", task_labels(t, "me")), separators=(",", ":")))
                for t in (in_band, fetching)
            ]
            assert sizes[0] > 10_000 and sizes[1] < 2_048, sizes
    finally:
        assert wire.server is not None
        wire.server.close()


# ---- hostile requests ----------------------------------------------------------------------------


@pytest.fixture
def served(wire: ClusterWire) -> tuple[ClusterServer, str]:
    launch = wire.prepare(job_launches("{worker: {count: 2}}"))[0]
    assert wire.server is not None
    return wire.server, token_of(launch)


def ask(
    server: ClusterServer, method: str, target: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    host, _, port = server.base_url.removeprefix("http://").rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, target, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


GOOD = f"{ROUTE}?task=worker-0&token=TOKEN"


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        ("GET", GOOD, 200),
        ("GET", f"{ROUTE}?token=TOKEN&task=worker-1", 200),
        ("GET", f"{ROUTE}?task=worker-0", 400),  # no token
        ("GET", f"{ROUTE}?task=worker-0&token=wrong", 403),
        ("GET", f"{ROUTE}?task=worker-0&token=", 400),
        ("GET", f"{ROUTE}?task=worker-0&token=TOKENx", 403),
        ("GET", "/?task=worker-0&token=TOKEN", 404),
        ("GET", f"{ROUTE}/../../etc/passwd?task=worker-0&token=TOKEN", 404),
        ("GET", "/v1/../v1/cluster?task=worker-0&token=TOKEN", 404),
        ("GET", f"{ROUTE}%2f..%2fx?task=worker-0&token=TOKEN", 404),
        ("GET", f"{ROUTE}?task=worker-7&token=TOKEN", 404),  # no such task
        ("GET", f"{ROUTE}?task=../../etc/passwd&token=TOKEN", 404),
        ("GET", f"{ROUTE}?task=j.u1.worker-0.2&token=TOKEN", 404),  # a launch it did not make
        ("GET", ROUTE, 400),
        ("GET", f"{GOOD}&task=worker-1", 400),
        ("GET", f"{GOOD}&more=1", 400),
        ("GET", f"{GOOD}&token=TOKEN", 400),
        ("GET", f"{GOOD}&x=" + "x" * 5000, 414),
        ("POST", GOOD, 501),
        ("PUT", GOOD, 501),
        ("DELETE", GOOD, 501),
    ],
)
def test_hostile_requests(served: tuple[ClusterServer, str], method: str, target: str, status: int) -> None:
    server, token = served
    got, body = ask(server, method, target.replace("TOKEN", token))
    assert got == status, body
    if status == 200:
        assert set(json.loads(body)) == {"env"}
    else:
        assert b"h0:" not in body and b"h1:" not in body  # nothing of the cluster leaks


def test_a_huge_request_is_refused(served: tuple[ClusterServer, str]) -> None:
    server, token = served
    good = GOOD.replace("TOKEN", token)
    assert ask(server, "GET", good, {"X-Big": "x" * 70_000})[0] == 431
    assert ask(server, "GET", good, {f"X-{n}": "1" for n in range(150)})[0] == 431
    assert ask(server, "GET", good)[0] == 200  # still serving


def test_a_forgotten_job_s_token_is_refused(served: tuple[ClusterServer, str]) -> None:
    server, token = served
    server.forget("j")
    assert ask(server, "GET", GOOD.replace("TOKEN", token))[0] == 403


# ---- waiting for the fetches (virtual time) ------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_wait_ends_when_every_task_fetched_or_ended_or_at_its_bound() -> None:
    clock = Clock()
    server = ClusterServer(ClusterServerConfig(), clock=clock)
    source = job_launches("{worker: {count: 3}}")[0].cluster
    assert source is not None
    token = server.register("j", "g1", source, [(f"t{i}", TaskKey(Role.WORKER, i)) for i in range(3)])
    assert server.answer(f"{ROUTE}?task=worker-0&token={token}")[0] == 200
    assert server.pending() == {"t1", "t2"}

    def t2_ended(ids: set[str]) -> set[str]:
        return ids & {"t2"}

    def advance(ids: set[str]) -> set[str]:
        clock.now += 301  # past fetchWaitSeconds (300) while t1 has not fetched
        return set()

    assert server.wait_fetched(300, lambda ids: t2_ended(ids) | advance(ids)) == {"t1"}
    assert server.pending() == {"t1"}  # t2 is awaited no more
    assert server.answer(f"{ROUTE}?task=worker-1&token={token}")[0] == 200
    assert server.wait_fetched(300, lambda ids: set()) == set()


# ---- a failed fetch is a platform event ------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "unfetched", "cause"),
    [
        ("TASK_FAILED", True, EndCause.CLUSTER_UNDELIVERED),
        ("TASK_FAILED", False, EndCause.JOB),  # exit 86 of a task that carries its cluster in band
        ("TASK_FINISHED", True, EndCause.JOB),
        ("TASK_KILLED", True, EndCause.JOB),
    ],
)
def test_a_failed_fetch_is_a_platform_event(state: str, unfetched: bool, cause: EndCause) -> None:
    assert cause_of(state, None, None, unfetched) is cause
    assert classify(TaskState.FAILED, EndCause.CLUSTER_UNDELIVERED).platform


def test_the_journal_says_which_tasks_fetch_their_cluster(wire: ClusterWire) -> None:
    in_band = job_launches("{worker: {count: 1}}")[0]
    fetching = wire.prepare([in_band])[0]
    assert fetches(fetching) and not fetches(in_band)
    entry = TaskEntry(
        fetching.task_id, "j", "worker", 0, 0, "c", "s", 1, 1, 0, "a", "h", 1, "", 0.0, fetches_cluster=True
    )
    assert TaskEntry.from_json(entry.to_json()).fetches_cluster
    assert not TaskEntry.from_json(
        {k: v for k, v in entry.to_json().items() if k != "fetches_cluster"}
    ).fetches_cluster


def test_a_server_hands_its_generations_to_the_next_one() -> None:
    source = job_launches("{ps: {count: 1}, worker: {count: 2}}", "both")[0].cluster
    assert source is not None
    first = ClusterServer(ClusterServerConfig())
    token = first.register("j", "g1", source, [("t0", TaskKey(Role.WORKER, 0))])
    saved = json.loads(json.dumps(first.saved()))  # as written to and read from the file
    second = ClusterServer(ClusterServerConfig())
    second.restore(saved["generations"])
    for key in source.addresses:  # any task of the generation: the first's or the second's
        served = json.dumps(document(source, key), separators=(",", ":")).encode()
        assert second.answer(f"{ROUTE}?task={key.name}&token={token}") == (200, served)
    assert second.pending() == set()  # nothing to wait for: the tasks were the first's
    assert second.register("j", "g1", source, [("t1", TaskKey(Role.WORKER, 1))]) == token  # same generation
    assert second.register("j", "g2", source, []) != token
    assert second.answer(f"{ROUTE}?task=worker-0&token={token}")[0] == 403
    with pytest.raises((ValueError, KeyError, TypeError)):
        ClusterServer(ClusterServerConfig()).restore([{**saved["generations"][0], "style": "nonsense"}])
    short = {**saved["generations"][0], "token": "short"}
    third = ClusterServer(ClusterServerConfig())
    third.restore([short])  # a token too short to be ours is not served
    assert third.answer(f"{ROUTE}?task=worker-0&token=short")[0] == 403


def test_a_busy_server_answers_503_and_the_bootstrap_tries_again(wire: ClusterWire) -> None:
    launch = wire.prepare(job_launches("{worker: {count: 2}}"))[0]
    server = wire.server
    assert server is not None
    held = [server._answering.acquire(blocking=False) for _ in range(MAX_ANSWERING)]
    assert all(held)
    try:
        assert ask(server, "GET", GOOD.replace("TOKEN", token_of(launch)))[0] == 503
        task = subprocess.Popen(
            list(launch.argv),
            env={**dict(launch.env), "PATH": os.environ["PATH"]},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(lambda: server.busy >= 2 or task.poll() is not None)  # the bootstrap's first try
    finally:
        for _ in held:
            server._answering.release()
    try:
        out, err = task.communicate(timeout=30)  # its next try (2 s later) is answered
    finally:
        if task.poll() is None:
            task.kill()
            task.wait()
    assert task.returncode == 0, err
    assert json.loads(out)[0] == dict(job_launches("{worker: {count: 2}}")[0].env)["TF_CONFIG"]
