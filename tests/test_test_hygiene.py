"""Rules for the tests themselves that keep them correct on parallel workers (make test runs
them on several, tests/conftest.py), each the class of a failure seen in CI.

- The Docker SDK's ``containers.list`` inspects every container it listed, one by one; one
  removed in between (by the test's own backend, or another worker's test) raises NotFound out
  of the listing, unless ``ignore_removed=True``.
- A local backend's port range written into a test as numbers is shared with every other test
  on every worker that writes the same numbers: a job that restarts on its ports, or a slot that
  gets its port back, loses them to another test's controller. Such a test takes its worker's
  own range (``worker_ports``).
- A test waits for a condition (tests/waiting.py: ``wait_until``), never for a fixed time: on a
  loaded machine a fixed time is too short (the task ended, the timer fired before the test
  looked). Real ``time.sleep`` calls are counted against a ceiling, and no other module defines
  its own polling loop under one of the helper names they had.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])

# Literal ranges that are data, not a range a running backend hands out to tasks that restart:
# the config parser's own cases, and the port that the records of earlier releases name.
LITERAL_PORTS_ALLOWED = {"tests/test_backend_plugins.py", "tests/test_local_records.py"}
LITERAL_RANGE = re.compile(r"portRange:\s*\{\s*first:\s*\d|port_first\s*=\s*\d")


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _unsafe_listings(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "list"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "containers"
        and not any(k.arg == "ignore_removed" for k in node.keywords)
    ]


def test_container_listings_ignore_containers_removed_meanwhile() -> None:
    found = {_relative(p): lines for p in SOURCES if (lines := _unsafe_listings(p))}
    assert not found, f"containers.list without ignore_removed=True (file: lines): {found}"


def test_local_port_ranges_are_the_workers_own() -> None:
    found = {}
    for path in SOURCES:
        if path.parts[-2] != "tests" or _relative(path) in LITERAL_PORTS_ALLOWED:
            continue
        text = path.read_text().splitlines()
        if lines := [n for n, line in enumerate(text, 1) if LITERAL_RANGE.search(line)]:
            found[_relative(path)] = lines
    assert not found, f"a literal local port range (file: lines), use worker_ports(): {found}"


def test_xdist_groups_keep_their_tests_on_one_worker(tmp_path: Path) -> None:
    """make test relies on ``--dist loadgroup`` running one group's tests on one worker, one
    after another (tests/conftest.py); a pytest that pytest-xdist does not fit ignores the
    marks without a word. Four grouped tests on two workers: one worker runs them all."""
    (tmp_path / "test_grouped.py").write_text(
        "import os\nimport pytest\n\n"
        + "".join(
            f"@pytest.mark.xdist_group('one')\ndef test_{i}():\n"
            f"    print('WORKER', os.environ['PYTEST_XDIST_WORKER'])\n\n"
            for i in range(4)
        )
        + "".join(f"def test_free_{i}():\n    pass\n\n" for i in range(4))
    )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "test_grouped.py"]
    done = subprocess.run(
        [*command, "-n", "2", "--dist", "loadgroup"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = set(re.findall(r"^WORKER (gw\d+)$", done.stdout, re.M))
    assert len(workers) == 1, done.stdout


def test_the_group_marks_are_added_before_xdist_reads_them() -> None:
    """tests/conftest.py adds xdist_group marks in a collection hook; pytest-xdist reads them in
    its own, which runs first unless ours is ``tryfirst`` (checked: without it every
    conformance test ran on any worker)."""
    from tests import conftest

    assert conftest.pytest_collection_modifyitems.pytest_impl["tryfirst"]  # type: ignore[attr-defined]


# Real sleeps left in tests/ (an AST count: calls, not text in task scripts or comments): the
# task scripts' own waits (e2e_task.py, hung_task.py, tf_pss_preemptible.py, pss_stand_in.py's
# save), waiting.py's
# poll, a registry's trickle rate, pauses that are the behaviour under test (a user's pause
# while writing a file, a partition's length), and checks that nothing happens within a while
# (a suspended job is not relaunched, a passing health check stays passing, a drained agent is
# offered to no one, a daemon on a full disk passes no faster than its write retry), samplings
# over a span of real processes (a daemon's git children and descriptors over 60 passes, an
# engine's answers while it shuts down) and a race's random jitter (a path swapped under a
# launch): those need virtual time in the daemon's and the backends' own loops.
# Lower it when you remove one.
SLEEP_CEILING = 24
POLLING_NAMES = {"wait_until", "eventually", "until", "wait_for"}


def _polls_itself(function: ast.FunctionDef) -> bool:
    """A helper under a polling name that does not wait through ``wait_until`` (a loop of its
    own); a wrapper that asks a domain question through it is fine."""
    return not any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "wait_until"
        for node in ast.walk(function)
    )


def _sleeps(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "sleep"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    ]


def test_tests_wait_for_conditions_not_for_time() -> None:
    tests = [p for p in SOURCES if _relative(p).startswith("tests/")]
    found = {_relative(p): lines for p in tests if (lines := _sleeps(p))}
    count = sum(len(lines) for lines in found.values())
    assert count <= SLEEP_CEILING, f"{count} time.sleep calls in tests/ (ceiling {SLEEP_CEILING}): {found}"
    helpers = {
        _relative(p): node.name
        for p in tests
        if _relative(p) != "tests/waiting.py"
        for node in ast.parse(p.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name in POLLING_NAMES and _polls_itself(node)
    }
    assert not helpers, f"a polling helper of its own (use tests/waiting.py): {helpers}"


def test_every_task_script_that_listens_is_named_for_the_shared_ports_group() -> None:
    """A task script that binds the port of its TF_CONFIG takes one of the Mesos agents' ports
    (31000 and up, lowest first) on this machine; two such tests on two workers took the same
    port (a health-check test's task exited 1 on EADDRINUSE, four launches in a row). Every such
    script is in tests/conftest.py's LISTENING_TASKS, so the tests that run it share a worker."""
    from tests.conftest import LISTENING_TASKS

    listening = sorted(
        path.name
        for path in (Path(__file__).parent).glob("*.py")
        if "TF_CONFIG" in (text := path.read_text())
        and 'if __name__ == "__main__"' in text
        and re.search(r"create_server\(|\.bind\(", text)
    )
    assert listening, "no task script found: the search is wrong"
    assert sorted(set(listening) - set(LISTENING_TASKS)) == []
