"""The daemon end to end: real folders and real git repositories (file:// remotes), the real
CLI as a process, real task processes, its HTTP endpoints."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ORDINARY_USER, REPO, cli, kill_leftovers, worker_ports
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e  # the daemon as a process, real jobs, git repositories

TASK = str(REPO / "tests" / "e2e_task.py")
PORTS = worker_ports()
CONFIG = (
    "restartBackoff: {initialSeconds: 0.2, maxSeconds: 1}\n"
    f"local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
)


def job(name: str, mode: str = "serve", *, count: int = 1, extra: str = "") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: [python, {TASK}, {mode}]\n  env: {{OUT: {name}-out}}\n"
        f"  replicas:\n    worker: {{count: {count}, resources: {{cpus: 0.1, mem: 64}}}}\n{extra}"
    )


class Daemon:
    def __init__(self, cwd: Path, *args: str, prefix: list[str] | None = None) -> None:
        self.cwd = cwd
        self.log = cwd / f"daemon-{time.monotonic_ns()}.log"
        self.handle = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, "-m", "tfdeclare", "daemon", "--port", "0", *args],
            cwd=cwd,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.url = ""
        wait_until(
            lambda: bool(re.search(r"listening on (http://\S+)", self.text())) or self.proc.poll() is not None
        )
        match = re.search(r"listening on (http://\S+)", self.text())
        assert match, self.text()
        self.url = match.group(1)

    def text(self) -> str:
        return self.log.read_text()

    def get(self, path: str) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                body = response.read()
                return response.status, json.loads(body) if path != "/metrics" else body.decode()
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def passes(self) -> int:
        """Reconcile passes run so far (its /metrics): a test waits for passes, not for time."""
        match = re.search(r"^tfdeclare_reconcile_passes_total (\S+)$", self.get("/metrics")[1], re.M)
        assert match, "no pass counter in /metrics"
        return int(float(match.group(1)))

    def post(self, path: str) -> int:
        request = urllib.request.Request(self.url + path, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=45)
        except subprocess.TimeoutExpired:  # say where it is stuck (the daemon dumps its stacks)
            self.proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(1)  # the time to write its stacks
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.handle.close()
            raise AssertionError(f"the daemon did not stop within 45 s:\n{self.text()[-6000:]}") from None
        self.handle.close()
        return code


def status(cwd: Path, name: str) -> dict[str, Any] | None:
    path = cwd / "status" / f"{name}.yaml"
    if not path.exists():
        return None
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def sync_state(cwd: Path, name: str) -> tuple[str, str] | None:
    """The job's Synced condition as (status, reason)."""
    for condition in (status(cwd, name) or {}).get("conditions", []):
        if condition["type"] == "Synced":
            return condition["status"], condition["reason"]
    return None


def pids(folder: Path) -> list[int]:
    return sorted(json.loads(p.read_text())["pid"] for p in folder.glob("*.json")) if folder.exists() else []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().split(b") ")[1][:1] != b"Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    (tmp_path / "specs").mkdir()
    yield tmp_path
    deleted = cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], f"a task outlived its job; delete --all said: {deleted.stderr}"


def out_dir(cwd: Path, name: str, base: str = "specs") -> Path:
    folder = cwd / base / f"{name}-out"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_folder_mode_create_edit_invalid_delete(cwd: Path) -> None:
    daemon = Daemon(cwd, "--specs", "specs", "--prune", "--interval", "5")
    try:
        outputs = out_dir(cwd, "a")
        out_dir(cwd, "b")
        (cwd / "specs" / "b.yaml").write_text(job("b"))
        (cwd / "specs" / "a.yaml").write_text(job("a"))
        wait_until(lambda: len(pids(outputs)) == 1)
        wait_until(lambda: (status(cwd, "a") or {}).get("phase") == "Running")
        first = pids(outputs)[0]

        (cwd / "specs" / "a.yaml").write_text(
            job("a", extra="  env: {OUT: a-out, LR: '0.2'}\n").replace("  env: {OUT: a-out}\n", "")
        )
        wait_until(lambda: len(pids(outputs)) == 2 and not alive(first))
        assert "applied -/+ a: spec.env.LR changed" in daemon.text()

        running = [p for p in pids(outputs) if alive(p)]
        (cwd / "specs" / "a.yaml").write_text(
            "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {replicas: {worker: {count: x}}}\n"
        )
        wait_until(  # the file may be seen half-written (empty: FileHoldsNoJob) first, under load
            lambda: any(
                c["type"] == "Synced" and c["status"] == "False" and c["reason"] == "InvalidSpec"
                for c in (status(cwd, "a") or {}).get("conditions", [])
            )
        )
        synced = next(c for c in status(cwd, "a")["conditions"] if c["type"] == "Synced")  # type: ignore[index]
        assert synced["reason"] == "InvalidSpec" and "specs/a.yaml:4:" in synced["message"]
        assert "specs/a.yaml:4:" in daemon.text()
        assert all(alive(p) for p in running), "an invalid file never stops its job"

        (cwd / "specs" / "a.yaml").unlink()
        wait_until(lambda: status(cwd, "a") is None)
        wait_until(lambda: not any(alive(p) for p in running))

        (cwd / "specs" / "b.yaml").unlink()  # pruning everything at once is refused
        wait_until(lambda: sync_state(cwd, "b") == ("False", "PruneRefused"))
        assert (status(cwd, "b") or {}).get("phase") == "Running"
        assert "WARNING kept as applied (PruneRefused): b — the files define no jobs at all" in daemon.text()
        assert cli("plan", "specs", "--prune", cwd=cwd).stdout.count("--allow-empty") == 1

        health, detail = daemon.get("/healthz")
        assert health == 200 and detail["status"] == "ok"
        code, metrics = daemon.get("/metrics")
        assert (
            code == 200
            and "tfdeclare_reconcile_passes_total" in metrics
            and "tfdeclare_tasks_launched_total 3" in metrics
        )
    finally:
        assert daemon.stop() == 0
    assert "stopping (signal 15); the jobs keep running" in daemon.text()


def test_daemon_killed_then_restarted_adopts_without_duplicates(cwd: Path) -> None:
    outputs = out_dir(cwd, "keep")
    (cwd / "specs" / "keep.yaml").write_text(job("keep", count=2))
    first = Daemon(cwd, "--specs", "specs")
    wait_until(lambda: len(pids(outputs)) == 2)
    started = pids(outputs)
    second = subprocess.run(
        [sys.executable, "-m", "tfdeclare", "daemon", "--specs", "specs", "--port", "0"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 1 and f"pid {first.proc.pid}" in second.stderr
    applied = cli("apply", "specs", cwd=cwd)
    assert (
        applied.returncode == 1
        and "a tfdeclare daemon" in applied.stderr
        and "folder specs" in applied.stderr
    )
    assert cli("plan", "specs", cwd=cwd).returncode == 0, "plan still works read-only"
    first.stop(signal.SIGKILL)
    assert all(alive(p) for p in started), "tasks outlive the daemon"
    again = Daemon(cwd, "--specs", "specs")
    try:
        wait_until(lambda: (status(cwd, "keep") or {}).get("phase") == "Running")
        # a pass launches before it writes the status: a second launch would have its folder now
        assert len(list((cwd / ".tfdeclare" / "local" / "tasks").iterdir())) == len(started)
        assert pids(outputs) == started, "adopted, nothing launched twice"
        _, jobs = again.get("/jobs")
        assert [j["name"] for j in jobs] == ["keep"]
    finally:
        again.stop()


def test_daemon_interrupted_exits_130_and_sigterm_0_the_jobs_keep_running(cwd: Path) -> None:
    outputs = out_dir(cwd, "stay")
    (cwd / "specs" / "stay.yaml").write_text(job("stay"))
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 0)):
        daemon = Daemon(cwd, "--specs", "specs", "--interval", "0.5")
        try:
            # its handlers are set once a pass has run
            wait_until(lambda d=daemon: len(pids(outputs)) == 1 and d.passes() >= 1)  # type: ignore[misc]
            started = pids(outputs)
        finally:
            assert daemon.stop(sig) == code, daemon.text()[-2000:]
        assert f"stopping (signal {int(sig)}); the jobs keep running" in daemon.text()
        assert "Traceback" not in daemon.text()
        assert all(alive(p) for p in started) and pids(outputs) == started, "the job keeps running"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "Ada",
            "GIT_AUTHOR_EMAIL": "ada@example.com",
            "GIT_COMMITTER_NAME": "Ada",
            "GIT_COMMITTER_EMAIL": "ada@example.com",
        },
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--bare", "--initial-branch=main", str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", str(remote), str(work))
    (work / "jobs").mkdir()
    return remote, work


def commit(work: Path, message: str, files: dict[str, str | None]) -> str:
    for name, text in files.items():
        path = work / "jobs" / name
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    git(work, "push", "-q", "origin", "HEAD:main", "--force")
    return git(work, "rev-parse", "HEAD")


def test_git_mode_commits_force_push_invalid_commit_and_status_branch(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    remote, work = repo
    outputs = cwd / "g-out"
    outputs.mkdir()
    spec = job("g").replace("env: {OUT: g-out}", f"env: {{OUT: {outputs}}}")
    first = commit(work, "add g", {"g.yaml": spec})
    daemon = Daemon(
        cwd,
        "--git",
        f"file://{remote}",
        "--branch",
        "main",
        "--path",
        "jobs",
        "--interval",
        "1",
        "--push-status",
    )
    try:
        wait_until(lambda: len(pids(outputs)) == 1)
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == first)
        document = status(cwd, "g")
        assert document["revisionInfo"]["author"] == "Ada <ada@example.com>"  # type: ignore[index]
        assert document["source"]["file"] == "jobs/g.yaml"  # type: ignore[index]

        bad = commit(work, "break g", {"g.yaml": spec.replace("count: 1", "count: -1")})
        wait_until(lambda: (status(cwd, "g") or {}).get("lastAttemptedRevision") == bad)
        document = status(cwd, "g")
        assert document["revision"] == first, "the invalid revision is not applied"  # type: ignore[index]
        assert alive(pids(outputs)[0])

        second = commit(work, "change g", {"g.yaml": spec.replace("[python,", "[python, -u,")})
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == second)
        wait_until(lambda: len(pids(outputs)) == 2)

        git(work, "reset", "-q", "--hard", first)
        git(work, "push", "-q", "--force", "origin", "HEAD:main")
        assert daemon.post("/sync") == 202
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == first, timeout=15)

        wait_until(lambda: "tfdeclare-status" in git(remote, "branch", "--list", "tfdeclare-status"))
        files = git(remote, "ls-tree", "-r", "--name-only", "tfdeclare-status")
        assert files == "status/g.yaml"
        assert git(remote, "rev-parse", "main") == first, "the watched branch is never written"
        shown = yaml.safe_load(git(remote, "show", "tfdeclare-status:status/g.yaml"))
        assert shown["name"] == "g"
    finally:
        daemon.stop()


def test_unreachable_remote_keeps_the_jobs_and_is_reported(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    outputs = cwd / "u-out"
    outputs.mkdir()
    commit(work, "add u", {"u.yaml": job("u").replace("env: {OUT: u-out}", f"env: {{OUT: {outputs}}}")})
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5")
    try:
        wait_until(lambda: len(pids(outputs)) == 1)
        wait_until(lambda: daemon.get("/healthz")[0] == 200)  # the first pass is done (503 before)
        remote.rename(remote.with_name("gone.git"))
        wait_until(lambda: daemon.get("/healthz")[1]["sourceError"] is not None)
        code, detail = daemon.get("/healthz")
        assert code == 503, detail
        assert detail["sourceError"] == (
            f"git fetch file://{remote}: '{remote}' does not appear to be a git repository; "
            "Could not read from remote repository."
        ), (detail, daemon.text()[-3000:])
        assert alive(pids(outputs)[0])
        assert "source unavailable, the last applied state keeps running" in daemon.text()
    finally:
        daemon.stop()


def test_git_mode_corrupt_clone_is_recloned_and_prune_by_commit(cwd: Path, repo: tuple[Path, Path]) -> None:
    remote, work = repo
    keep_out, gone_out = cwd / "keep-out", cwd / "gone-out"
    keep_out.mkdir()
    gone_out.mkdir()
    commit(
        work,
        "two jobs",
        {
            "keep.yaml": job("keep").replace("env: {OUT: keep-out}", f"env: {{OUT: {keep_out}}}"),
            "gone.yaml": job("gone").replace("env: {OUT: gone-out}", f"env: {{OUT: {gone_out}}}"),
        },
    )
    daemon = Daemon(
        cwd,
        "--git",
        f"file://{remote}",
        "--path",
        "jobs",
        "--interval",
        "0.5",
        "--prune",
        "--log-format",
        "json",
    )
    try:
        wait_until(lambda: len(pids(keep_out)) == 1 and len(pids(gone_out)) == 1)
        gone_pid = pids(gone_out)[0]
        commit(work, "drop gone", {"gone.yaml": None})
        wait_until(lambda: not alive(gone_pid) and status(cwd, "gone") is None)
        (cwd / ".tfdeclare" / "git" / "checkout" / ".git" / "HEAD").write_text("garbage\n")
        third = commit(
            work,
            "touch keep",
            {
                "keep.yaml": job("keep", extra="  backoffLimit: 5\n").replace(
                    "env: {OUT: keep-out}", f"env: {{OUT: {keep_out}}}"
                )
            },
        )
        wait_until(lambda: (status(cwd, "keep") or {}).get("revision") == third, timeout=30)
        assert alive(pids(keep_out)[0]), "an in-place update after a re-clone restarts nothing"
        assert list((cwd / ".tfdeclare" / "git").glob("corrupt-*")), "the unusable clone was set aside"
    finally:
        daemon.stop()
    lines = [json.loads(line) for line in daemon.text().splitlines() if line.startswith("{")]
    assert lines and {"time", "level", "logger", "message"} <= set(lines[0])
    assert any("unusable" in line["message"] for line in lines)


CHECKPOINTER = """\
# {version}
import os, time
from pathlib import Path
Path(os.environ["OUT"], "cwd").write_text(os.getcwd())
Path("checkpoints").mkdir(exist_ok=True)
n = len(os.listdir("checkpoints"))
while True:
    Path("checkpoints", "ckpt-%04d" % n).write_text(str(os.getpid()) + " " + Path("ckpt.py").read_text())
    n += 1
    time.sleep(0.2)
"""


def test_git_mode_never_deletes_what_a_task_writes_and_keeps_its_revision(
    cwd: Path, repo: tuple[Path, Path]
) -> None:
    remote, work = repo
    spec = (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: ck}\nspec:\n"
        "  command: [python, ckpt.py]\n"
        f"  env: {{OUT: '{cwd}'}}\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )
    first = commit(work, "v1", {"ck.yaml": spec, "ckpt.py": CHECKPOINTER.format(version="v1")})
    snapshots = cwd / ".tfdeclare" / "git" / "revisions"

    def checkpoints() -> Path:  # where the task runs (its files are written in place: read again
        told = (cwd / "cwd").read_text() if (cwd / "cwd").exists() else ""  # when seen half-written)
        return Path(told or cwd / "none") / "checkpoints"

    def written() -> list[str]:
        folder = checkpoints()
        texts = [p.read_text() for p in sorted(folder.iterdir())] if folder.is_dir() else []
        return [t for t in texts if t]  # a checkpoint being written is read as empty

    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "0.5")
    try:
        wait_until(lambda: len(written()) >= 3)
        pid = written()[0].split()[0]
        second = commit(work, "v2: a new script", {"ckpt.py": CHECKPOINTER.format(version="v2")})
        wait_until(lambda: (status(cwd, "ck") or {}).get("revision") == second)
        seen = len(written())
        wait_until(lambda: len(written()) >= seen + 5)  # several syncs later
        assert [c.split()[0] for c in written()] == [pid] * len(written()), "nothing restarted"
        assert all("# v1" in c for c in written()), "the task still runs from its own revision"
        assert (snapshots / first).is_dir(), "the snapshot in use is kept"
        assert not (snapshots / first / "jobs" / "ckpt.py").stat().st_mode & 0o222, "read-only"

        third = commit(work, "v3: restart", {"ck.yaml": spec.replace("env: {", "env: {X: '1', ")})
        wait_until(lambda: (status(cwd, "ck") or {}).get("revision") == third)
        wait_until(lambda: bool(w := written()) and "# v2" in w[-1])
        before = written()
        assert before[0].split()[0] == pid and len({c.split()[0] for c in before}) == 2
        assert checkpoints().parent == cwd / ".tfdeclare" / "local" / "work" / "ck" / "worker-0"
        names = [p.name for p in sorted(checkpoints().iterdir())]  # the task goes on writing
        assert names[: len(before)] == [f"ckpt-{i:04d}" for i in range(len(before))]
        wait_until(lambda: not (snapshots / first).exists())  # no job or task uses it any more
        assert (snapshots / third).is_dir()
    finally:
        daemon.stop()


def test_clients_that_hang_up_leave_no_traceback_in_the_log(cwd: Path) -> None:
    import socket
    import struct

    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5")
    try:
        # Healthy once its first pass is done (until then /healthz says the pass is due: 503).
        wait_until(lambda: daemon.get("/healthz")[0] == 200)
        host, port = daemon.url.removeprefix("http://").rstrip("/").split(":")
        for path in ["/jobs", "/metrics", "/healthz"] * 20:
            with socket.create_connection((host, int(port))) as client:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
                client.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        health = daemon.get("/healthz")
        assert health[0] == 200, (health, daemon.text()[-4000:])  # still serving
    finally:
        assert daemon.stop() == 0
    text = daemon.text()
    assert "Traceback" not in text and "Exception occurred" not in text, text[-4000:]


def test_folder_mode_a_file_emptied_and_rewritten_keeps_its_job(cwd: Path) -> None:
    """What some editors and ``cp`` do: the file is empty for a moment, then written again."""
    daemon = Daemon(cwd, "--specs", "specs", "--prune", "--interval", "30")
    try:
        outputs = out_dir(cwd, "a")
        spec = cwd / "specs" / "a.yaml"
        (cwd / "specs" / "b.yaml").write_text(job("b"))
        spec.write_text(job("a"))
        wait_until(lambda: len(pids(outputs)) == 1 and (status(cwd, "a") or {}).get("phase") == "Running")
        first = pids(outputs)[0]
        for empty_for in (0.15, 3.5):  # shorter and longer than the settle time (3 s)
            spec.write_text("")
            wait_until(lambda: sync_state(cwd, "a") == ("False", "FileHoldsNoJob"))
            time.sleep(empty_for)  # the user's timing, not a wait for the daemon
            spec.write_text(job("a"))
            wait_until(lambda: sync_state(cwd, "a") == ("True", "SpecApplied"))
        assert pids(outputs) == [first] and alive(first), "never deleted nor restarted"
        assert "applied - a" not in daemon.text() and "applied -/+ a" not in daemon.text()
        assert "specs/a.yaml:1: warning: holds no job document" in daemon.text()
    finally:
        daemon.stop()


def test_folder_mode_a_slow_write_restarts_the_job_once(cwd: Path) -> None:
    """A save written in two parts, the first a valid spec for 0.3 s: one restart, to the
    whole file's spec (each part alone would restart every task)."""

    def spec(*args: str) -> str:
        head = job("a").replace(f"  command: [python, {TASK}, serve]\n", "")
        return head + f"  command:\n  - python\n  - {TASK}\n  - serve\n" + "".join(f"  - {a}\n" for a in args)

    daemon = Daemon(cwd, "--specs", "specs", "--interval", "30")
    try:
        outputs = out_dir(cwd, "a")
        path = cwd / "specs" / "a.yaml"
        path.write_text(spec("--lr=0.1"))
        wait_until(lambda: len(pids(outputs)) == 1 and (status(cwd, "a") or {}).get("phase") == "Running")
        whole = spec("--lr=0.2", "--batch=64")
        half = whole.index("  - --batch=64")  # the first part alone is a valid spec: --lr=0.2
        with open(path, "w") as handle:
            handle.write(whole[:half])
            handle.flush()
            time.sleep(0.3)  # the writer's pause, not a wait for the daemon
            handle.write(whole[half:])
        wait_until(
            lambda: any(json.loads(p.read_text())["argv"][-1] == "--batch=64" for p in outputs.glob("*.json"))
        )
        assert daemon.text().count("applied -/+ a:") == 1, daemon.text()
        assert (status(cwd, "a") or {}).get("attempt") == 1
    finally:
        daemon.stop()


def test_folder_mode_an_unreadable_subfolder_prunes_nothing(cwd: Path) -> None:
    """``chmod 000 specs/team-a`` under a daemon run by an ordinary user: team-a's job keeps
    running, the read error is logged and shown in its status, until the folder is readable."""
    (cwd / "specs" / "team-a").mkdir()
    outputs = out_dir(cwd, "a", "specs/team-a")
    (cwd / "specs" / "team-a" / "a.yaml").write_text(job("a"))
    (cwd / "specs" / "b.yaml").write_text(job("b"))
    out_dir(cwd, "b")
    daemon = Daemon(cwd, "--specs", "specs", "--prune", "--interval", "1", prefix=ORDINARY_USER)
    try:
        wait_until(lambda: len(pids(outputs)) == 1 and (status(cwd, "a") or {}).get("phase") == "Running")
        (cwd / "specs" / "team-a").chmod(0)
        try:
            wait_until(lambda: sync_state(cwd, "a") == ("False", "FilesUnreadable"))
            conditions = (status(cwd, "a") or {})["conditions"]
            message = next(c["message"] for c in conditions if c["type"] == "Synced")
            assert "specs/team-a: error: cannot list this folder: Permission denied" in message
            assert "kept as applied (FilesUnreadable): a" in daemon.text()
        finally:
            (cwd / "specs" / "team-a").chmod(0o755)
        wait_until(lambda: sync_state(cwd, "a") == ("True", "SpecApplied"))
        assert len(pids(outputs)) == 1 and alive(pids(outputs)[0]), "never deleted nor restarted"
    finally:
        daemon.stop()
