"""Issue 29, finding 1, as a property: no edit of a saved plan file widens what runs.

A project is planned once (``plan specs --out``) against a state with a finished job the files
no longer define (a prune candidate) and one protected by an empty file. Then every field of
the plan file is edited, one at a time (each with a set of hostile values, deleted, renamed)
and in pairs (hypothesis), and the edited file goes through ``replan_saved``, what ``apply
PLANFILE`` applies, in-process. Each edited plan is either refused (a ``UserError``: exit 1,
nothing applied) or gives exactly what the honest plan gives: the same actions, the same jobs
with the same canonical specs, source files and source folders (where their tasks run), the
same protected names and files. Anything else (another exception, another outcome) fails.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdeclare.cli.common import UserError, settings_from
from tfdeclare.cli.main import main
from tfdeclare.cli.run_commands import replan_saved
from tfdeclare.core.enums import Phase
from tfdeclare.core.plan.claims import differences
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.planner import Plan
from tfdeclare.core.plan.render import plan_json
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.loader import SourceRef, load_file
from tfdeclare.shell.store import StateStore

CONFIG = """\
backend: mesos  # takes images and volumes without an engine; nothing here reaches a master
policy:
  allowedImages: ["registry.example.com/*"]
  allowedHostPaths: [PROJECT/data]
  maxTasksPerJob: 4
"""
JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {{name: {name}, labels: {{team: vision}}}}
spec:
  image: registry.example.com/tf:2
  command: [python, train.py]
  env: {{DATA_DIR: /data, API_TOKEN: aB3dE5fG7hJ9kL1mN3pQ}}
  workingDir: {working_dir}
  volumes: [{{hostPath: PROJECT/data, containerPath: /data, mode: ro}}]
  replicas:
    worker: {{count: {count}, resources: {{cpus: 0.1, mem: 64}}}}
"""


def job_text(name: str, project: Path, *, working_dir: str = "sub", count: int = 1) -> str:
    return JOB.format(name=name, working_dir=working_dir, count=count).replace("PROJECT", str(project))


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[io.StringIO]:
    before = Path.cwd()
    err = io.StringIO()
    os.chdir(folder)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            yield err
    finally:
        os.chdir(before)


def finished_record(name: str, project: Path, source: str) -> JobRecord:
    (job,) = load_file(source, job_text(name, project).encode()).jobs
    return JobRecord(
        name,
        f"uid-{name}",
        job.canonical,
        job.spec_hash,
        Phase.SUCCEEDED,
        source=SourceRef(source, 1),
        source_dir=str((project / source).parent.resolve()),  # as apply records it (the prune scope)
        backend="mesos",
    )


@dataclass(frozen=True)
class Planned:
    project: Path
    document: dict[str, Any]
    outcome: object


def outcome(result: Plan, desired: DesiredState) -> object:
    """What applying ``result`` runs: its actions, and each job's spec, source and the folder its
    tasks' relative working folders are taken from (as the reconciler resolves it)."""
    jobs = {
        name: (
            json.dumps(job.canonical, sort_keys=True),
            job.source.file,
            job.source.line,
            str((Path.cwd() / job.source.file).parent.resolve()),
            repr(job.runs),
        )
        for name, job in desired.jobs.items()
    }
    files = (
        sorted(desired.protected),
        sorted(desired.invalid_files),
        sorted(desired.empty_files),
        desired.files,
    )
    return json.dumps(plan_json(result)["jobs"], sort_keys=True), jobs, files


def apply_plan(project: Path, document: Any) -> object | None:
    """What ``apply PLANFILE`` would apply for ``document``; None when it refuses it."""
    (project / "edited.json").write_text(json.dumps(document))
    with inside(project):
        options = argparse.Namespace(config=None, backend=None, state_dir=None, status_dir=None)
        configured = settings_from(options)
        try:
            result, desired = replan_saved("edited.json", configured, StateStore(configured.state_dir))
        except UserError:
            return None
        return outcome(result, desired)


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Planned:
    project = tmp_path_factory.mktemp("planned").resolve()
    for folder in ("specs/sub", "data", "other/sub"):
        (project / folder).mkdir(parents=True)
    (project / "tfdeclare.yaml").write_text(CONFIG.replace("PROJECT", str(project)))
    (project / "specs" / "a.yaml").write_text(job_text("a", project))
    (project / "specs" / "b.yaml").write_text(job_text("b", project, working_dir="/workspace", count=2))
    (project / "specs" / "empty.yaml").write_text("# being rewritten\n")
    # the same jobs elsewhere, one reaching out of its folder (the policy refuses it there)
    (project / "other" / "a.yaml").write_text(job_text("a", project))
    (project / "other" / "b.yaml").write_text(job_text("b", project, working_dir="../../etc", count=2))
    store = StateStore(project / ".tfdeclare")
    store.save(finished_record("gone", project, "specs/gone.yaml"))  # pruned only with --prune
    store.save(finished_record("c", project, "specs/empty.yaml"))  # its file holds no job now
    with inside(project) as err:
        assert main(["plan", "specs", "--out", "plan.json"]) in (0, 2), err.getvalue()
    document = json.loads((project / "plan.json").read_text())
    assert sorted(document["desiredAll"]) == ["a", "b"] and document["emptyFiles"] == ["specs/empty.yaml"]
    honest = apply_plan(project, document)
    assert honest is not None
    return Planned(project, document, honest)


def test_the_honest_plan_applies_what_it_says(planned: Planned) -> None:
    actions, jobs, _ = planned.outcome  # type: ignore[misc]
    assert [(j["name"], j["action"]) for j in json.loads(actions)] == [
        ("a", "create"),
        ("b", "create"),
        ("c", "keep"),  # protected by its empty file
        ("gone", "orphan"),  # kept: the plan was made without --prune
    ], actions
    assert {name: job[3] for name, job in jobs.items()} == dict.fromkeys("ab", str(planned.project / "specs"))


# ---- the edits --------------------------------------------------------------------------

Path_ = tuple[str | int, ...]
DELETE = object()  # the edit that removes the field
RENAME = object()  # the edit that renames a mapping's key


def paths_of(value: Any, path: Path_ = ()) -> Iterator[Path_]:
    """Every field of a JSON document, containers and leaves, but not the document itself."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*path, index))


def edited(document: dict[str, Any], edits: list[tuple[Path_, Any]]) -> dict[str, Any] | None:
    """``document`` with each (path, value) edit made in turn; None when an edit no longer
    applies (an earlier one removed its path)."""
    out = copy.deepcopy(document)
    for path, value in edits:
        parent: Any = out
        try:
            for part in path[:-1]:
                parent = parent[part]
            last = path[-1]
            parent[last]  # the field must still be there
        except (KeyError, IndexError, TypeError):
            return None
        if value is DELETE:
            del parent[last]
        elif value is RENAME:
            if not isinstance(last, str):
                return None
            parent[last + "x"] = parent.pop(last)
        else:
            parent[last] = copy.deepcopy(value)
    return out


# Values an attacker would put anywhere: other files and folders (the engine socket's, /etc),
# working folders that climb, the other paths, stdin, wrong types, other jobs' names, actions.
HOSTILE: list[Any] = [
    "/fake.yaml",
    "/var/run/fake.yaml",
    "/var/run/docker.sock",
    "etc",
    ".",
    "..",
    "../../../etc",
    "other/a.yaml",
    "other",
    "-",
    "",
    "a",
    "gone",
    "delete",
    "create",
    "0" * 64,
    None,
    True,
    0,
    7,
    -1,
    [],
    ["other"],
    ["-"],
    ["specs", "other"],
    ["spe\0cs"],
    [""],
    ["specs/gone.yaml"],
    ["c", "gone"],
    {},
    {"hostPath": "/", "containerPath": "/h"},
]


def single_edits(path: Path_, value: Any) -> list[Any]:
    """The edits of one field: remove it, rename it (a mapping's key), and a hostile value of
    another type or, for a string, another file or folder."""
    edits = [DELETE, *([RENAME] if isinstance(path[-1], str) else [])]
    if isinstance(value, str):
        return [*edits, "/fake.yaml" if "/" in value or value.endswith(".yaml") else "etc"]
    if isinstance(value, bool) or value is None:
        return [*edits, not value]
    if isinstance(value, int | float):
        return [*edits, value + 1]
    return [*edits, ["other"] if isinstance(value, list) else {}]


def test_every_single_field_edit_is_refused_or_changes_nothing(planned: Planned) -> None:
    paths = list(paths_of(planned.document))
    assert len(paths) > 150  # every field: the plan's, each job's spec and claims, the actions
    widened = []
    for path in paths:
        for value in single_edits(path, edited_value(planned.document, path)):
            document = edited(planned.document, [(path, value)])
            if document is None or document == planned.document:
                continue
            got = apply_plan(planned.project, document)
            if got is not None and got != planned.outcome:
                widened.append((path, value))
    assert not widened


def test_the_edits_of_the_finding_are_refused(planned: Planned) -> None:
    """``file`` alone, ``file`` with ``workingDir: etc`` or ``.``, ``paths`` to a folder whose
    copy of the job leaves its folder, prune switched on, the protection of ``c`` dropped."""
    for edits in (
        [(("desiredAll", "a", "file"), "/fake.yaml")],
        [
            (("desiredAll", "a", "file"), "/fake.yaml"),
            (("desiredAll", "a", "spec", "spec", "workingDir"), "etc"),
        ],
        [
            (("desiredAll", "a", "file"), "/var/run/x.yaml"),
            (("desiredAll", "a", "spec", "spec", "workingDir"), "."),
        ],
        [(("paths",), ["other"])],
        [(("paths",), ["spe\0cs"])],
        [(("paths",), ["other"]), (("files",), ["other/a.yaml", "other/b.yaml"])],
        [(("plan", "options", "prune"), True)],
        [(("emptyFiles",), [])],
        [(("desiredAll", "a", "spec", "spec", "volumes", 0, "hostPath"), "/")],
    ):
        document = edited(planned.document, edits)
        assert document is not None
        assert apply_plan(planned.project, document) is None, edits


@st.composite
def edit_pairs(draw: st.DrawFn, document: dict[str, Any]) -> list[tuple[Path_, Any]]:
    paths = list(paths_of(document))
    pool = [*HOSTILE, DELETE, RENAME]
    out = []
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(paths))
        value = draw(
            st.one_of(
                st.sampled_from(pool),
                st.text(max_size=12),
                st.sampled_from(paths).map(lambda p: edited_value(document, p)),  # another field's value
            )
        )
        out.append((path, value))
    return out


def edited_value(document: dict[str, Any], path: Path_) -> Any:
    value: Any = document
    for part in path:
        value = value[part]
    return value


def test_pairs_of_edits_are_refused_or_change_nothing(planned: Planned) -> None:
    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(edits=edit_pairs(planned.document))
    def check(edits: list[tuple[Path_, Any]]) -> None:
        document = edited(planned.document, edits)
        if document is None or document == planned.document:
            return
        got = apply_plan(planned.project, document)
        assert got is None or got == planned.outcome, edits

    check()


def test_differences_compare_types_and_name_each_field() -> None:
    assert differences({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}) == []
    assert differences({"a": 1}, {"a": True}) == [("a",)]  # JSON true is not 1
    assert differences({"a": 1.0}, {"a": 1}) == [("a",)]
    assert differences({"a": {"x": 1}, "b": [1, 2]}, {"a": {"y": 1}, "b": [1, 3]}) == [
        ("a", "x"),
        ("a", "y"),
        ("b", 1),
    ]
    assert differences({"b": [1]}, {"b": [1, 2]}) == [("b",)]
