"""Commands that only read the state folder read it as evidence (security review, after issue 29).

Before: ``status``, ``logs``, ``history`` and ``plan`` read the files of a state folder by name,
following links and opening FIFOs, unbounded: whoever could write a state folder (one shared
by mistake, another user's given by ``--state-dir``) planted ``<task>.log -> ~/.ssh/id_rsa``
and ``logs`` printed it, a FIFO at ``records.sqlite`` or a log hung the command, a link to
``/dev/zero`` read until memory ran out. Writers already refused such a folder.

Now (docs/security.md, "The state folder"): every reader runs the writers' check of the folder
first, without the lock, and refuses (exit 1, naming the path and the fix) a folder or
sub-folder others can write or own, or a link in them; and every file of the folder is read
through one opener (``files.open_regular``: no link followed, no FIFO waited on, a regular
file only, bounded), SQLite's database and journal included (looked at before SQLite opens
them). A file that cannot be read so is named.

``test_every_file_of_a_real_state_folder`` walks every file a real ``apply`` left and plants,
in turn, a link to a file holding a secret, a FIFO and a link to ``/dev/zero`` at it; every
read-only command then runs in a process with a timeout and an address-space limit: none
hangs, none prints the secret or a traceback, and one that fails names the file.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import SETTINGS_ENV

pytestmark = pytest.mark.e2e

MEMORY_LIMIT = 2 * 1024**3  # plenty for these commands, not for reading /dev/zero
SECRET = "SECRET-MARKER-7f3a9c"  # what a planted link leads to: never printed
TIMEOUT_S = 30

JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata:
  name: jr
spec:
  command: [python3, -c, "print('log-line-of-jr')"]
  replicas:
    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}
"""

# Every command that only reads the state folder, as a user runs it
READERS: tuple[tuple[str, ...], ...] = (
    ("status",),
    ("status", "jr"),
    ("status", "-o", "json"),
    ("logs", "jr"),
    ("logs", "jr", "--task", "worker:0", "--timestamps"),
    ("logs", "jr", "--follow"),
    ("history",),
    ("plan", "j.yaml"),
)

# Runs each command in turn in one process (one start-up for all), each one's output apart;
# a line on the real stderr before each says which runs (a hang shows where it is).
DRIVER = textwrap.dedent(
    """\
    import io, json, sys
    from tfdeclare.cli.main import main
    results = []
    real_out, real_err = sys.stdout, sys.stderr
    for argv in json.loads(sys.argv[1]):
        real_err.write(f"running {argv}\\n"); real_err.flush()
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        sys.stdout, sys.stderr = out, err
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
        finally:
            sys.stdout, sys.stderr = real_out, real_err
        results.append({"argv": argv, "rc": code, "out": out.buffer.getvalue().decode("utf-8", "replace"),
                        "err": err.buffer.getvalue().decode("utf-8", "replace")})
    real_out.write(json.dumps(results))
    """
)


def _env(registry: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS_ENV}
    return {
        **env,
        "PYTHONUNBUFFERED": "1",
        "TFDECLARE_REGISTRY_DIR": str(registry),
        "TFDECLARE_BACKGROUND_CONTROLLER": "off",
    }


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_all(project: Path, commands: Sequence[Sequence[str]]) -> list[dict[str, object]]:
    """Each command's exit code, stdout and stderr, run in one process with a timeout (a
    command that hangs fails the test, naming itself) and an address-space limit."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, json.dumps([list(c) for c in commands])],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=_env(project / "registry"),
            check=False,
            preexec_fn=_limit,
        )
    except subprocess.TimeoutExpired as err:
        said = err.stderr.decode() if isinstance(err.stderr, bytes) else str(err.stderr)
        pytest.fail(f"hung: {said.strip().splitlines()[-1:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, object]] = json.loads(done.stdout)
    return results


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose job ran to its end under the local backend: a real state folder (the
    records database and its journal, the lock, the history, the summaries' index, the task's
    folder, log, times and working folder), read by the tests in turn (each puts back what it
    planted)."""
    root = tmp_path_factory.mktemp("reads")
    (root / "j.yaml").write_text(JOB)
    (root / "secret").write_text(f"{SECRET}\n")
    applied = subprocess.run(
        [sys.executable, "-m", "tfdeclare", "apply", "j.yaml", "--wait", "--timeout", "60"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(root / "registry"),
        check=False,
    )
    assert applied.returncode == 0, applied.stderr
    (root / ".tfdeclare" / "history.jsonl").is_file() or pytest.fail("apply left no history")
    return root


def state_files(project: Path) -> list[Path]:
    """Every regular file under the state folder, found by walking it (none by name)."""
    state = project / ".tfdeclare"
    found = [
        Path(folder) / name
        for folder, _, names in os.walk(state)
        for name in names
        if not (Path(folder) / name).is_symlink()
    ]
    return sorted(found)


@contextlib.contextmanager
def planted(path: Path, kind: str, secret: Path) -> Iterator[None]:
    """``path`` replaced by a link to ``secret``, a FIFO, or a link to /dev/zero, then put back."""
    aside = path.with_name(path.name + ".aside")
    os.rename(path, aside)
    try:
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to(secret if kind == "secret" else Path("/dev/zero"))
        yield
    finally:
        path.unlink()
        os.rename(aside, path)


def assert_safe(result: dict[str, object], *, named: str | None = None) -> None:
    """No traceback, no secret; ``named`` (a file's name) said when the command fails."""
    text = f"{result['out']}{result['err']}"
    assert "Traceback" not in text and "internal error" not in text, result
    assert SECRET not in text, result
    assert result["rc"] in (0, 1), result
    if named is not None and result["rc"] != 0:
        assert named in str(result["err"]), result


def test_each_reader_works_on_a_folder_of_the_users_own(project: Path) -> None:
    """The normal case, as every other test here leaves it: each command reads the job."""
    results = {tuple(r["argv"]): r for r in run_all(project, READERS)}  # type: ignore[call-overload]
    for result in results.values():
        assert result["rc"] == 0, result
        assert_safe(result)
    assert "Succeeded" in str(results[("status",)]["out"])
    assert "Succeeded" in str(results[("status", "jr")]["out"])
    assert json.loads(str(results[("status", "-o", "json")]["out"]))[0]["name"] == "jr"
    for argv in (
        ("logs", "jr"),
        ("logs", "jr", "--follow"),
        ("logs", "jr", "--task", "worker:0", "--timestamps"),
    ):
        assert "log-line-of-jr" in str(results[argv]["out"]), results[argv]
    assert "No changes" in str(results[("plan", "j.yaml")]["out"])


@pytest.mark.parametrize("kind", ["secret", "fifo", "zero"])
def test_every_file_of_a_real_state_folder(project: Path, kind: str) -> None:
    """Each file a real run left, planted over in turn: every reader survives it (no hang,
    no secret, no traceback; a failure names the file), and the files they need are named."""
    files = state_files(project)
    names = {p.name for p in files}
    assert {"records.sqlite", "lock", "history.jsonl", "task.json", "exit.json"} <= names, names
    assert any(n.endswith(".log") for n in names) and any(n.endswith(".log.times") for n in names)
    for path in files:
        with planted(path, kind, project / "secret"):
            results = run_all(project, READERS)
        for result in results:
            assert_safe(result, named=path.name)
        by = {tuple(r["argv"]): r for r in results}  # type: ignore[call-overload]
        if path.name == "records.sqlite":  # the records: nothing to show without them
            for argv in (("status",), ("logs", "jr"), ("plan", "j.yaml")):
                assert by[argv]["rc"] == 1 and str(path) in str(by[argv]["err"]), by[argv]
        if path.name == "history.jsonl":
            assert by[("history",)]["rc"] == 1 and str(path) in str(by[("history",)]["err"])
        if path.name.endswith(".log"):  # the log asked for alone: an error naming it
            strict = by[("logs", "jr", "--task", "worker:0", "--timestamps")]
            assert strict["rc"] == 1 and str(path) in str(strict["err"]), strict
            assert str(path) in str(by[("logs", "jr")]["err"]), by[("logs", "jr")]


def _refusals(project: Path) -> list[dict[str, object]]:
    results = run_all(project, READERS)
    for result in results:
        assert_safe(result)
        assert result["rc"] == 1, result
        assert str(result["err"]).strip().splitlines()[-1].startswith("tfdeclare: error: the state folder")
        assert "is not read" in str(result["err"]), result
    return results


@pytest.mark.parametrize("where", ["", "local", "local/tasks", "local/logs", "jobs", "mesos"])
def test_a_link_planted_in_the_state_folder_or_its_own_sub_folders_is_refused(
    project: Path, where: str
) -> None:
    """A link at any name directly in the folder or one of its own sub-folders (the writers'
    rule): every reader refuses the folder, naming the link, and reads nothing."""
    folder = project / ".tfdeclare" / where
    made = not folder.exists()
    folder.mkdir(mode=0o700, exist_ok=True)
    link = folder / "jr.1.worker-0.9" if where else folder / "records.sqlite-wal"
    link.symlink_to(project / "secret")
    try:
        for result in _refusals(project):
            assert f"{link} is a link (not followed)" in str(result["err"]), result
    finally:
        link.unlink()
        if made:
            folder.rmdir()


@pytest.mark.parametrize("where", ["", "local", "local/tasks", "local/logs", "local/work"])
@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o757])
def test_a_state_folder_others_can_write_is_not_read(project: Path, where: str, mode: int) -> None:
    folder = project / ".tfdeclare" / where
    before = folder.stat().st_mode & 0o7777
    folder.chmod(mode)
    try:
        for result in _refusals(project):
            assert f"{folder} can be written by others (mode {mode:04o})" in str(result["err"]), result
            assert f"chmod go-w {folder}" in str(result["err"]), result
    finally:
        folder.chmod(before)


@pytest.mark.parametrize("where", ["", "local/tasks"])
def test_a_state_folder_of_another_user_is_not_read(project: Path, where: str) -> None:
    """Another user's folder (``--state-dir ~alice/.tfdeclare`` run by root): its owner could
    have planted anything there."""
    if os.geteuid() != 0:
        missing("giving a folder to another user needs root")  # CI runs as root
    folder = project / ".tfdeclare" / where
    os.chown(folder, 65534, -1)
    try:
        for result in _refusals(project):
            assert f"{folder} belongs to another user (uid 65534)" in str(result["err"]), result
    finally:
        os.chown(folder, 0, -1)


@pytest.mark.parametrize("name", ["tasks.json", "tasks.log", "framework.json"])
@pytest.mark.parametrize("kind", ["secret", "fifo", "zero"])
def test_the_mesos_journal_is_read_as_evidence(tmp_path: Path, name: str, kind: str) -> None:
    """The Mesos backend's own files (``<state-dir>/mesos``), read when it is built for any
    command: a link, a FIFO or /dev/zero there is a ``JournalError`` naming the file, at once."""
    mesos = tmp_path / "mesos"
    mesos.mkdir()
    (tmp_path / "secret").write_text(f'{{"tasks": [], "frameworkId": "{SECRET}"}}\n')
    target = mesos / name
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(tmp_path / "secret" if kind == "secret" else Path("/dev/zero"))
    code = textwrap.dedent(
        f"""\
        import sys
        from pathlib import Path
        from tfdeclare.backends.mesos.journal import FrameworkStore, JournalError, TaskJournal
        try:
            loaded = (FrameworkStore if {name!r} == "framework.json" else TaskJournal)(Path({str(mesos)!r})).load()
        except JournalError as err:
            print("refused:", err)
        else:
            print("read:", loaded)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        preexec_fn=_limit,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"refused: {target}"), done.stdout
    assert SECRET not in done.stdout


def test_other_state_folders_are_read_only_when_they_pass_the_check(project: Path) -> None:
    """``plan`` under another state folder looks for the jobs it would create under the state
    folders the registry names (the project's, recorded by its ``apply``): one that fails the
    check is named in a warning and not read."""

    def plan_elsewhere() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tfdeclare", "--state-dir", "st2", "plan", "j.yaml"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            env=_env(project / "registry"),
            check=False,
            preexec_fn=_limit,
        )

    state = project / ".tfdeclare"
    found = plan_elsewhere()
    assert found.returncode == 0, found.stderr
    assert f"already finished with this very spec under state folder {state}" in found.stderr, found.stderr
    state.chmod(0o777)
    try:
        refused = plan_elsewhere()
    finally:
        state.chmod(0o700)
    assert refused.returncode == 0, refused.stderr
    assert "Traceback" not in refused.stderr
    assert f"the state folder {state} is not read: {state} can be written by others" in refused.stderr
    assert "already finished" not in refused.stderr
    assert not (project / "st2").exists()


@pytest.mark.parametrize("kind", ["secret", "fifo", "zero"])
def test_the_cluster_servers_saved_secrets_are_read_as_evidence(tmp_path: Path, kind: str) -> None:
    """``<state-dir>/mesos/clusters.json`` (the cluster server's port and generations): a link,
    a FIFO or /dev/zero there is passed over at once with a warning naming it."""
    mesos = tmp_path / "mesos"
    mesos.mkdir()
    (tmp_path / "secret").write_text(json.dumps({"port": 1, "generations": [], "x": SECRET}))
    target = mesos / "clusters.json"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(tmp_path / "secret" if kind == "secret" else Path("/dev/zero"))
    code = textwrap.dedent(
        f"""\
        import logging
        from pathlib import Path
        from tfdeclare.backends.mesos.clusterwire import ClusterWire
        logging.basicConfig(format="%(message)s")
        print("read:", ClusterWire(None, Path({str(mesos)!r}))._load())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        preexec_fn=_limit,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "read: {}\n"
    assert done.stderr.startswith(f"cannot read {target} ("), done.stderr
    assert SECRET not in done.stdout + done.stderr


def test_a_fifo_a_task_leaves_in_its_working_folder_never_stops_a_launch(tmp_path: Path) -> None:
    """A task can write its own working folder (``local/work/<job>/<task>``), where the local
    backend keeps the mark of the source folder it linked last, read at the next launch: a
    FIFO put there by the task hung that launch (``apply``). Now the mark is read as a
    regular file only, and written again by a rename."""
    (tmp_path / "j.yaml").write_text(JOB)
    env = _env(tmp_path / "registry")

    def apply() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tfdeclare", "apply", "j.yaml", "--wait", "--timeout", "60"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            check=False,
        )

    first = apply()
    assert first.returncode == 0, first.stderr
    mark = tmp_path / ".tfdeclare" / "local" / "work" / "jr" / "worker-0" / ".tfdeclare-source"
    assert mark.read_text() == str(tmp_path)
    mark.unlink()
    os.mkfifo(mark)
    (tmp_path / "j.yaml").write_text(JOB.replace("log-line-of-jr", "second-run-of-jr"))  # a restart
    second = apply()
    assert second.returncode == 0, second.stderr
    assert mark.is_file() and not mark.is_symlink() and mark.read_text() == str(tmp_path)
    assert (tmp_path / ".tfdeclare" / "local" / "work" / "jr" / "worker-0" / "j.yaml").is_symlink()


# The modules that own files of the state folder (shell/store.py's layout: the records, the
# history, the problems, the index, the lock, the local backend's task folders and logs, the
# Mesos journal and cluster secrets), and the openers that read by name without the checks.
OWNERS = (
    *sorted(Path("tfdeclare/backends/local").glob("*.py")),
    Path("tfdeclare/backends/mesos/journal.py"),
    Path("tfdeclare/backends/mesos/clusterwire.py"),
    *(
        Path(f"tfdeclare/shell/{name}.py")
        for name in ("store", "history", "problems", "statuswriter", "lock")
    ),
    *(Path(f"tfdeclare/cli/{name}.py") for name in ("status_command", "logs_command", "history_command")),
)
UNCHECKED_READ = re.compile(r"(?<![.\w])open\(|\.read_text\(|\.read_bytes\(|json\.load\(")
NOT_THE_STATE_FOLDER = ('open("/proc/', 'open(f"/proc/', "open(os.devnull")


def test_no_module_that_owns_state_files_reads_one_by_name_unchecked() -> None:
    """Every file of the state folder is read through ``files.open_regular`` and its two
    readers: a builtin ``open``, ``read_text``, ``read_bytes`` or ``json.load`` of a file in
    the modules that own them would read through a link or wait on a FIFO again. SQLite opens
    the database only after ``_plain_files`` has looked at it and its journal."""
    root = Path(__file__).resolve().parents[2]
    found = [
        f"{path}:{number}: {line.strip()}"
        for path in OWNERS
        for number, line in enumerate((root / path).read_text().splitlines(), 1)
        if UNCHECKED_READ.search(line) and not any(allowed in line for allowed in NOT_THE_STATE_FOLDER)
    ]
    assert found == []
    tree = ast.parse((root / "tfdeclare/shell/store.py").read_text())
    connecting = [
        function
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        and any(isinstance(node, ast.Attribute) and node.attr == "connect" for node in ast.walk(function))
    ]
    assert {f.name for f in connecting} == {"_reader", "_writer"}
    for function in connecting:
        lines = {
            n.func.attr: n.lineno
            for n in sorted(ast.walk(function), key=lambda n: -getattr(n, "lineno", 0))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        }  # each method's first call
        assert lines["_plain_files"] < lines["connect"], function.name
