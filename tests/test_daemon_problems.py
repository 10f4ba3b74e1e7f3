"""Source problems end to end (issue 31): a real ``tfdeclare daemon`` on a real folder and a
real git repository (``file://``), real tasks, a real webhook receiver. A file that cannot be
applied is named in /healthz (still 200), /jobs, /metrics, the page, ``tfdeclare status`` and
the webhooks until it is fixed; a failed fetch is one too. In git mode a commit is applied as
soon as it is checked out, whatever the settle time."""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, kill_leftovers
from tests.test_daemon import CONFIG, Daemon, alive, commit, git, job, pids, status, sync_state, wait_until

pytestmark = pytest.mark.e2e  # the daemon as a process, real jobs, git repositories


class Receiver:
    """A webhook receiver on 127.0.0.1: every body posted to it, with its event header."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    receiver.bodies.append((self.headers["X-Tfdeclare-Event"], body))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def problems(self) -> list[tuple[str, str, str]]:
        """(event, path, kind) of every problem notice so far."""
        with self.lock:
            return [
                (event, body["path"], body["problemKind"])
                for event, body in self.bodies
                if event.startswith("SourceProblem")
            ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


@pytest.fixture
def cwd(tmp_path: Path, receiver: Receiver) -> Iterator[Path]:
    (tmp_path / "tfdeclare.yaml").write_text(
        CONFIG + f"daemon: {{settleSeconds: 30}}\nwebhooks: [{{name: hook, url: '{receiver.url}'}}]\n"
    )
    (tmp_path / "specs").mkdir()
    yield tmp_path
    deleted = cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], f"a task outlived its job; delete --all said: {deleted.stderr}"


def problems(daemon: Daemon) -> list[dict[str, Any]]:
    return daemon.get("/healthz")[1]["problems"]  # type: ignore[no-any-return]


def paths(daemon: Daemon) -> list[str]:
    return [p["path"] for p in problems(daemon)]


def gauge(daemon: Daemon, kind: str) -> float:
    match = re.search(
        rf'^tfdeclare_source_problems\{{kind="{kind}"\}} (\S+)$', daemon.get("/metrics")[1], re.M
    )
    assert match, "no problem gauge"
    return float(match.group(1))


def page(daemon: Daemon) -> str:
    with urllib.request.urlopen(daemon.url + "/", timeout=5) as response:
        return response.read().decode()  # type: ignore[no-any-return]


def test_folder_mode_a_bad_file_is_shown_everywhere_until_fixed(cwd: Path, receiver: Receiver) -> None:
    outputs = cwd / "specs" / "a-out"
    outputs.mkdir()
    good = job("a")
    (cwd / "specs" / "a.yaml").write_text(good)
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5")
    try:
        wait_until(lambda: len(pids(outputs)) == 1)
        wait_until(lambda: daemon.get("/healthz")[0] == 200)
        assert problems(daemon) == [] and gauge(daemon, "invalid-spec") == 0
        running = pids(outputs)[0]

        (cwd / "specs" / "a.yaml").write_text(good.replace("count: 1", "count: x"))
        (cwd / "specs" / "new.yaml").write_text(job("new").replace("worker:", "wroker:"))
        wait_until(lambda: paths(daemon) == ["specs/a.yaml", "specs/new.yaml"])

        code, health = daemon.get("/healthz")
        assert code == 200 and health["status"] == "ok", "a user's bad file does not fail readiness"
        first, second = health["problems"]
        assert (first["kind"], first["jobs"], first["revision"]) == ("invalid-spec", ["a"], None)
        assert first["message"].startswith("specs/a.yaml:8:") and first["diagnostics"][0]["line"] == 8
        assert (second["kind"], second["jobs"]) == ("invalid-spec", ["new"])
        assert "wroker" in second["message"]

        _, listed = daemon.get("/jobs")
        assert [(d["name"], [p["path"] for p in d["problems"]]) for d in listed] == [("a", ["specs/a.yaml"])]
        _, both = daemon.get("/jobs?problems=true")
        assert [d["name"] for d in both["jobs"]] == ["a"]
        assert [p["path"] for p in both["problems"]] == ["specs/a.yaml", "specs/new.yaml"]
        assert daemon.get("/jobs?problems=maybe")[0] == 400
        assert gauge(daemon, "invalid-spec") == 2 and gauge(daemon, "fetch-failed") == 0

        html = page(daemon)
        assert html.index('id="problems"') < html.index("<h3>Jobs</h3>"), "the problems come first"
        assert re.search(r'id="state"><a class="False" href="#problems">2 problems</a>', html), html[:3000]
        assert "specs/a.yaml:8:" in html and "wroker" in html

        shown = cli("status", cwd=cwd)
        assert shown.returncode == 0
        footer = shown.stdout[shown.stdout.index("Problems (2") :]
        assert "specs/a.yaml: invalid-spec (holds back a)" in footer and "specs/a.yaml:8:" in footer
        assert "specs/new.yaml: invalid-spec (holds back new)" in footer
        as_json = cli("status", "-o", "json", cwd=cwd)
        assert [d["name"] for d in json.loads(as_json.stdout)] == ["a"], "the list scripts read, unchanged"
        assert "tfdeclare: problem (invalid-spec): specs/a.yaml:8:" in as_json.stderr
        opted = json.loads(cli("status", "-o", "json", "--problems", cwd=cwd).stdout)
        assert [p["path"] for p in opted["problems"]] == ["specs/a.yaml", "specs/new.yaml"]
        one = json.loads(cli("status", "a", "-o", "json", "--problems", cwd=cwd).stdout)
        assert [p["path"] for p in one["problems"]] == ["specs/a.yaml"]

        assert sync_state(cwd, "a") == ("False", "InvalidSpec")
        synced = next(c for c in status(cwd, "a")["conditions"] if c["type"] == "Synced")  # type: ignore[index]
        assert "specs/a.yaml:8:" in synced["message"] and "keeps running as applied" in synced["message"]
        assert alive(running), "the job keeps running as applied"

        wait_until(lambda: len(receiver.problems()) >= 2)
        assert sorted(receiver.problems()) == [
            ("SourceProblemAppeared", "specs/a.yaml", "invalid-spec"),
            ("SourceProblemAppeared", "specs/new.yaml", "invalid-spec"),
        ]

        (cwd / "specs" / "a.yaml").write_text(good)
        (cwd / "specs" / "new.yaml").write_text(job("new"))
        wait_until(lambda: problems(daemon) == [])
        assert gauge(daemon, "invalid-spec") == 0
        wait_until(lambda: sync_state(cwd, "a") == ("True", "SpecApplied"))
        assert "Problems" not in cli("status", cwd=cwd).stdout
        assert "problem" not in cli("status", "-o", "json", cwd=cwd).stderr
        assert 'id="problems"' not in page(daemon)
        wait_until(lambda: len(receiver.problems()) >= 4)
        assert sorted(receiver.problems()[2:]) == [
            ("SourceProblemCleared", "specs/a.yaml", "invalid-spec"),
            ("SourceProblemCleared", "specs/new.yaml", "invalid-spec"),
        ]
        stored = json.loads((cwd / ".tfdeclare" / "problems.json").read_text())
        assert stored["kind"] == "SourceProblems" and stored["problems"] == []
        assert pids(outputs) == [running], "fixed as it was: nothing restarted"
    finally:
        assert daemon.stop() == 0
    assert "WARNING problem invalid-spec: specs/a.yaml:8:" in daemon.text()
    assert "problem cleared (invalid-spec): specs/a.yaml" in daemon.text()


def test_folder_mode_problems_outlive_the_daemon_for_status_and_keep_their_since(cwd: Path) -> None:
    with (cwd / "tfdeclare.yaml").open("a") as config:
        config.write("policy: {maxTasksPerJob: 1}\n")
    (cwd / "specs" / "twice.yaml").write_text(job("dup") + "---\n" + job("dup"))
    (cwd / "specs" / "big.yaml").write_text(job("big", count=2))
    daemon = Daemon(cwd, "--specs", "specs")
    try:
        wait_until(lambda: paths(daemon) == ["specs/big.yaml", "specs/twice.yaml"])
        big, problem = problems(daemon)
        assert (problem["kind"], problem["jobs"]) == ("duplicate-name", ["dup"])
        assert (big["kind"], big["jobs"]) == ("policy", ["big"]) and "maxTasksPerJob" in big["message"]
        assert gauge(daemon, "policy") == 1 and gauge(daemon, "duplicate-name") == 1
    finally:
        daemon.stop()
    shown = cli("status", cwd=cwd)
    assert shown.returncode == 0 and "specs/twice.yaml: duplicate-name (holds back dup)" in shown.stdout
    assert "specs/big.yaml: policy (holds back big)" in shown.stdout
    assert "No jobs in state folder" in shown.stdout
    again = Daemon(cwd, "--specs", "specs")
    try:
        wait_until(lambda: again.get("/healthz")[0] == 200)
        _, kept = again.get("/healthz")[1]["problems"]
        # to the microsecond: one stamped anew by this daemon would differ
        assert (kept["since"], kept["sinceUnix"]) == (problem["since"], problem["sinceUnix"]), (
            "a problem that still stands keeps its since"
        )
    finally:
        again.stop()


def _repository(tmp_path: Path) -> tuple[Path, Path]:
    """A bare repository on ``main`` and a clone of it with a ``jobs`` folder to commit in."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--bare", "--initial-branch=main", str(remote))
    work = tmp_path / "work"
    git(tmp_path, "clone", str(remote), str(work))
    (work / "jobs").mkdir()
    return remote, work


def test_git_mode_no_settle_time_a_bad_commit_and_a_failed_fetch_are_problems(
    cwd: Path, receiver: Receiver, tmp_path: Path
) -> None:
    remote, work = _repository(tmp_path)
    outputs = cwd / "g-out"
    outputs.mkdir()
    spec = job("g").replace("env: {OUT: g-out}", f"env: {{OUT: {outputs}}}")
    commit(work, "add g", {"g.yaml": spec})
    daemon = Daemon(cwd, "--git", f"file://{remote}", "--path", "jobs", "--interval", "3600")
    try:
        wait_until(lambda: len(pids(outputs)) == 1)
        first = pids(outputs)[0]

        restart = commit(work, "change g", {"g.yaml": spec.replace("[python,", "[python, -u,")})
        # POST /sync fetches at most once a second: one that comes sooner is kept for then
        assert daemon.post("/sync") == 202
        # the config's settle time (30 s) holds for folders only: a checkout is never half-written
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == restart, timeout=10)
        wait_until(lambda: len(pids(outputs)) == 2 and not alive(first), timeout=10)

        bad = commit(work, "break g", {"g.yaml": spec.replace("count: 1", "cuont: 1")})
        assert daemon.post("/sync") == 202
        wait_until(lambda: paths(daemon) == ["jobs/g.yaml"], timeout=15)
        (problem,) = problems(daemon)
        assert (problem["kind"], problem["revision"], problem["jobs"]) == ("invalid-spec", bad, ["g"])
        assert "cuont" in problem["message"] and daemon.get("/healthz")[0] == 200
        shown = cli("status", "g", cwd=cwd)
        assert "jobs/g.yaml: invalid-spec (holds back g)" in shown.stdout

        remote.rename(remote.with_name("gone.git"))
        assert daemon.post("/sync") == 202
        wait_until(lambda: f"file://{remote}" in paths(daemon), timeout=15)
        code, health = daemon.get("/healthz")
        assert code == 503 and health["sourceError"], "an unreadable source is not ready, as before"
        kinds = {p["path"]: p["kind"] for p in health["problems"]}
        assert kinds == {f"file://{remote}": "fetch-failed", "jobs/g.yaml": "invalid-spec"}
        assert gauge(daemon, "fetch-failed") == 1
        assert f"file://{remote}: fetch-failed" in cli("status", cwd=cwd).stdout

        remote.with_name("gone.git").rename(remote)
        fixed = commit(work, "fix g", {"g.yaml": spec.replace("[python,", "[python, -u,")})
        assert daemon.post("/sync") == 202
        wait_until(lambda: problems(daemon) == [], timeout=15)
        assert daemon.get("/healthz")[0] == 200 and gauge(daemon, "fetch-failed") == 0
        wait_until(lambda: (status(cwd, "g") or {}).get("revision") == fixed)  # written at the pass's end
        wait_until(lambda: len(receiver.problems()) >= 4)
        assert sorted(receiver.problems()) == sorted(
            [
                ("SourceProblemAppeared", "jobs/g.yaml", "invalid-spec"),
                ("SourceProblemAppeared", f"file://{remote}", "fetch-failed"),
                ("SourceProblemCleared", "jobs/g.yaml", "invalid-spec"),
                ("SourceProblemCleared", f"file://{remote}", "fetch-failed"),
            ]
        )
    finally:
        daemon.stop()
    assert os.path.exists(cwd / ".tfdeclare" / "problems.json")


def test_apply_records_the_problems_of_the_files_it_read_and_clears_them_once_fixed(cwd: Path) -> None:
    out_dir = cwd / "specs" / "a-out"
    out_dir.mkdir()
    (cwd / "specs" / "a.yaml").write_text(job("a").replace("count: 1", "count: -1"))
    (cwd / "other").mkdir()
    (cwd / "other" / "b.yaml").write_text(job("b").replace("worker:", "wroker:"))
    assert cli("apply", "other", cwd=cwd).returncode == 1
    refused = cli("apply", "specs", cwd=cwd)
    assert refused.returncode == 1 and "specs/a.yaml:8:" in refused.stderr, "diagnostics as before"
    shown = cli("status", cwd=cwd).stdout
    assert "specs/a.yaml: invalid-spec (holds back a)" in shown and "other/b.yaml: invalid-spec" in shown
    (cwd / "specs" / "a.yaml").write_text(job("a"))
    assert cli("apply", "specs", cwd=cwd).returncode == 0
    shown = cli("status", cwd=cwd).stdout
    assert "specs/a.yaml" not in shown.split("Problems")[-1], "fixed: gone"
    assert "other/b.yaml: invalid-spec" in shown, "a file apply did not read stands"
    assert cli("plan", "other", cwd=cwd).returncode == 1


def test_git_mode_a_removed_path_folder_is_named_as_the_repository_has_it(
    cwd: Path, receiver: Receiver, tmp_path: Path
) -> None:
    remote, work = _repository(tmp_path)
    (work / "README").write_text("the repository stays when its jobs folder goes\n")
    outputs = cwd / "g-out"
    outputs.mkdir()
    commit(work, "add g", {"g.yaml": job("g").replace("env: {OUT: g-out}", f"env: {{OUT: {outputs}}}")})
    args = ("--git", f"file://{remote}", "--path", "jobs", "--prune", "--allow-empty", "--interval", "3600")
    daemon = Daemon(cwd, *args)
    try:
        wait_until(lambda: len(pids(outputs)) == 1)
        git(work, "rm", "-r", "-q", "jobs")
        git(work, "commit", "-q", "-m", "remove the jobs folder")
        git(work, "push", "-q", "origin", "HEAD:main")
        assert daemon.post("/sync") == 202
        wait_until(lambda: paths(daemon) == ["jobs"], timeout=15)
        (problem,) = problems(daemon)
        assert problem["message"] == "jobs:1: error: no such file or folder" and problem["jobs"] == ["g"]
        health = json.dumps(daemon.get("/healthz")[1])
        jobs = json.dumps(daemon.get("/jobs")[1])
        shown = cli("status", cwd=cwd).stdout
        wait_until(lambda: len(cli_history(cwd)) == 2)
        history = cli("history", cwd=cwd).stdout
        assert all(alive(p) for p in pids(outputs)), "nothing pruned"
    finally:
        daemon.stop()
    state = str(cwd / ".tfdeclare")
    for where, text in (("/healthz", health), ("/jobs", jobs), ("status", shown), ("history", history)):
        assert state not in text, f"{where} names a path inside the state folder:\n{text}"
    assert "jobs: " in shown and "refused: 1 problem" in history
    assert "jobs:1: error: no such file or folder" in history


def cli_history(cwd: Path) -> list[dict[str, Any]]:
    return json.loads(cli("history", "-o", "json", cwd=cwd).stdout)  # type: ignore[no-any-return]
