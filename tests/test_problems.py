"""Source problems as state (issue 31): the pure model (``core.plan.problems``) in tables, the
plan's jobs held back by each file, and the persisted file (``shell.problems``): written
atomically, read back as written, and a damaged, oversized or linked one refused."""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.controller_world import World, job_text
from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.plan import problems as model
from tfdeclare.core.plan.desired import assemble
from tfdeclare.core.plan.planner import plan
from tfdeclare.core.plan.problems import Problem, ProblemKind, changes, counts, held_back, kind_of, standing
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.urls import hide_credentials, without_credentials
from tfdeclare.daemon import page
from tfdeclare.daemon.httpguard import AccessPolicy
from tfdeclare.daemon.server import DaemonServer
from tfdeclare.daemon.service import Daemon, DaemonOptions
from tfdeclare.daemon.sources import FolderSource
from tfdeclare.shell import problems as stored

SOURCE = "file:///srv/jobs.git"


def error(path: str, code: Code = Code.SCHEMA, line: int = 4, message: str = "bad") -> Diagnostic:
    return Diagnostic(path, line, 7, message, "$.spec", code)


WARNING = Diagnostic("jobs/empty.yaml", 1, None, "holds no job", None, Code.NO_JOB_DOCUMENT, Severity.WARNING)


@pytest.mark.parametrize(
    ("codes", "kind"),
    [
        ([Code.SCHEMA], ProblemKind.INVALID_SPEC),
        ([Code.YAML_SYNTAX, Code.DUPLICATE_NAME], ProblemKind.INVALID_SPEC),
        ([Code.READ_ERROR], ProblemKind.UNREADABLE),
        ([Code.SCHEMA, Code.READ_ERROR], ProblemKind.UNREADABLE),
        ([Code.DUPLICATE_NAME], ProblemKind.DUPLICATE_NAME),
        ([Code.DUPLICATE_NAME, Code.QUOTA], ProblemKind.DUPLICATE_NAME),
        ([Code.BACKEND], ProblemKind.POLICY),
        ([Code.QUOTA, Code.BACKEND], ProblemKind.POLICY),
        ([Code.KUBEFLOW], ProblemKind.INVALID_SPEC),
    ],
)
def test_the_kind_of_a_file_problem_comes_from_its_errors(codes: list[Code], kind: ProblemKind) -> None:
    assert kind_of([error("a.yaml", code) for code in codes]) is kind


def run(
    diagnostics: list[Diagnostic] | None, previous: tuple[Problem, ...] = (), **given: object
) -> tuple[Problem, ...]:
    arguments: dict[str, object] = {
        "source": SOURCE,
        "source_error": None,
        "fetch": True,
        "rejected": None,
        "revision": "c2",
        "now": 200.0,
        "previous": previous,
        "held": {},
    }
    arguments.update(given)
    return standing(diagnostics, **arguments)  # type: ignore[arg-type]


def test_one_problem_per_file_with_its_errors_sorted_by_path_warnings_left_out() -> None:
    found = run(
        [error("jobs/b.yaml", line=2), WARNING, error("jobs/a.yaml"), error("jobs/b.yaml", line=9)],
        held={"jobs/b.yaml": ("b",)},
    )
    assert [(p.path, p.kind, p.diagnostic_count, p.jobs) for p in found] == [
        ("jobs/a.yaml", ProblemKind.INVALID_SPEC, 1, ()),
        ("jobs/b.yaml", ProblemKind.INVALID_SPEC, 2, ("b",)),
    ]
    assert found[1].message == "jobs/b.yaml:2:7: error: bad (at $.spec)"
    assert (found[1].since, found[1].revision) == (200.0, "c2")


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        ([error("a.yaml")], [error("a.yaml", line=9)], True),  # still invalid, elsewhere: the same problem
        ([error("a.yaml")], [error("a.yaml", Code.DUPLICATE_NAME)], False),  # another kind: a new one
        ([error("a.yaml")], [], None),  # fixed: gone
    ],
)
def test_a_problem_that_still_stands_keeps_its_since_and_revision(
    before: list[Diagnostic], after: list[Diagnostic], kept: bool | None
) -> None:
    first = run(before, now=100.0, revision="c1")
    second = run(after, first, now=200.0, revision="c2")
    if kept is None:
        assert second == ()
        assert changes(first, second).cleared == first
        return
    (problem,) = second
    assert (problem.since, problem.revision) == ((100.0, "c1") if kept else (200.0, "c2"))
    assert problem.diagnostics == tuple(after), "the diagnostics are this pass's"
    assert bool(changes(first, second).appeared) is not kept


def test_files_not_read_stand_as_last_seen_and_the_source_problem_is_added() -> None:
    first = run([error("jobs/a.yaml")], now=100.0)
    failing = run(None, first, source_error="git: cannot reach it", now=150.0)
    assert [(p.path, p.kind) for p in failing] == [
        ("file:///srv/jobs.git", ProblemKind.FETCH_FAILED),
        ("jobs/a.yaml", ProblemKind.INVALID_SPEC),
    ]
    assert failing[0].message == "file:///srv/jobs.git: error: git: cannot reach it"
    still = run(None, failing, source_error="git: cannot reach it", now=180.0)
    assert still[0].since == 150.0
    back = run([error("jobs/a.yaml")], still, now=190.0)
    assert [(p.path, p.since) for p in back] == [("jobs/a.yaml", 100.0)]
    folder = run(None, (), source_error="specs is not a folder", fetch=False, source="specs")
    assert [(p.path, p.kind) for p in folder] == [("specs", ProblemKind.UNREADABLE)]


def test_an_unverified_head_is_a_problem_of_the_source_at_its_commit() -> None:
    (problem,) = run([], rejected=("c3", "revision c3 is not applied: no signature"), revision="c2")
    assert (problem.path, problem.kind, problem.revision) == (SOURCE, ProblemKind.UNVERIFIED_COMMIT, "c3")
    assert "no signature" in problem.message


def test_bounds_hold_whatever_the_source_holds() -> None:
    many = [error(f"jobs/{i:04d}.yaml") for i in range(model.MAX_PROBLEMS + 50)]
    every = run(many)
    assert len(every) == model.MAX_PROBLEMS + 50, "every problem stands (and is counted)"
    shown, omitted = model.bounded(every)
    assert (len(shown), omitted) == (model.MAX_PROBLEMS, 50)
    (one,) = run(
        [error("a.yaml", line=i) for i in range(1, 40)], held={"a.yaml": tuple(f"j{i}" for i in range(80))}
    )
    assert (len(one.diagnostics), one.diagnostic_count) == (model.MAX_DIAGNOSTICS, 39)
    assert (len(one.jobs), one.job_count) == (model.MAX_JOBS, 80)


def test_bounded_lists_the_source_then_what_holds_jobs_back_then_unreadable_and_counts_the_rest() -> None:
    """2000 invalid files (m0 ... m1999, sorted as text m1, m10, m100, ...), m1999 holding back
    a running job, m1998 unreadable, and the source's fetch failing: the 200 listed are the
    source, m1999, m1998, then m0 ... m196 in natural order; 1801 left out, every one counted."""
    files = [error(f"jobs/m{i}.yaml") for i in range(2000) if i != 1998]
    files.append(error("jobs/m1998.yaml", Code.READ_ERROR))
    every = run(files, source_error="unreachable", held={"jobs/m1999.yaml": ("held",)})
    assert counts(every) == {
        **dict.fromkeys((k.value for k in ProblemKind), 0),
        "invalid-spec": 1999,
        "unreadable": 1,
        "fetch-failed": 1,
    }
    shown, omitted = model.bounded(every, (SOURCE,))
    assert (len(shown), omitted) == (model.MAX_PROBLEMS, 1801)
    paths = [p.path for p in shown]
    assert paths == sorted(paths), "listed by path, as before"
    assert {SOURCE, "jobs/m1999.yaml", "jobs/m1998.yaml"} <= set(paths)
    assert {f"jobs/m{i}.yaml" for i in range(197)} <= set(paths) and "jobs/m197.yaml" not in paths
    assert model.bounded(shown, (SOURCE,)) == (shown, 0), "nothing more to leave out"
    document = model.document(shown, 0.0, omitted=omitted)
    assert document["problemsOmitted"] == 1801 and model.omitted_of(document) == 1801
    assert model.omitted_of({"problems": []}) == 0, "a file of an earlier release: none left out"
    with pytest.raises(ValueError, match="not a count"):
        model.omitted_of({"problemsOmitted": -1})


def test_jobs_not_started_here_are_a_problem_of_their_file_until_resolved() -> None:
    def refused(name: str, path: str) -> Diagnostic:
        return Diagnostic(path, 3, None, f"{name}: not started: it exists under /x", None, Code.ELSEWHERE)

    first = run([], not_started={"b": refused("b", "two.yaml"), "a": refused("a", "two.yaml")})
    (problem,) = first
    assert (problem.path, problem.kind, problem.jobs) == ("two.yaml", ProblemKind.NOT_STARTED, ("a", "b"))
    assert (
        problem.message == "two.yaml:3: error: a: not started: it exists under /x" and problem.since == 200.0
    )
    later = run([], first, now=300.0, not_started={"a": refused("a", "two.yaml")})
    assert [(p.jobs, p.since) for p in later] == [(("a",), 200.0)]  # it stands since it was first seen
    assert run(None, later, now=400.0) == later  # the files not read: as last seen
    assert run([], later, now=500.0) == ()  # gone from there: resolved
    assert counts(first)["not-started"] == 1


def test_counts_name_every_kind() -> None:
    found = run([error("a.yaml"), error("b.yaml", Code.QUOTA)], source_error="down")
    assert counts(found) == {
        "invalid-spec": 1,
        "unreadable": 0,
        "policy": 1,
        "duplicate-name": 0,
        "unverified-commit": 0,
        "fetch-failed": 1,
        "not-started": 0,
    }
    assert set(counts(())) == {k.value for k in ProblemKind} and not any(counts(()).values())


JOB = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n  command: [python, t.py]\n"
    "  replicas:\n    worker: {{count: {count}}}\n"
)


def test_held_back_names_the_jobs_each_file_keeps_from_being_applied() -> None:
    results = [
        load_file("jobs/a.yaml", JOB.format(name="a", count="x").encode()),  # invalid: a is not applied
        load_file("jobs/b.yaml", JOB.format(name="twice", count=1).encode()),
        load_file("jobs/c.yaml", JOB.format(name="twice", count=1).encode()),
        load_file("jobs/d.yaml", JOB.format(name="d", count=1).encode()),
    ]
    made = plan(assemble(results), {})
    assert held_back(made) == {"jobs/a.yaml": ("a",), "jobs/b.yaml": ("twice",), "jobs/c.yaml": ("twice",)}
    found = run(list(made.diagnostics), held=held_back(made))
    assert [(p.path, p.kind, p.jobs) for p in found] == [
        ("jobs/a.yaml", ProblemKind.INVALID_SPEC, ("a",)),
        ("jobs/b.yaml", ProblemKind.DUPLICATE_NAME, ("twice",)),
        ("jobs/c.yaml", ProblemKind.DUPLICATE_NAME, ("twice",)),
    ]


def test_the_file_round_trips_and_is_written_atomically(tmp_path: Path) -> None:
    found = run(
        [error("jobs/a.yaml"), error("jobs/b.yaml", Code.DUPLICATE_NAME)], held={"jobs/a.yaml": ("a",)}
    )
    path = stored.path_in(tmp_path)
    assert stored.load(path) == ((), None), "no file: no problems"
    stored.save(path, found, 1796280000.0)
    assert stored.load(path) == (found, "2026-12-03T06:40:00Z")
    assert [p.name for p in tmp_path.iterdir()] == ["problems.json"], "no temp file left"
    stored.save(path, (), 1796280001.0)
    assert stored.load(path)[0] == ()


@pytest.mark.parametrize(
    "damage",
    ["not json", "link", "fifo", "huge", "wrong kind", "bad field"],
)
def test_a_damaged_file_is_refused_saying_why(tmp_path: Path, damage: str) -> None:
    path = stored.path_in(tmp_path)
    good = json.dumps(model.document(run([error("a.yaml")]), 0.0))
    if damage == "not json":
        path.write_text("{")
    elif damage == "link":
        (tmp_path / "elsewhere.json").write_text(good)
        path.symlink_to(tmp_path / "elsewhere.json")
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "huge":
        path.write_text(" " * (stored.MAX_BYTES + 1))
    elif damage == "wrong kind":
        path.write_text(good.replace("SourceProblems", "TFJobStatus"))
    else:
        path.write_text(good.replace('"invalid-spec"', '"typo"'))
    with pytest.raises(stored.ProblemsUnreadable, match=r"problems\.json"):
        stored.load(path)


@pytest.mark.parametrize(
    ("path", "roots", "expected"),
    [
        ("specs/a.yaml", ["specs"], True),
        ("specs/a.yaml", ["specs/"], True),
        ("specs/a.yaml", ["./specs"], True),
        ("specs/a.yaml", ["specs/a.yaml"], True),
        ("specs/a.yaml", ["."], True),
        ("specsx/a.yaml", ["specs"], False),
        ("other/a.yaml", ["specs", "more"], False),
        ("specs/../other/a.yaml", ["other"], True),
        ("/abs/specs/a.yaml", ["/abs/specs"], True),
        ("/abs/specs/a.yaml", ["abs/specs"], False),
        ("file:///srv/jobs.git", ["specs"], False),
    ],
)
def test_under_compares_paths_as_given(path: str, roots: list[str], expected: bool) -> None:
    assert model.under(path, roots) is expected


def test_merged_replaces_only_what_was_read() -> None:
    daemon = run([error("specs/a.yaml"), error("other/b.yaml")], source_error="down", now=100.0)
    found = tuple(p for p in run([error("specs/c.yaml")], daemon, now=200.0) if p.path.startswith("specs"))
    after = model.merged(daemon, found, ["specs"])
    assert [(p.path, p.since) for p in after] == [
        ("file:///srv/jobs.git", 100.0),
        ("other/b.yaml", 100.0),
        ("specs/c.yaml", 200.0),
    ]


class Endpoints:
    """What the server asks of a daemon with one problem standing."""

    problem = run([error("specs/secret-project.yaml")], held={"specs/secret-project.yaml": ("a",)})[
        0
    ].to_json()

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok", "problems": [self.problem]}

    def metrics_text(self) -> str:
        return ""

    def jobs(self) -> list[dict[str, Any]]:
        return [{"name": "a", "problems": [self.problem]}]

    def jobs_json(self) -> str:
        return json.dumps(self.jobs())

    def problem_list(self) -> list[dict[str, Any]]:
        return [self.problem]

    def problems_omitted(self) -> int:
        return 0

    def request_sync(self) -> bool:
        return True


def ask(server: DaemonServer, path: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{server.address[1]}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize("for_reads", [False, True])
def test_the_endpoints_name_the_files_to_those_who_may_read(for_reads: bool) -> None:
    token = "a-token-of-sixteen-or-more"
    server = DaemonServer(
        "127.0.0.1", 0, Endpoints(), AccessPolicy(frozenset(), token, token_for_reads=for_reads)
    )  # type: ignore[arg-type]
    server.start()
    try:
        code, open_health = ask(server, "/healthz")
        assert code == 200
        if for_reads:  # a probe without the token: the kinds only
            assert open_health["problems"] == [{"kind": "invalid-spec"}]
            assert "secret-project" not in json.dumps(open_health)
            assert ask(server, "/jobs?problems=true")[0] == 401
        else:
            assert open_health["problems"][0]["path"] == "specs/secret-project.yaml"
        assert ask(server, "/healthz", token)[1]["problems"][0]["path"] == "specs/secret-project.yaml"
        code, both = ask(server, "/jobs?problems=true", token)
        assert code == 200 and [p["path"] for p in both["problems"]] == ["specs/secret-project.yaml"]
        assert isinstance(ask(server, "/jobs", token)[1], list), "the plain /jobs stays a list"
        assert ask(server, "/jobs?problems=1", token)[0] == 400
    finally:
        server.close()


def test_a_head_refused_before_any_good_one_is_one_problem_not_two() -> None:
    why = "revision c3 is not applied: it is not signed"
    (problem,) = run(None, source_error=why, rejected=("c3", why))
    assert (problem.kind, problem.revision) == (ProblemKind.UNVERIFIED_COMMIT, "c3")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://ada:s3cret@git.example.com/ml/jobs.git", "https://git.example.com/ml/jobs.git"),
        ("https://oauth2:tok@en@git.example.com:8443/x.git", "https://git.example.com:8443/x.git"),
        ("https://git.example.com/ml/jobs.git", "https://git.example.com/ml/jobs.git"),
        ("file:///srv/jobs.git", "file:///srv/jobs.git"),
        ("git@github.com:ml/jobs.git", "git@github.com:ml/jobs.git"),  # scp-like: a user name, no secret
    ],
)
def test_a_source_problem_names_the_url_without_credentials(url: str, shown: str) -> None:
    assert without_credentials(url) == shown
    assert hide_credentials(f"git {url} branch main") == f"git {shown} branch main"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            "tfdeclare daemon --git https://ada:s3cret@h/x.git --path jobs",
            "tfdeclare daemon --git https://h/x.git --path jobs",
        ),
        (
            "fatal: unable to access 'https://tok@h/x.git/': 403",
            "fatal: unable to access 'https://h/x.git/': 403",
        ),
        ("ada@example.com pushed to https://h/x.git", "ada@example.com pushed to https://h/x.git"),
        ("http://a:b@h1/x and ssh://git:p@h2:22/y", "http://h1/x and ssh://h2:22/y"),
    ],
)
def test_credentials_are_left_out_of_any_text(text: str, shown: str) -> None:
    assert hide_credentials(text) == shown


@pytest.mark.parametrize("readiness", ["ok", "degraded"])
def test_the_page_header_is_not_ok_while_problems_stand(readiness: str) -> None:
    problem = run([error("specs/<i>x</i>.yaml", message="<b>bad</b>")])[0].to_json()
    health = {"status": readiness, "source": "folder specs", "problems": [problem]}
    html = page.render([], [], health, 0, now=300.0)
    header = html[html.index("<header>") : html.index("</header>")]
    assert "1 problem</a>" in header and (">ok<" not in header)
    assert ("degraded · " in header) is (readiness == "degraded")
    assert html.index('id="problems"') < html.index("<h3>Jobs</h3>")
    assert "&lt;b&gt;bad&lt;/b&gt;" in html and "<b>bad" not in html, "escaped"
    clean = page.render([], [], {**health, "status": "ok", "problems": []}, 0, now=300.0)
    assert 'id="problems"' not in clean and 'id="state">ok<' in clean


def test_the_loop_records_problems_and_retries_a_file_it_could_not_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(tmp_path / "world")
    blocker = tmp_path / "state-folder"
    blocker.write_text("a file where the state folder should be")
    source = FolderSource(world.specs, [])
    daemon = Daemon(
        source,
        world.controller,
        world.files,
        world.status_dir,
        DaemonOptions(),
        clock=world.clock,
        problems_path=blocker / "problems.json",
    )
    world.write("a", job_text("a", replicas="worker: {count: -1}"))
    daemon._sync()
    daemon._pass()
    (problem,) = daemon.shown.problems
    assert (problem.path, problem.kind, problem.jobs) == ("specs/a.yaml", ProblemKind.INVALID_SPEC, ("a",))
    assert "cannot write" in caplog.text and "problems.json" in caplog.text
    blocker.unlink()
    daemon._pass()  # nothing changed, but the file is written now
    assert stored.load(blocker / "problems.json")[0] == daemon.shown.problems
    daemon.on_file_event([str(world.write("a", job_text("a")))])
    daemon._pass()
    assert daemon.shown.problems == () and stored.load(blocker / "problems.json")[0] == ()
    assert re.search(r'^tfdeclare_source_problems\{kind="invalid-spec"\} 0\.0$', daemon.metrics_text(), re.M)
