"""Out-of-band delivery of a job's cluster (``mesos.clusterServer``): the documents served
reproduce the in-band TF_CONFIG and legacy flags byte for byte (tables over the roles and
styles), the delivery choice, the real bootstrap run as a process against the real cluster
server (TF_CONFIG and argv as in band, exit 86 on a stale token), the bootstrap against a
hostile server of the test's own (an answer without the task's MAC is refused: exit 86, nothing
applied, the program never run), the server under hostile requests, and the wait for fetches
at close in virtual time."""

from __future__ import annotations

import ast
import http.client
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bench import wire_bench
from tests.waiting import wait_until
from tfdeclare.backends.mesos.bootstrap import (
    BOOTSTRAPS,
    FETCH_ENV,
    FETCH_FAILED_EXIT,
    IDENTITY_ENV,
    MAC_BYTES,
)
from tfdeclare.backends.mesos.bootstrap import FLAGS as PLACEHOLDERS
from tfdeclare.backends.mesos.clustergen import credentials, signed
from tfdeclare.backends.mesos.clusterserver import MAX_ANSWERING, ROUTE, ClusterServer, Fetched
from tfdeclare.backends.mesos.clusterwire import ClusterWire, Delivery, delivery, fetches
from tfdeclare.backends.mesos.config import ClusterServerConfig
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.taskinfo import task_info, task_labels
from tfdeclare.backends.mesos.taskstate import cause_of, observed_task
from tfdeclare.backends.mesos.tasktable import TaskTable
from tfdeclare.core.enums import ClusterSpecStyle, EndCause, Role, TaskState
from tfdeclare.core.run.causes import classify
from tfdeclare.core.run.clusterdoc import document, generation, payload_bytes
from tfdeclare.core.run.clusterspec import substitute
from tfdeclare.core.run.launches import launches, placed
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import Placement, Slot, TaskKey, TaskLaunch
from tfdeclare.core.spec.loader import load_file

PRINTER = "import json,os,sys;print(json.dumps([os.environ.get('TF_CONFIG'),sys.argv[1:],dict(os.environ)]))"
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
        assert served.get("TF_CONFIG") == dict(launch.env).get("TF_CONFIG")
        template = launch.cluster.argv[launch.key.role]
        flags = {k: v for k, v in served.items() if k in PLACEHOLDERS}
        assert (substitute(template, flags) if flags else template) == launch.argv
        assert set(served) - {"TF_CONFIG"} == (set(PLACEHOLDERS) if style != "tf_config" else set())


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
        assert launch.argv[:3] == ("python3", "-c", BOOTSTRAPS[ClusterSpecStyle(style)])
        assert "TF_CONFIG" not in dict(launch.env)
        assert "h1:" not in "".join(launch.argv) + "".join(v for _, v in launch.env)
        done = run_task(launch)
        assert done.returncode == 0, done.stderr
        tf_config, argv, names = json.loads(done.stdout)
        assert tf_config == dict(in_band.env).get("TF_CONFIG")
        assert argv == list(in_band.argv[3:])  # after sys.executable -c PRINTER
        assert FETCH_ENV not in names  # neither the key nor the token is handed on
        assert "TFDECLARE_JOB" not in dict(launch.env)  # carried in FETCH_ENV, set back:
        assert {n: names.get(n) for n in (*IDENTITY_ENV, "PYTHONUNBUFFERED")} == {
            n: dict(in_band.env)[n] for n in (*IDENTITY_ENV, "PYTHONUNBUFFERED")
        }
    assert wire.server.pending() == set()
    assert wire.close(lambda ids: set()) == set()


def test_a_small_job_keeps_its_cluster_in_band() -> None:
    wire = ClusterWire(ClusterServerConfig())  # minBytes 2048
    tasks = job_launches("{worker: {count: 3}}")
    assert wire.prepare(tasks) == tasks and wire.server is None
    assert ClusterWire(None).prepare(tasks) == tasks


def token_of(launch: TaskLaunch) -> str:
    url = dict(launch.env)[FETCH_ENV].split()[1]
    assert not urlsplit(url).query
    return urlsplit(url).path.removeprefix("/")


def key_of(launch: TaskLaunch) -> str:
    return dict(launch.env)[FETCH_ENV].split()[0]


def test_a_stale_token_fails_the_task_at_once_with_its_exit_code(wire: ClusterWire) -> None:
    old = wire.prepare(job_launches("{worker: {count: 2}}"))
    again = wire.prepare(job_launches("{worker: {count: 2}}"))  # the same generation: same token
    assert token_of(again[0]) == token_of(old[0]) and len(token_of(old[0])) == 22
    assert key_of(again[0]) == key_of(old[0]) and len(key_of(old[0])) == 22
    assert token_of(old[0]) != token_of(old[1]) and key_of(old[0]) != key_of(old[1])  # per task
    new = wire.prepare(job_launches("{worker: {count: 2}}", host="k"))  # restarted elsewhere
    assert token_of(new[0]) != token_of(old[0]) and key_of(new[0]) != key_of(old[0])
    done = run_task(old[0])
    assert done.returncode == FETCH_FAILED_EXIT
    assert done.stderr == "tfdeclare: cannot fetch the cluster: HTTP Error 403: Forbidden\n"
    assert run_task(new[1]).returncode == 0


def test_an_unrunnable_program_ends_the_task_with_a_message(wire: ClusterWire) -> None:
    launch = wire.prepare(job_launches("{worker: {count: 1}}", command=["no-such-program-here"]))[0]
    done = run_task(launch)
    assert done.returncode == 1 and "tfdeclare: cannot run no-such-program-here: [Errno 2]" in done.stderr


@pytest.mark.parametrize("size", [1000, 4000])
@pytest.mark.parametrize("style", wire_bench.STYLES)
def test_the_task_info_is_at_most_2_kb_and_carries_no_address(size: int, style: str) -> None:
    """Issue 33's goal, on the TaskInfos ``make bench-wire`` measures (docs/benchmarks.md): a
    fetched task's TaskInfo, encoded as the scheduler client sends it, is at most 2,048 bytes
    in a job of 1,000 or 4,000 tasks of each ``clusterSpec`` style (the legacy ones with the
    four placeholder flags in their command), and holds no address of its job."""
    in_band = wire_bench.job(size, style)
    for n, (mine, fetched) in enumerate(zip(in_band, wire_bench.fetching(in_band), strict=True)):
        sent = wire_bench.info(fetched, n)
        assert wire_bench.size(sent) <= 2048, (n, wire_bench.size(sent))
        assert "10.0." not in json.dumps(sent)  # the agents' addresses (bench: 10.0.x.y)
        assert "TF_CONFIG" not in {v["name"] for v in sent["command"]["environment"]["variables"]}
        if n % 500 == 0:
            assert wire_bench.encoded(mine, n) > 10 * size  # in band: every address of the job


# ---- a hostile server where the task fetches ------------------------------------------------------


class Impostor:
    """A real HTTP server of the test's own, bound where the task's URL leads once the
    framework's server is gone (a local user who took the port), answering ``body`` to any GET
    and keeping the request targets it saw."""

    def __init__(self, port: int, body: bytes) -> None:
        seen: list[str] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, kwargs={"poll_interval": 0.1})
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join(timeout=5)


def impostor_run(
    wire: ClusterWire, body: Callable[[TaskLaunch, TaskLaunch], bytes], out: Path, style: str = "both"
) -> tuple[subprocess.CompletedProcess[str], list[str], TaskLaunch]:
    """Worker 0 of a job launched by ``wire``, run as a real process after the framework's
    server closed and an impostor bound its port, answering ``body(worker 0, worker 1)``. Its
    program writes ``out`` if it ever runs."""
    command = [sys.executable, "-c", PRINTER + f";open({str(out)!r},'w').close()", *FLAGS]
    tasks = wire.prepare(job_launches("{worker: {count: 2}}", style, command=command))
    assert wire.server is not None
    port = wire.server.port
    wire.server.close()
    impostor = Impostor(port, body(tasks[0], tasks[1]))
    try:
        return run_task(tasks[0]), impostor.seen, tasks[0]
    finally:
        impostor.close()


def forged(launch: TaskLaunch) -> bytes:
    """A document as a hostile server would have the task apply: another TF_CONFIG, a library
    to preload, a module path, a placeholder of its own."""
    tf_config = json.dumps(
        {"cluster": {"worker": ["evil:1", "evil:2"]}, "task": {"type": "worker", "index": 0}}
    )
    doc = {"TF_CONFIG": tf_config, "LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp/evil", "x": "X"}
    doc.update(env={"LD_PRELOAD": "/tmp/evil.so"}, flags={"x": "X"}, ps_hosts="evil:1")
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda mine, other: forged(mine), id="no MAC"),
        pytest.param(lambda mine, other: bytes(MAC_BYTES) + forged(mine), id="zero MAC"),
        pytest.param(lambda mine, other: signed("a-key-of-its-own", forged(mine)), id="its own key"),
        pytest.param(lambda mine, other: signed(key_of(other), forged(mine)), id="another task's key"),
        pytest.param(lambda mine, other: signed(key_of(mine), forged(mine))[:-1] + b" ", id="changed body"),
        pytest.param(lambda mine, other: b"", id="empty"),
    ],
)
def test_an_answer_not_signed_with_the_task_s_key_is_refused(
    wire: ClusterWire, tmp_path: Path, answer: Callable[[TaskLaunch, TaskLaunch], bytes]
) -> None:
    ran = tmp_path / "ran"
    done, seen, launch = impostor_run(wire, answer, ran)
    assert done.returncode == FETCH_FAILED_EXIT, done
    assert done.stderr == "tfdeclare: cannot fetch the cluster: bad signature\n"
    assert done.stdout == "" and not ran.exists()  # the program never ran
    assert len(seen) == 1 and token_of(launch) in seen[0]  # the impostor got the token...
    assert key_of(launch) not in seen[0]  # ...never the key


def test_even_a_signed_answer_sets_tf_config_and_the_four_placeholders_only(
    wire: ClusterWire, tmp_path: Path
) -> None:
    """Were the key to leak, what its holder could make a task do: no other variable
    (LD_PRELOAD, PYTHONPATH), no other placeholder than the four."""
    ran = tmp_path / "ran"
    done, _, _ = impostor_run(wire, lambda mine, other: signed(key_of(mine), forged(mine)), ran)
    assert done.returncode == 0 and ran.exists(), done.stderr
    tf_config, argv, names = json.loads(done.stdout)
    assert json.loads(tf_config)["cluster"] == {"worker": ["evil:1", "evil:2"]}
    assert argv == ["--ps=evil:1", "--w={worker_hosts}", "--job={job_name}", "--i={task_index}", "{x}"]
    assert not {"LD_PRELOAD", "PYTHONPATH", "x", "env", "flags", FETCH_ENV} & set(names)


@pytest.mark.parametrize(
    ("style", "tf_config", "argv"),
    [
        ("tf_config", True, FLAGS),  # the argv as written, as in band
        ("legacy_flags", False, ["--ps=evil:1", *FLAGS[1:]]),
    ],
)
def test_a_job_s_bootstrap_applies_only_what_its_style_delivers(
    wire: ClusterWire, tmp_path: Path, style: str, tf_config: bool, argv: list[str]
) -> None:
    """A tf_config job's bootstrap replaces no placeholder, a legacy_flags job's sets no
    TF_CONFIG, even from an answer signed with the task's key that holds both."""
    ran = tmp_path / "ran"
    done, _, launch = impostor_run(wire, lambda mine, other: signed(key_of(mine), forged(mine)), ran, style)
    assert launch.argv[2] == BOOTSTRAPS[ClusterSpecStyle(style)]
    assert done.returncode == 0 and ran.exists(), done.stderr
    seen_tf_config, seen_argv, names = json.loads(done.stdout)
    assert (seen_tf_config is not None) == tf_config and ("TF_CONFIG" in names) == tf_config
    assert seen_argv == argv
    assert not {"LD_PRELOAD", "PYTHONPATH", "x", "env", "flags", FETCH_ENV} & set(names)


@pytest.mark.parametrize("style", list(ClusterSpecStyle))
def test_the_bootstrap_is_python_3_6_and_each_style_s_own(style: ClusterSpecStyle) -> None:
    """The bootstrap parses as Python 3.6 (TensorFlow 1.x images), and a style's carries only
    the code of what it applies."""
    program = BOOTSTRAPS[style]
    ast.parse(program, feature_version=(3, 6))
    assert ("TF_CONFIG" in program) == (style is not ClusterSpecStyle.LEGACY_FLAGS)
    assert ("re.sub" in program) == (style is not ClusterSpecStyle.TF_CONFIG)
    assert len({*BOOTSTRAPS.values()}) == 3


def test_a_health_check_gets_neither_the_key_nor_the_token(wire: ClusterWire) -> None:
    extra = "  healthCheck: {exec: {command: [check]}}\n"
    launch = wire.prepare(job_launches("{worker: {count: 1}}", extra=extra))[0]
    info = task_info(launch, "agent-1", task_labels(launch, "me"))
    command, check = json.dumps(info["command"]), json.dumps(info["health_check"])
    assert f'"{FETCH_ENV}"' in command and '"TFDECLARE_JOB"' not in command
    assert f'"{FETCH_ENV}"' not in check and key_of(launch) not in check and token_of(launch) not in check
    for name, value in launch.env:  # the task's variables, as its program has them
        assert name == FETCH_ENV or json.dumps({"name": name, "value": value}) in check
    for name in IDENTITY_ENV:
        assert (
            json.dumps({"name": name, "value": dict(job_launches("{worker: {count: 1}}")[0].env)[name]})
            in check
        )


# ---- hostile requests ----------------------------------------------------------------------------


@pytest.fixture
def served(wire: ClusterWire) -> tuple[ClusterServer, TaskLaunch]:
    launch = wire.prepare(job_launches("{worker: {count: 2}}"))[0]
    assert wire.server is not None
    return wire.server, launch


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


GOOD = f"{ROUTE}?token=TOKEN"


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [
        ("GET", GOOD, 200),
        ("GET", "/TOKEN", 200),  # the form tasks are given
        ("GET", "/TOKENx", 403),
        ("GET", "/KEY", 403),
        ("GET", "/TOKEN?x=1", 404),
        ("GET", "/TOKEN/", 404),
        ("GET", "/./TOKEN", 404),
        ("GET", "/TOKEN%00", 404),
        ("GET", "/TOKEN" + "x" * 100, 404),
        ("GET", "/", 404),
        ("POST", "/TOKEN", 501),
        ("GET", f"{ROUTE}?task=worker-0", 400),  # no token
        ("GET", f"{ROUTE}?token=wrong", 403),
        ("GET", f"{ROUTE}?token=", 400),
        ("GET", f"{ROUTE}?token=TOKENx", 403),
        ("GET", f"{ROUTE}?token=KEY", 403),  # the key is no token
        ("GET", "/?token=TOKEN", 404),
        ("GET", f"{ROUTE}/../../etc/passwd?token=TOKEN", 404),
        ("GET", "/v1/../v1/cluster?token=TOKEN", 404),
        ("GET", f"{ROUTE}%2f..%2fx?token=TOKEN", 404),
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
def test_hostile_requests(
    served: tuple[ClusterServer, TaskLaunch], method: str, target: str, status: int
) -> None:
    server, launch = served
    got, body = ask(server, method, target.replace("TOKEN", token_of(launch)).replace("KEY", key_of(launch)))
    assert got == status, body
    if status == 200:
        assert body == signed(key_of(launch), body[MAC_BYTES:])
        assert set(json.loads(body[MAC_BYTES:])) == {"TF_CONFIG"}
    else:
        assert b"h0:" not in body and b"h1:" not in body  # nothing of the cluster leaks


def test_a_huge_request_is_refused(served: tuple[ClusterServer, TaskLaunch]) -> None:
    server, launch = served
    good = GOOD.replace("TOKEN", token_of(launch))
    assert ask(server, "GET", good, {"X-Big": "x" * 70_000})[0] == 431
    assert ask(server, "GET", good, {f"X-{n}": "1" for n in range(150)})[0] == 431
    assert ask(server, "GET", good)[0] == 200  # still serving


def test_a_forgotten_job_s_token_is_refused(served: tuple[ClusterServer, TaskLaunch]) -> None:
    server, launch = served
    server.forget("j")
    assert ask(server, "GET", GOOD.replace("TOKEN", token_of(launch)))[0] == 403


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
    given = server.register("j", "g1", source, [(f"t{i}", TaskKey(Role.WORKER, i)) for i in range(3)])
    assert server.answer(f"{ROUTE}?token={given['worker-0'][0]}")[0] == 200
    assert server.pending() == {"t1", "t2"}

    def t2_ended(ids: set[str]) -> set[str]:
        return ids & {"t2"}

    def advance(ids: set[str]) -> set[str]:
        clock.now += 301  # past fetchWaitSeconds (300) while t1 has not fetched
        return set()

    assert server.wait_fetched(300, lambda ids: t2_ended(ids) | advance(ids)) == {"t1"}
    assert server.pending() == {"t1"}  # t2 is awaited no more
    assert server.answer(f"{ROUTE}?token={given['worker-1'][0]}")[0] == 200
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


def _fetching_entry(task_id: str, attempt: int = 0, **changes: object) -> TaskEntry:
    entry = TaskEntry(task_id, "j", "worker", 0, attempt, "c", "s", 1, 1, 0, "a", "h", 1, "", 0.0)
    entry.fetches_cluster = True
    for name, value in changes.items():
        setattr(entry, name, value)
    return entry


@pytest.mark.parametrize(("answered", "cause"), [(False, EndCause.CLUSTER_UNDELIVERED), (True, EndCause.JOB)])
def test_exit_86_is_the_program_s_once_the_server_answered_the_task(answered: bool, cause: EndCause) -> None:
    """The bootstrap exits 86 only before it runs the program; after the server answered, an
    exit 86 is the program's own and counts against its job (not a platform event, which
    would retry a program that always exits 86 up to ``platformRestartLimit``)."""
    failed = _fetching_entry(
        "t1", state="TASK_FAILED", message="Command exited with status 86", cluster_fetched=answered
    )
    seen = observed_task(failed, 0.0, 60.0)
    assert (seen.exit_code, seen.cause) == (86, cause)
    assert TaskEntry.from_json(failed.to_json()).cluster_fetched is answered  # journaled


def test_each_answer_is_told_with_its_task(tmp_path: Path) -> None:
    source = job_launches("{worker: {count: 2}}", "both")[0].cluster
    assert source is not None
    told: list[Fetched] = []
    server = ClusterServer(ClusterServerConfig(), told=told.append)
    given = server.register("j", "g1", source, [("t0", TaskKey(Role.WORKER, 0))])
    assert server.answer("/" + "x" * 40)[0] == 403 and told == []  # no answer, nothing told
    assert server.answer(f"/{given['worker-0'][0]}")[0] == 200
    assert told == [Fetched("j", TaskKey(Role.WORKER, 0), "t0")]
    later = ClusterServer(ClusterServerConfig(), told=told.append)  # the next process: no task ids
    later.restore(server.saved()["generations"])
    assert later.answer(f"/{given['worker-0'][0]}")[0] == 200
    assert told[-1] == Fetched("j", TaskKey(Role.WORKER, 0), None)
    # the loop marks the task registered for it; for an earlier process's, the oldest live
    # task of the slot that fetches and has not
    table = TaskTable(tmp_path)
    ended = _fetching_entry("j.w0.0", 0, state="TASK_FAILED")
    older = _fetching_entry("j.w0.1", 1, state="TASK_RUNNING")
    newer = _fetching_entry("j.w0.2", 2)
    table.record_launch([ended, older, newer])
    table.cluster_fetched(Fetched("j", TaskKey(Role.WORKER, 0), None))
    assert [e.cluster_fetched for e in (ended, older, newer)] == [False, True, False]
    table.cluster_fetched(Fetched("j", TaskKey(Role.WORKER, 0), "j.w0.2"))
    assert newer.cluster_fetched
    table.journal.sync()
    assert all(e.cluster_fetched for e in TaskTable(tmp_path).tasks.values() if e.attempt)  # journaled


def test_a_server_hands_its_generations_to_the_next_one() -> None:
    source = job_launches("{ps: {count: 1}, worker: {count: 2}}", "both")[0].cluster
    assert source is not None
    first = ClusterServer(ClusterServerConfig())
    given = first.register("j", "g1", source, [("t0", TaskKey(Role.WORKER, 0))])
    saved = json.loads(json.dumps(first.saved()))  # as written to and read from the file
    (secret,) = [g["secret"] for g in saved["generations"]]
    second = ClusterServer(ClusterServerConfig())
    second.restore(saved["generations"])
    for key in source.addresses:  # any task of the generation: the first's or the second's
        token, mac_key = credentials(secret, key.name)
        served = signed(mac_key, json.dumps(document(source, key), separators=(",", ":")).encode())
        assert second.answer(f"{ROUTE}?token={token}") == (200, served)
    assert second.pending() == set()  # nothing to wait for: the tasks were the first's
    again = second.register("j", "g1", source, [("t1", TaskKey(Role.WORKER, 1))])  # same generation
    assert again["worker-1"] == credentials(secret, "worker-1")
    assert second.register("j", "g2", source, [("t1", TaskKey(Role.WORKER, 1))]) != again
    assert second.answer(f"{ROUTE}?token={given['worker-0'][0]}")[0] == 403
    with pytest.raises((ValueError, KeyError, TypeError)):
        ClusterServer(ClusterServerConfig()).restore([{**saved["generations"][0], "style": "nonsense"}])
    short = {**saved["generations"][0], "secret": "short"}
    third = ClusterServer(ClusterServerConfig())
    third.restore([short])  # a secret too short to be ours is not served
    assert third.answer(f"{ROUTE}?token={credentials('short', 'worker-0')[0]}")[0] == 403
    text = repr(second._jobs) + repr(second)  # a generation's repr holds no secret, key nor token
    assert secret not in text and mac_key not in text and token not in text


# The bootstrap of a ``both`` job as the version before this one wrote it (its other styles' differ
# only in what they apply): its variable TFDECLARE_CLUSTER held ``KEY URL``, the URL of the
# route ``/v1/cluster?token=TOKEN``; the task's TFDECLARE_* variables were in its TaskInfo.
PREVIOUS_BOOTSTRAP = (
    "import hmac,json,os,re,sys,time,urllib.request as u\ne=os.environ;k,q=e.pop('TFDECLARE_CLUSTER')"
    ".split();o=u.build_opener(u.ProxyHandler({}));c='tfdeclare: cannot '\nfor n in range(60):\n try:"
    "b=o.open(q,timeout=10).read(1<<24);w=hmac.compare_digest(b[:32],hmac.new(k.encode(),b[32:],'sha256')"
    ".digest())or'not signed by the framework';break\n except Exception as x:\n  w=x\n  if getattr(x,'code"
    "',0)in(403,404):break\n  time.sleep(2)\nif w!=1:print(c+'fetch the cluster:',w,file=sys.stderr);sys"
    ".exit(86)\nd=json.loads(b[32:])\ne['TF_CONFIG']=d['TF_CONFIG']\na=[re.sub('{(ps_hosts|worker_hosts|"
    "job_name|task_index)}',lambda m:d.get(m[1],m[0]),s)for s in sys.argv[1:]]\ntry:os.execvp(a[0],a)\ne"
    "xcept OSError as x:sys.exit(c+'run %s: %s'%(a[0],x))\n"
)


def test_tasks_launched_before_an_upgrade_fetch_from_the_upgraded_process(tmp_path: Path) -> None:
    """A framework process of this version, started on ``<state-dir>/mesos/clusters.json`` as
    the version before wrote it, serves the tasks that version launched: real processes
    running its bootstrap with its variable (the old route, query and token), each getting its
    TF_CONFIG and argv as in band; the old form of a wrong token is refused as before."""
    tasks = job_launches("{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}}", "both")
    source = tasks[0].cluster
    assert source is not None
    secret = "s" * 43
    listed = sorted([k.role.value, k.index, a] for k, a in source.addresses.items())
    saved = {
        "job": "j",
        "name": generation("j", 0, source),
        "secret": secret,
        "style": "both",
        "addresses": listed,
    }
    (tmp_path / "clusters.json").write_text(json.dumps({"port": 0, "generations": [saved]}))
    wire = ClusterWire(ClusterServerConfig(min_bytes=0), tmp_path)
    wire.start()
    assert wire.server is not None
    try:
        for in_band in tasks:
            token, key = credentials(secret, in_band.key.name)
            env = {
                **dict(in_band.env),
                "TFDECLARE_CLUSTER": f"{key} {wire.server.base_url}{ROUTE}?token={token}",
            }
            del env["TF_CONFIG"]
            before = replace(
                in_band,
                argv=("python3", "-c", PREVIOUS_BOOTSTRAP, *source.argv[in_band.key.role]),
                env=tuple(sorted(env.items())),
            )
            done = run_task(before)
            assert done.returncode == 0, done.stderr
            tf_config, argv, names = json.loads(done.stdout)
            assert tf_config == dict(in_band.env)["TF_CONFIG"] and argv == list(in_band.argv[3:])
            assert "TFDECLARE_CLUSTER" not in names
        wrong = replace(before, env=tuple((n, v.replace(token, "x" * 22)) for n, v in before.env))
        assert run_task(wrong).stderr == "tfdeclare: cannot fetch the cluster: HTTP Error 403: Forbidden\n"
        # and the job's next launch (the same generation) is given the new form, by the same secret
        again = wire.prepare(tasks)[0]
        assert dict(again.env)[FETCH_ENV].split()[:2] == [
            credentials(secret, "chief-0")[1],
            f"{wire.server.base_url}/{credentials(secret, 'chief-0')[0]}",
        ]
    finally:
        wire.server.close()


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
