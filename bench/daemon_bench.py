"""Issue 5's targets: folder save → first task started, git commit → first task started, a
pass over 1,000 unchanged jobs, and the daemon's memory with 1,000 jobs; issue 31's: a commit
that restarts a running job, announced by ``POST /sync`` → its first new task started.

    python -m bench.daemon_bench --only git-sync [--runs N]   (``make bench-git-sync``)
    python -m bench.daemon_bench --only thousand [--runs N]   (the pass over 1,000 unchanged jobs)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench.common import CLI_SCRIPT, Result, cleaned_up, run, stop_process, wait_for

CONFIG = "local: {cpus: 64, mem: 64Gi, gpus: 0, portRange: {first: 36000, last: 39999}}\n"


def _job(name: str, command: str) -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n  command: {command}\n"
        f"  replicas:\n    worker: {{count: 1, resources: {{cpus: 0.01, mem: 16}}}}\n"
    )


class _Daemon:
    def __init__(self, cwd: Path, *args: str) -> None:
        self.log = cwd / "daemon.log"
        self.handle = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [CLI_SCRIPT, "daemon", "--port", "0", *args],
            cwd=cwd,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "listening on" in self.log.read_text(), timeout=30, poll=0.05)
        except BaseException:
            self.stop()
            raise

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        try:
            stop_process(self.proc, timeout=60)
        finally:
            self.handle.close()


def folder_latency(workdir: Path, runs: int) -> Result:
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    specs, marks = workdir / "specs", workdir / "marks"
    specs.mkdir()
    marks.mkdir()
    (specs / "anchor.yaml").write_text(_job("anchor", "[sleep, '600']"))
    daemon = _Daemon(workdir, "--specs", "specs", "--prune", "--interval", "60")
    samples = []
    try:
        wait_for(lambda: (workdir / "status" / "anchor.yaml").exists(), timeout=30)
        for i in range(runs):
            mark = marks / str(i)
            text = _job(f"saved-{i}", f"[sh, -c, 'echo up > {mark}; exec sleep 600']")
            time.sleep(0.3)
            started = time.perf_counter()
            (specs / f"saved-{i}.yaml").write_text(text)
            wait_for(mark.exists, timeout=30)
            samples.append((time.perf_counter() - started) * 1000)
            (specs / f"saved-{i}.yaml").unlink()
    finally:
        daemon.stop()  # the jobs are deleted by the caller's cleaned_up
    return Result("folder mode: file saved → its first task started", "≤ 300 ms", samples, "ms", limit=300)


def _git_project(workdir: Path) -> tuple[Path, Path, Path, Callable[..., None]]:
    """The config, a bare remote and its clone, a folder for the tasks' marks, and ``git`` run
    in the clone (``cwd`` to run it elsewhere)."""
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    remote, work, marks = workdir / "remote.git", workdir / "work", workdir / "marks"
    marks.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@example.com",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@example.com",
    }

    def git(*args: str, cwd: Path = work) -> None:
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)

    git("init", "-q", "--bare", "--initial-branch=main", str(remote), cwd=workdir)
    git("clone", "-q", str(remote), str(work), cwd=workdir)
    return remote, work, marks, git


def git_latency(workdir: Path, runs: int, interval: float) -> Result:
    remote, work, marks, git = _git_project(workdir)
    (work / "anchor.yaml").write_text(_job("anchor", "[sleep, '600']"))
    git("add", "-A")
    git("commit", "-q", "-m", "anchor")
    git("push", "-q", "origin", "HEAD:main")
    daemon = _Daemon(workdir, "--git", f"file://{remote}", "--interval", str(interval), "--prune")
    samples = []
    try:
        wait_for(lambda: (workdir / "status" / "anchor.yaml").exists(), timeout=30)
        for i in range(runs):
            mark = marks / str(i)
            (work / f"c{i}.yaml").write_text(
                _job(f"commit-{i}", f"[sh, -c, 'echo up > {mark}; exec sleep 600']")
            )
            git("add", "-A")
            git("commit", "-q", "-m", f"c{i}")
            started = time.perf_counter()
            git("push", "-q", "origin", "HEAD:main")
            wait_for(mark.exists, timeout=interval + 30, poll=0.01)
            samples.append(time.perf_counter() - started)
    finally:
        daemon.stop()  # the jobs are deleted by the caller's cleaned_up
    return Result(
        f"git mode (--interval {interval:g}): commit pushed → its first task started",
        f"≤ interval + 1 s = {interval + 1:g} s",
        samples,
        limit=interval + 1,
    )


def git_sync_latency(workdir: Path, runs: int) -> Result:
    """A commit that changes a running job's command (a restart), pushed and announced by
    ``POST /sync`` (a git host's webhook), → the first task of its new attempt started. The
    resync interval is long (60 s): only the request brings the commit in."""
    remote, work, marks, git = _git_project(workdir)

    def spec(i: int) -> str:
        return _job("restarted", f"[sh, -c, 'echo up > {marks}/{i}; exec sleep 600']")

    (work / "restarted.yaml").write_text(spec(0))
    git("add", "-A")
    git("commit", "-q", "-m", "first")
    git("push", "-q", "origin", "HEAD:main")
    daemon = _Daemon(workdir, "--git", f"file://{remote}", "--interval", "60")
    match = re.search(r"listening on (http://\S+)", daemon.log.read_text())
    assert match, daemon.log.read_text()
    sync = urllib.request.Request(match.group(1) + "/sync", method="POST")
    samples = []
    try:
        wait_for((marks / "0").exists, timeout=30)
        for i in range(1, runs + 1):
            time.sleep(1.1)  # POST /sync fetches at most once a second
            (work / "restarted.yaml").write_text(spec(i))
            git("commit", "-q", "-am", f"c{i}")
            git("push", "-q", "origin", "HEAD:main")
            started = time.perf_counter()
            with urllib.request.urlopen(sync, timeout=5) as answer:
                assert answer.status == 202
            wait_for((marks / str(i)).exists, timeout=30, poll=0.01)
            samples.append(time.perf_counter() - started)
    finally:
        daemon.stop()  # the jobs are deleted by the caller's cleaned_up
    return Result(
        "git mode: commit restarting a job, POST /sync → its first new task started",
        "≤ 1 s",
        samples,
        limit=1.0,
    )


def thousand_jobs(workdir: Path, passes: int) -> tuple[Result, Result]:
    (workdir / "tfdeclare.yaml").write_text(CONFIG)
    specs = workdir / "specs"
    specs.mkdir()
    for i in range(1000):
        (specs / f"j{i:04d}.yaml").write_text(_job(f"job-{i:04d}", "['true']"))
    run([CLI_SCRIPT, "apply", "specs", "--wait", "--timeout", "1200"], workdir, timeout=1300)
    time.sleep(2.1)  # leave the racy-mtime window, as a long-running daemon would have

    code = (
        "import json, statistics, sys, time\n"
        "from pathlib import Path\n"
        "from tfdeclare.cli.common import Settings\n"
        "from tfdeclare.cli.wiring import make_backend, make_controller\n"
        "from tfdeclare.core.config import Config\n"
        "from tfdeclare.daemon.service import Daemon, DaemonOptions\n"
        "from tfdeclare.daemon.sources import FolderSource\n"
        "from tfdeclare.shell.sources import SpecFiles\n"
        "cwd = Path.cwd()\n"
        "settings = Settings(Config(), cwd / '.tfdeclare', cwd / 'status', None)\n"
        "backend = make_backend(settings)\n"
        "controller = make_controller(settings, backend)\n"
        "daemon = Daemon(FolderSource(cwd / 'specs', []), controller, SpecFiles([cwd / 'specs']), cwd / 'status',\n"
        "                DaemonOptions())\n"
        "daemon._sync(); daemon._pass(); daemon._pass()\n"
        "samples = []\n"
        f"for _ in range({passes}):\n"
        "    started = time.perf_counter(); daemon._pass(); samples.append((time.perf_counter() - started) * 1000)\n"
        "print(json.dumps(samples))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, capture_output=True, text=True, check=True
    )
    pass_ms = [float(x) for x in re.findall(r"[0-9.]+", out.stdout.strip().splitlines()[-1])]
    daemon = _Daemon(workdir, "--specs", "specs", "--interval", "0.5")
    try:
        rss = []
        for _ in range(5):
            time.sleep(1.0)
            rss.append(daemon.rss_mib())
    finally:
        daemon.stop()
    return (
        Result(
            "daemon pass over 1,000 unchanged jobs (all Succeeded)",
            "≤ 100 ms",
            pass_ms,
            "ms",
            limit=100,
            note=f"median of {len(pass_ms)} warm passes",
        ),
        Result("daemon RSS with 1,000 jobs", "≤ 150 MB", rss, "MB", limit=150, note=f"max {max(rss):.0f} MB"),
    )


def main(results: list[Result], quick: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.append(folder_latency(workdir, 5 if quick else 15))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.append(git_latency(workdir, 3 if quick else 8, interval=2.0))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.append(git_sync_latency(workdir, 3 if quick else 8))
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        results.extend(thousand_jobs(workdir, 10 if quick else 30))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.daemon_bench")
    parser.add_argument("--only", choices=["git-sync", "thousand"], required=True)
    parser.add_argument("--runs", type=int, default=8)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, cleaned_up(Path(tmp)) as workdir:
        if options.only == "thousand":
            found = list(thousand_jobs(workdir, options.runs))
        else:
            found = [git_sync_latency(workdir, options.runs)]
    for result in found:
        print(result.row())
        print("samples:", ", ".join(f"{s:.3f}" for s in result.samples))
