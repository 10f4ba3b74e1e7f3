"""``-l KEY=VALUE`` on ``status``, ``logs``, ``delete`` and ``plan``: the selector's reading
(``core.spec.selector``) and each command with real local tasks: only the matching jobs are
shown, printed, deleted or planned; a prune with ``-l`` never reaches a job more; a bad
selector is exit 1 with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_e2e_local import project
from tests.waiting import live_files, wait_until
from tfdeclare.core.spec.selector import Operator, Requirement, SelectorError, parse

__all__ = ["project"]  # the fixture


def _job(
    name: str,
    labels: dict[str, str],
    command: str = "[python, -c, 'print(\"hello\"); import time; time.sleep(30)']",
) -> str:
    shown = json.dumps(labels)
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}, labels: {shown}}}\nspec:\n"
        f"  command: {command}\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )


def test_selector_terms_read_as_kubectl_reads_them() -> None:
    selector = parse(["team=vision,tier!=batch", "gpu", "!legacy"])
    assert selector.requirements == (
        Requirement("team", Operator.EQUALS, "vision"),
        Requirement("tier", Operator.NOT_EQUALS, "batch"),
        Requirement("gpu", Operator.EXISTS),
        Requirement("legacy", Operator.NOT_EXISTS),
    )
    assert selector.matches({"team": "vision", "gpu": "a100"})
    assert selector.matches({"team": "vision", "gpu": "", "tier": "online"})
    assert not selector.matches({"team": "vision", "gpu": "a100", "tier": "batch"})
    assert not selector.matches({"team": "nlp", "gpu": "a100"})
    assert not selector.matches({"team": "vision"})
    assert not selector.matches({"team": "vision", "gpu": "x", "legacy": "1"})
    assert parse(["team==vision"]).matches((("team", "vision"),))
    assert not parse([]) and parse([]).matches({})
    assert str(selector) == "team=vision,tier!=batch,gpu,!legacy"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("team=a=b", "one operator"),
        ("-bad=x", "not a label key"),
        ("team,,gpu", "empty term"),
        ("team in (a,b)", "set-based selectors"),
        ("env notin (x)", "only KEY=VALUE"),
    ],
)
def test_a_bad_selector_says_why(text: str, why: str) -> None:
    with pytest.raises(SelectorError, match=why):
        parse([text])


@pytest.mark.slow
@pytest.mark.e2e
def test_selectors_pick_the_jobs_of_status_logs_plan_and_delete(project: Path) -> None:
    specs = project / "specs"
    (specs / "a.yaml").write_text(_job("vis-a", {"team": "vision", "tier": "batch"}))
    (specs / "b.yaml").write_text(_job("vis-b", {"team": "vision"}))
    (specs / "c.yaml").write_text(_job("nlp-c", {"team": "nlp"}))
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stderr

    def names_of(*args: str) -> list[str]:
        shown = cli("status", "-o", "json", *args, cwd=project)
        assert shown.returncode == 0, shown.stderr
        return sorted(job["name"] for job in json.loads(shown.stdout))

    assert names_of("-l", "team=vision") == ["vis-a", "vis-b"]
    assert names_of("-l", "team=vision", "-l", "tier!=batch") == ["vis-b"]
    assert names_of("-l", "tier") == ["vis-a"]
    assert names_of("-l", "!tier") == ["nlp-c", "vis-b"]
    assert names_of("-l", "team=none") == []
    table = cli("status", "-l", "team=nlp", cwd=project)
    assert table.returncode == 0
    assert [line.split()[0] for line in table.stdout.splitlines()] == ["NAME", "nlp-c"]
    nothing = cli("status", "-l", "team=none", cwd=project)
    assert nothing.returncode == 0 and "No job matches -l team=none" in nothing.stdout
    assert cli("status", "vis-a", "-l", "team=vision", cwd=project).returncode == 0
    other = cli("status", "nlp-c", "-l", "team=vision", cwd=project)
    assert other.returncode == 1 and "does not match -l team=vision" in other.stderr
    bad = cli("status", "-l", "team=a=b", cwd=project)
    assert bad.returncode == 1 and "one operator" in bad.stderr and "Traceback" not in bad.stderr

    # logs -l: each matching job's lines, prefixed with its job and task
    def logs_of(*args: str) -> str:
        for _ in range(100):
            shown = cli("logs", *args, cwd=project)
            if shown.stdout.count("hello") >= 2 or "nlp" in args[-1]:
                return shown.stdout
        return shown.stdout

    logs = logs_of("-l", "team=vision")
    assert "vis-a/worker-0 | hello\n" in logs and "vis-b/worker-0 | hello\n" in logs
    assert "nlp-c" not in logs
    as_json = cli("logs", "-l", "team=vision", "-o", "json", cwd=project)
    assert {"job": "vis-a", "task": "worker-0", "line": "hello"} in [
        json.loads(line) for line in as_json.stdout.splitlines()
    ]
    both = cli("logs", "vis-a", "-l", "team=vision", cwd=project)
    assert both.returncode == 1 and "without NAME" in both.stderr

    # plan -l: only the matching jobs; with --prune it never reaches a job more
    (specs / "a.yaml").unlink()
    (specs / "c.yaml").unlink()
    pruned = cli("plan", "specs", "--prune", "-l", "team=nlp", "-o", "json", cwd=project)
    assert pruned.returncode == 0, pruned.stderr
    jobs = {job["name"]: job["action"] for job in json.loads(pruned.stdout)["jobs"]}
    assert set(jobs) == {"nlp-c"}, jobs
    saved = cli("plan", "specs", "-l", "team=nlp", "--out", "p.json", cwd=project)
    assert saved.returncode == 1 and "a saved plan applies every job" in saved.stderr

    # delete -l: the matching jobs only; none matching is no error
    none = cli("delete", "-l", "team=none", cwd=project)
    assert none.returncode == 0 and "no job matches -l team=none; nothing deleted" in none.stderr
    mixed = cli("delete", "vis-a", "-l", "team=vision", cwd=project)
    assert mixed.returncode == 1 and "without NAMEs or --all" in mixed.stderr
    deleted = cli("delete", "-l", "team=vision", "-o", "json", cwd=project)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout)["deleted"] == ["vis-a", "vis-b"]
    assert names_of() == ["nlp-c"]


COUNTER = """\
import os, sys
attempt = os.environ["TFDECLARE_ATTEMPT"]
for i in range(1, 8):
    print(f"line {i} of attempt {attempt}")
sys.exit(1 if attempt == "0" else 0)
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_logs_tail_and_previous_after_a_restart(project: Path) -> None:
    (project / "specs" / "count.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: count}\nspec:\n"
        f"  command: [python, -c, {json.dumps(COUNTER)}]\n"
        "  replicas: {worker: {count: 1, resources: {cpus: 0.1, mem: 64}}}\n"
    )
    applied = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr

    current = cli("logs", "count", "--task", "worker-0", cwd=project)
    assert current.stdout == "".join(f"line {i} of attempt 1\n" for i in range(1, 8))
    tail = cli("logs", "count", "--tail", "2", cwd=project)
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout == "worker-0 | line 6 of attempt 1\nworker-0 | line 7 of attempt 1\n"
    assert cli("logs", "count", "--tail", "0", cwd=project).stdout == ""
    previous = cli("logs", "count", "--previous", "--tail", "3", cwd=project)
    assert previous.returncode == 0, previous.stderr
    assert previous.stdout == "".join(f"worker-0 | line {i} of attempt 0\n" for i in (5, 6, 7))
    whole = cli("logs", "count", "--task", "worker-0", "-p", cwd=project)
    assert whole.stdout == "".join(f"line {i} of attempt 0\n" for i in range(1, 8))
    bad = cli("logs", "count", "--tail", "-1", cwd=project)
    assert bad.returncode != 0 and "number of lines" in bad.stderr
    assert cli("logs", "count", "-p", "-f", cwd=project).returncode == 1

    (project / "specs" / "once.yaml").write_text(_job("once", {}, command="[python, -c, 'print(1)']"))
    assert cli("apply", "specs/once.yaml", "--wait", "--timeout", "60", cwd=project).returncode == 0
    none = cli("logs", "once", "--task", "worker-0", "--previous", cwd=project)
    assert none.returncode == 1 and "no earlier launch" in none.stderr


# "late" only once the test has seen "early" in the logs (GO): each line its own sample
SLOW_TALKER = (
    "import os, time; print('early', flush=True)\n"
    "while not os.path.exists(GO): time.sleep(0.05)\n"
    "print('late')"
)


@pytest.mark.slow
@pytest.mark.e2e
def test_logs_timestamps_and_since_from_the_supervisors_samples(project: Path) -> None:
    import datetime
    import time

    go = project / "go"
    before = time.time()
    (project / "specs" / "slow.yaml").write_text(
        _job("slow", {}, command=json.dumps(["python", "-c", SLOW_TALKER.replace("GO", repr(str(go)))]))
    )
    assert cli("apply", "specs", cwd=project).returncode == 0

    def sampled() -> bool:  # the supervisor has noted when "early" was written (once a second)
        samples = [
            line.split()
            for p in live_files(project / ".tfdeclare", "*.log.times")
            for line in p.read_text().splitlines()
        ]
        return any(int(size) > 0 for size, _ in samples)  # "<log size> <time>" lines

    wait_until(sampled, 60, what="the first line's time sampled")
    go.touch()
    applied = cli("apply", "specs", "--wait", "--timeout", "60", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    after = time.time()

    stamped = cli("logs", "slow", "--timestamps", cwd=project)
    assert stamped.returncode == 0, stamped.stderr
    lines = stamped.stdout.splitlines()
    assert [line.split(" ", 3)[::3] for line in lines] == [["worker-0", "early"], ["worker-0", "late"]], lines
    times = [datetime.datetime.fromisoformat(line.split(" ")[2]).timestamp() for line in lines]
    assert before - 1 <= times[0] < times[1] <= after + 1
    # each line its own time, not the file's: "late" was written after "early" was sampled

    between = datetime.datetime.fromtimestamp((times[0] + times[1]) / 2, datetime.UTC).isoformat()
    since = cli("logs", "slow", "--task", "worker-0", "--since", between, cwd=project)
    assert since.returncode == 0 and since.stdout == "late\n", since.stdout + since.stderr
    assert cli("logs", "slow", "--task", "worker-0", "--since", "1h", cwd=project).stdout == "early\nlate\n"
    assert cli("logs", "slow", "--task", "worker-0", "--since", "0s", cwd=project).stdout == ""
    documents = [
        json.loads(line)
        for line in cli("logs", "slow", "--timestamps", "-o", "json", cwd=project).stdout.splitlines()
    ]
    assert [d["line"] for d in documents] == ["early", "late"] and all(
        d["time"].endswith("Z") for d in documents
    )
    bad = cli("logs", "slow", "--since", "yesterday", cwd=project)
    assert bad.returncode != 0 and "expected a duration" in bad.stderr
    naive = cli("logs", "slow", "--since", "2026-01-02T03:04:05", cwd=project)
    assert naive.returncode != 0 and "with its offset" in naive.stderr
