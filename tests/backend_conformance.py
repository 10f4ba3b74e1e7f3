"""The backend conformance suite: what every backend (local, mesos) must do, through the
protocol only. ``test_backend_conformance.py`` runs it against each backend.

A harness gives the suite a fresh backend over a state folder, the capacity it offers
(4 cpus, 4096 MiB, 0 GPUs, in one place), and a way to make a second backend instance over
the same state (adoption after a controller restart).

The suite waits on the backends' own ``watch`` notifications, never a fixed sleep. A harness
with an injected ``clock`` (the in-memory fake of ``tests/fake_backend.py``) moves time
instead of waiting, so "nothing happened yet" is checked at an exact instant; it runs the
checks that need no real process (those not marked ``needs_processes``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.fake_backend import IGNORES_SIGTERM, Clock
from tests.waiting import wait_until
from tfdeclare.backends.base import Backend, BackendError, LogOffsetError
from tfdeclare.core.enums import Role, SecretSource, TaskState
from tfdeclare.core.run.launches import gang_request, placed
from tfdeclare.core.run.launches import launches as product_launches
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import (
    Address,
    GangRequest,
    ObservedTask,
    Placement,
    SlotRequest,
    TaskKey,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
    Volume,
)
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.resources import Resources
from tfdeclare.core.spec.secrets import SecretRef

SMALL = Resources(0.5, 128, 0)


@dataclass
class Harness:
    make: Callable[[], Backend]  # a backend over the harness's state (a new instance each call)
    workdir: Path
    clock: Clock | None = None  # the backend's injected clock, where it has one
    backends: list[Backend] = field(default_factory=list)
    counter: int = 0
    changed: threading.Event = field(default_factory=threading.Event)  # a backend's watch fired
    # Where tasks run in containers: the image, its Python, what is mounted (the suite's
    # tasks write into ``workdir``), and how to kill a task's process from outside (its pid
    # as the task sees it is not the machine's).
    image: str | None = None
    python: str = sys.executable
    volumes: tuple[Volume, ...] = ()
    kill_from_outside: Callable[[str, int], None] | None = None

    @property
    def sleeper(self) -> list[str]:
        return [self.python, "-c", "import time; time.sleep(60)"]

    def backend(self) -> Backend:
        backend = self.make()
        backend.watch(self.changed.set)
        self.backends.append(backend)
        _HARNESS_OF[backend] = self
        return backend

    def now(self) -> float:
        return self.clock() if self.clock is not None else time.monotonic()

    def pause(self, longest: float = 0.25) -> None:
        """Until something may have changed: the injected clock moves on a little, or a real
        backend's ``watch`` fires (at most ``longest``: a predicate may also wait on files)."""
        if self.clock is not None:
            self.clock.advance(0.05)
            return
        self.changed.wait(longest)
        self.changed.clear()

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


_HARNESS_OF: weakref.WeakKeyDictionary[Backend, Harness] = weakref.WeakKeyDictionary()


def pause(backend: Backend, longest: float = 0.25) -> Callable[[], None] | None:
    """How to wait until something may have changed for ``backend`` (see ``Harness.pause``);
    None for a backend made outside a harness (``wait_until`` then looks every 0.05 s)."""
    harness = _HARNESS_OF.get(backend)
    return None if harness is None else lambda: harness.pause(longest)


def gang(
    job: str, n: int, resources: Resources = SMALL, previous: dict[int, Address] | None = None
) -> GangRequest:
    slots = tuple(SlotRequest(TaskKey(Role.WORKER, i), resources, (previous or {}).get(i)) for i in range(n))
    return GangRequest(job, 0, slots)


def launches(
    harness: Harness,
    placement: Placement,
    argv: Sequence[str],
    *,
    grace: float = 5.0,
    env: dict[str, str] | None = None,
    resources: Resources = SMALL,
    working_dir: str | None = None,
) -> list[TaskLaunch]:
    harness.counter += 1
    out = []
    for slot in placement.slots:
        out.append(
            TaskLaunch(
                task_id=f"{placement.job}.t{harness.counter}.{slot.key.name}",
                job=placement.job,
                key=slot.key,
                attempt=0,
                spec_hash="s" * 64,
                config_hash="c" * 16,
                argv=tuple(argv),
                env=tuple(sorted({"PATH": os.environ["PATH"], **(env or {})}.items())),
                resources=resources,
                slot=slot,
                working_dir=working_dir,
                image=harness.image,
                volumes=harness.volumes,
                grace_period_s=grace,
                source_dir=str(harness.workdir),
            )
        )
    return out


def look(backend: Backend) -> Sequence[ObservedTask]:
    """What a controller pass sees: the backend's upkeep, then its report. An upkeep that says
    the cluster or engine cannot be reached does not end the pass (the controller reports it
    and looks on); any other upkeep error fails the test."""
    try:
        backend.tend()
    except BackendError as err:
        if not err.code.unreachable:
            raise
    return backend.observe()


def wait_for(
    backend: Backend,
    predicate: Callable[[dict[str, ObservedTask]], bool],
    timeout: float = 20.0,
) -> dict[str, ObservedTask]:
    """The tasks ``backend`` reports once ``predicate`` holds for them (asked after each pass)."""

    last: dict[str, ObservedTask] = {}

    def seen() -> dict[str, ObservedTask] | None:
        last.clear()
        last.update((t.task_id, t) for t in look(backend))
        return dict(last) if predicate(last) else None

    return wait_until(
        seen,
        timeout,
        what=lambda: f"the backend's tasks to match; tasks: {last}",
        pause=pause(backend),
    )


def place_soon(backend: Backend, request: GangRequest, timeout: float = 15.0) -> Placement:
    """Place a gang that fits, as the controller does: asking again on later passes while the
    backend waits for resources (Mesos: the next offer round after a launch)."""

    def placed() -> Placement | None:
        answer = backend.place(request)
        assert isinstance(answer, Placement) or answer.reason is not UnplacedReason.UNSCHEDULABLE, answer
        return answer if isinstance(answer, Placement) else None

    return wait_until(placed, timeout, what=f"a placement for {request.job}", pause=pause(backend))


def read_log_until(backend: Backend, task_id: str, wanted: bytes, timeout: float = 10.0) -> bytes:
    last = b""

    def read() -> bytes | None:
        nonlocal last
        last = backend.read_log(task_id, 0).data
        return last if wanted in last else None

    what = lambda: f"{wanted!r} in the log of {task_id}: {last!r}"  # noqa: E731
    return wait_until(read, timeout, what=what, pause=pause(backend, 0.05))


def start(
    harness: Harness, backend: Backend, job: str, n: int, argv: Sequence[str], **kw: Any
) -> list[TaskLaunch]:
    placement = place_soon(backend, gang(job, n))
    tasks = launches(harness, placement, argv, **kw)
    backend.launch(placement, tasks)
    return tasks


def states(tasks: dict[str, ObservedTask], ids: Sequence[str]) -> list[TaskState]:
    return [tasks[i].state if i in tasks else None for i in ids]  # type: ignore[misc]


PY = sys.executable
SLEEPER = [PY, "-c", "import time; time.sleep(60)"]


def needs_processes(check: Callable[[Harness], None]) -> Callable[[Harness], None]:
    """Marks a check that needs the tasks' programs to really run (exit codes, output, files)."""
    check.needs_processes = True  # type: ignore[attr-defined]
    return check


def ended(ids: Sequence[str]) -> Callable[[dict[str, ObservedTask]], bool]:
    return lambda ts: all(i in ts and ts[i].state.ended for i in ids)


def running(ids: Sequence[str]) -> Callable[[dict[str, ObservedTask]], bool]:
    return lambda ts: states(ts, ids) == [TaskState.RUNNING] * len(ids)


# ---- the suite ---------------------------------------------------------------------------


def check_gang_launch_and_observe(harness: Harness) -> None:
    backend = harness.backend()
    launched = start(harness, backend, "g", 3, harness.sleeper)
    ids = [t.task_id for t in launched]
    tasks = wait_for(backend, running(ids))
    ports = {tasks[i].port for i in ids}
    assert len(ports) == 3, "every task of a gang gets its own port"
    assert all(tasks[i].host for i in ids)
    assert {tasks[i].key for i in ids} == {TaskKey(Role.WORKER, n) for n in range(3)}
    backend.stop(ids, 2.0)
    wait_for(backend, ended(ids))


@needs_processes
def check_exit_codes(harness: Harness) -> None:
    backend = harness.backend()
    ok = start(harness, backend, "ok", 1, [harness.python, "-c", "print('fine')"])[0].task_id
    bad = start(harness, backend, "bad", 1, [harness.python, "-c", "import sys; sys.exit(3)"])[0].task_id
    shell_free = start(
        harness,
        backend,
        "argv",
        1,
        [harness.python, "-c", "import sys; sys.exit(len(sys.argv))", "a;b", "$X"],
    )[0].task_id
    tasks = wait_for(backend, ended([ok, bad, shell_free]))
    assert (tasks[ok].state, tasks[ok].exit_code) == (TaskState.SUCCEEDED, 0)
    assert (tasks[bad].state, tasks[bad].exit_code) == (TaskState.FAILED, 3)
    assert tasks[shell_free].exit_code == 3, "argv is passed as a list, never through a shell"


@needs_processes
def check_killed_from_outside_is_a_failure_with_the_signal(harness: Harness) -> None:
    backend = harness.backend()
    pid_file = harness.workdir / "victim.pid"
    task_id = start(
        harness,
        backend,
        "victim",
        1,
        [
            harness.python,
            "-c",
            f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(60)",
        ],
    )[0].task_id
    wait_for(
        backend,
        lambda ts: (
            ts[task_id].state is TaskState.RUNNING and pid_file.exists() and pid_file.read_text() != ""
        ),
    )
    if harness.kill_from_outside is not None:
        harness.kill_from_outside(task_id, int(pid_file.read_text()))
    else:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
    tasks = wait_for(backend, ended([task_id]))
    assert (tasks[task_id].state, tasks[task_id].exit_code) == (TaskState.FAILED, 128 + signal.SIGKILL)


def check_stop_with_grace_then_kill(harness: Harness) -> None:
    backend = harness.backend()
    # Each prints "ready" once its own program runs: a kill before that reaches what starts it
    # (on Mesos, upstream's ``mesos-containerizer launch`` ends with status 1 on a signal that
    # comes before it has executed the command), not the program this check is about.
    polite_script = "import time; print('ready', flush=True); time.sleep(60)"
    polite = start(harness, backend, "polite", 1, [harness.python, "-c", polite_script])[0].task_id
    stubborn_script = (
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(60)"
    )
    stubborn = start(
        harness, backend, "stubborn", 1, [harness.python, "-c", stubborn_script, IGNORES_SIGTERM]
    )[0].task_id
    wait_for(backend, running([polite, stubborn]))
    if harness.clock is None:
        read_log_until(backend, polite, b"ready")
        read_log_until(backend, stubborn, b"ready")  # its SIGTERM handler is in place
    started = harness.now()
    backend.stop([polite, stubborn], 1.5)
    tasks = wait_for(backend, ended([polite]))
    polite_end = (tasks[polite].state, tasks[polite].exit_code, tasks[polite].message)
    assert polite_end[:2] == (TaskState.STOPPED, 128 + signal.SIGTERM), polite_end
    if harness.clock is not None:  # an exact instant: still stopping just before the grace ends
        harness.clock.advance(started + 1.45 - harness.now())
        assert {t.task_id: t for t in backend.observe()}[stubborn].state is TaskState.STOPPING
    tasks = wait_for(backend, ended([stubborn]))
    assert harness.now() - started >= 1.4, "SIGKILL only after the grace period"
    assert tasks[stubborn].state is TaskState.STOPPED and tasks[stubborn].exit_code == 128 + signal.SIGKILL


def check_resources_are_accounted(harness: Harness) -> None:
    backend = harness.backend()
    too_big = backend.place(gang("huge", 1, Resources(64, 128, 0)))
    assert isinstance(too_big, Unplaced) and too_big.reason is UnplacedReason.UNSCHEDULABLE
    first = place_soon(backend, gang("first", 3, Resources(1, 512, 0)))
    tasks = launches(harness, first, harness.sleeper, resources=Resources(1, 512, 0))
    backend.launch(first, tasks)
    ids = [t.task_id for t in tasks]
    wait_for(backend, running(ids))
    second = backend.place(gang("second", 2, Resources(1, 512, 0)))
    assert isinstance(second, Unplaced) and second.reason is not UnplacedReason.UNSCHEDULABLE, second
    backend.stop(ids, 1.0)
    wait_for(backend, ended(ids))
    again = place_soon(backend, gang("second", 2, Resources(1, 512, 0)))
    backend.release(again)


def check_release_gives_the_resources_back(harness: Harness) -> None:
    backend = harness.backend()
    whole = gang("whole", 4, Resources(1, 512, 0))  # all 4 cpus
    held = place_soon(backend, whole)
    other = gang("other", 1, Resources(1, 512, 0))
    meanwhile = backend.place(other)
    assert isinstance(meanwhile, Unplaced), "a placement holds its resources until launch or release"
    assert meanwhile.reason is not UnplacedReason.UNSCHEDULABLE, meanwhile
    backend.release(held)
    backend.release(place_soon(backend, other))  # what was released is placed again
    backend.release(place_soon(backend, whole))  # and all of it is free once more


def check_ports_are_reused_for_a_slot(harness: Harness) -> None:
    backend = harness.backend()
    first = start(harness, backend, "reuse", 2, harness.sleeper)
    ids = [t.task_id for t in first]
    tasks = wait_for(backend, running(ids))
    previous = {
        i: Address(tasks[t.task_id].host or "", tasks[t.task_id].port or 0) for i, t in enumerate(first)
    }
    backend.stop(ids, 1.0)
    wait_for(backend, ended(ids))
    placement = place_soon(backend, gang("reuse", 2, previous=previous))
    assert [s.address for s in placement.slots] == [previous[0], previous[1]]
    backend.release(placement)


def check_launch_is_idempotent_and_adoptable(harness: Harness) -> None:
    backend = harness.backend()
    placement = place_soon(backend, gang("once", 1))
    tasks = launches(harness, placement, harness.sleeper)
    backend.launch(placement, tasks)
    backend.launch(placement, tasks)  # a retried launch never starts a task twice
    task_id = tasks[0].task_id
    wait_for(backend, lambda ts: ts.get(task_id) is not None and ts[task_id].state is TaskState.RUNNING)
    assert sum(1 for t in backend.observe() if t.job == "once") == 1
    other = harness.backend()  # a controller restart: the running task is adopted
    adopted = wait_for(other, lambda ts: task_id in ts and ts[task_id].state is TaskState.RUNNING)
    assert adopted[task_id].key == TaskKey(Role.WORKER, 0)
    other.stop([task_id], 1.0)
    wait_for(other, ended([task_id]))


def check_watch_notifies_when_a_task_ends(harness: Harness) -> None:
    backend = harness.backend()
    notified = threading.Event()
    backend.watch(notified.set)
    task_id = start(harness, backend, "watched", 1, harness.sleeper)[0].task_id
    wait_for(backend, running([task_id]))
    backend.stop([task_id], 1.0)
    deadline = time.monotonic() + 20
    while True:  # only a notification makes us look again: without one, this times out
        remaining = deadline - time.monotonic()
        if harness.clock is not None:
            harness.clock.advance(0.05)
            backend.observe()  # time passes for the fake only when somebody looks
        assert notified.wait(max(0.0, remaining)), "watch never said that the task ended"
        notified.clear()
        if {t.task_id: t for t in backend.observe()}[task_id].state.ended:
            break


def check_purge_forgets_a_deleted_jobs_tasks_and_logs(harness: Harness) -> None:
    backend = harness.backend()
    gone = start(harness, backend, "gone", 1, harness.sleeper)[0].task_id
    kept = start(harness, backend, "kept", 1, harness.sleeper)[0].task_id
    wait_for(backend, running([gone, kept]))
    backend.stop([gone, kept], 1.0)
    wait_for(backend, ended([gone, kept]))
    backend.read_log(gone)  # readable before
    backend.purge("gone")
    assert gone not in {t.task_id for t in backend.observe()}
    try:
        chunk = backend.read_log(gone)
    except BackendError:
        pass
    else:
        raise AssertionError(f"the log of a purged task is still readable: {chunk}")
    assert kept in {t.task_id for t in backend.observe()}, "purge touches only the job named"
    backend.read_log(kept)


def check_purge_leaves_a_running_task_alone(harness: Harness) -> None:
    backend = harness.backend()
    launched = start(harness, backend, "half", 2, harness.sleeper)
    done, alive = launched[0].task_id, launched[1].task_id
    wait_for(backend, running([done, alive]))
    backend.stop([done], 1.0)
    wait_for(backend, ended([done]))
    backend.purge("half")
    tasks = {t.task_id: t for t in backend.observe()}
    assert done not in tasks and tasks[alive].state is TaskState.RUNNING
    backend.read_log(alive)
    backend.stop([alive], 1.0)
    wait_for(backend, ended([alive]))


@needs_processes
def check_logs_and_forget(harness: Harness) -> None:
    backend = harness.backend()
    task_id = start(
        harness, backend, "talk", 1, [harness.python, "-c", "print('hello from the task'); print('é')"]
    )[0].task_id
    wait_for(backend, ended([task_id]))
    data = read_log_until(backend, task_id, "é".encode())
    assert b"hello from the task" in data
    partial = backend.read_log(task_id, 6)
    assert partial.data.startswith(b"from")
    # the whole log: on a real Mesos agent the executor's own lines (stderr) follow the task's

    def read_to_end() -> bool:
        nonlocal data
        while (chunk := backend.read_log(task_id, len(data))).data:
            data += chunk.data
        return chunk.complete

    wait_until(read_to_end, 30, what="the log's end")
    end = backend.read_log(task_id, len(data))  # at the end: nothing more, not an error
    assert (end.data, end.next_offset) == (b"", len(data))
    for beyond in (len(data) + 1, 2**63 - 1):
        try:
            backend.read_log(task_id, beyond)
        except LogOffsetError as err:
            assert (err.offset, err.size) == (beyond, len(data))
        else:
            raise AssertionError(f"offset {beyond} past the end of a {len(data)}-byte log was read")
    backend.forget([task_id])
    assert task_id not in {t.task_id for t in backend.observe()}
    assert b"hello" in backend.read_log(task_id, 0).data, "logs stay readable after forget"
    backend.purge("talk")


@needs_processes
def check_working_dir_and_environment(harness: Harness) -> None:
    """Where a task really runs, as it sees it: by default its folder shows the files of the
    spec's folder, with a relative ``workingDir`` those of that folder under it (the local
    backend runs the task in a working folder of its own with them linked in), and with an
    absolute ``workingDir`` it runs exactly there. Checked by the task itself."""
    backend = harness.backend()
    out = harness.workdir / "env-out.json"
    script = (
        "import os, json, sys; "
        "marker = open('marker.txt').read() if os.path.exists('marker.txt') else None; "
        "open(sys.argv[1], 'w').write(json.dumps({'cwd': os.getcwd(), 'marker': marker, 'x': os.environ['X']}))"
    )
    sub = harness.workdir / "sub"
    sub.mkdir()
    (harness.workdir / "marker.txt").write_text("spec folder")
    (sub / "marker.txt").write_text("sub folder")
    seen = {}
    for label, working_dir in (("default", None), ("relative", "sub"), ("absolute", str(sub))):
        out.unlink(missing_ok=True)
        task_id = start(
            harness,
            backend,
            f"env-{label}",
            1,
            [harness.python, "-c", script, str(out)],
            env={"X": "a b;c"},
            working_dir=working_dir,
        )[0].task_id
        tasks = wait_for(backend, ended([task_id]))
        assert tasks[task_id].state is TaskState.SUCCEEDED, backend.read_log(task_id).data
        seen[label] = json.loads(out.read_text())
        assert seen[label]["x"] == "a b;c"
    assert seen["default"]["marker"] == "spec folder"
    assert seen["relative"]["marker"] == "sub folder"
    assert Path(seen["absolute"]["cwd"]).resolve() == sub.resolve()
    assert seen["absolute"]["marker"] == "sub folder"


@needs_processes
def check_secrets_reach_the_task_and_nothing_else(harness: Harness) -> None:
    """Environment values given by reference (the controller's environment, a controller file,
    a file on the task's machine) are in the task's environment, and nowhere in the backend's
    state. One that cannot be read fails the launch with a message naming the variable only."""
    backend = harness.backend()
    values = {
        "FROM_ENV": "env-Secret-1x7Q",
        "FROM_FILE": "file-Secret-2y8R",
        "FROM_AGENT": "agent-Secret-3z9S",
    }
    controller_file, agent_file = harness.workdir / "controller-secret", harness.workdir / "agent-secret"
    controller_file.write_text(values["FROM_FILE"] + "\n")
    agent_file.write_text(values["FROM_AGENT"] + "\n")
    os.environ["TFD_CONFORMANCE_SECRET"] = values["FROM_ENV"]
    refs = (
        ("FROM_ENV", SecretRef(SecretSource.ENV, "TFD_CONFORMANCE_SECRET")),
        ("FROM_FILE", SecretRef(SecretSource.FILE, str(controller_file))),
        ("FROM_AGENT", SecretRef(SecretSource.AGENT_FILE, str(agent_file))),
    )
    out = harness.workdir / "secrets-out.json"
    script = "import os, json, sys; open(sys.argv[1], 'w').write(json.dumps({k: os.environ.get(k) for k in sys.argv[2:]}))"
    try:
        placement = place_soon(backend, gang("secrets", 1))
        tasks = [
            replace(t, secrets=refs)
            for t in launches(harness, placement, [harness.python, "-c", script, str(out), *values])
        ]
        backend.launch(placement, tasks)
        done = wait_for(backend, ended([tasks[0].task_id]))
        assert done[tasks[0].task_id].state is TaskState.SUCCEEDED, backend.read_log(tasks[0].task_id).data
        assert json.loads(out.read_text()) == values
        for path in (harness.workdir / "state").rglob("*"):
            if path.is_file() and not path.is_symlink() and "log" not in path.name:  # not the task output
                data = path.read_bytes()
                assert not any(v.encode() in data for v in values.values()), path
        missing = (("FROM_FILE", SecretRef(SecretSource.FILE, str(harness.workdir / "missing"))),)
        placement = place_soon(backend, gang("secrets-missing", 1))
        tasks = [
            replace(t, secrets=missing) for t in launches(harness, placement, [harness.python, "-c", "pass"])
        ]
        try:
            backend.launch(placement, tasks)
        except BackendError as err:
            assert "FROM_FILE: cannot read the file" in str(err) and "No such file" in str(err)
            backend.release(placement)
        else:
            raise AssertionError("a launch whose secret cannot be read must fail")
    finally:
        del os.environ["TFD_CONFORMANCE_SECRET"]


TF_CONFIG_SERVER = """
import json, os, socket, sys, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
host, port = config["cluster"][task["type"]][task["index"]].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does (TIME_WAIT of earlier tasks)
server.bind(("", int(port)))
server.listen()
print("listening", port, flush=True)
connection, _ = server.accept()
connection.sendall(b"hello from " + port.encode())
connection.close()
time.sleep(60)
"""


@needs_processes
def check_the_port_in_tf_config_is_the_tasks_own(harness: Harness) -> None:
    """Launches built by the controller's own code (``core/run/launches``), not by the suite:
    each task binds the port its TF_CONFIG gives it, and that is the port ``observe`` reports
    and where it answers."""
    text = (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: bound}\nspec:\n"
        f"  command: [{harness.python}, -c, {json.dumps(TF_CONFIG_SERVER)}]\n"
        "  replicas: {worker: {count: 2, resources: {cpus: 0.5, mem: 128}}}\n"
    )
    if harness.image:
        text += f"  image: {harness.image}\n"
    loaded = load_file("bound.yaml", text.encode())
    assert not loaded.diagnostics, [d.format() for d in loaded.diagnostics]
    job = loaded.jobs[0]
    record = JobRecord(
        name=job.name, uid="c0ffee", canonical=job.canonical, spec_hash=job.spec_hash, backend="any"
    )
    backend = harness.backend()
    placement = place_soon(backend, gang_request(record, record.spec.task_keys()))
    ready = placed(record, placement)
    to_launch = product_launches(ready, placement, str(harness.workdir))
    backend.launch(placement, to_launch)
    ids = [t.task_id for t in to_launch]
    tasks = wait_for(backend, running(ids))
    for task_id in ids:
        read_log_until(backend, task_id, b"listening")
        observed = tasks[task_id]
        assert observed.host and observed.port
        with socket.create_connection((observed.host, observed.port), timeout=10) as connection:
            assert connection.recv(100) == f"hello from {observed.port}".encode()
    backend.stop(ids, 1.0)
    wait_for(backend, ended(ids))


SUITE = [
    check_gang_launch_and_observe,
    check_exit_codes,
    check_killed_from_outside_is_a_failure_with_the_signal,
    check_stop_with_grace_then_kill,
    check_resources_are_accounted,
    check_release_gives_the_resources_back,
    check_ports_are_reused_for_a_slot,
    check_launch_is_idempotent_and_adoptable,
    check_watch_notifies_when_a_task_ends,
    check_purge_forgets_a_deleted_jobs_tasks_and_logs,
    check_purge_leaves_a_running_task_alone,
    check_logs_and_forget,
    check_working_dir_and_environment,
    check_the_port_in_tf_config_is_the_tasks_own,
    check_secrets_reach_the_task_and_nothing_else,
]
WITHOUT_PROCESSES = [check for check in SUITE if not getattr(check, "needs_processes", False)]
