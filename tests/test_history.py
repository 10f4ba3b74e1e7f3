"""The history of revisions: the pure model and recorder (``core/plan/history.py``) as tables,
and the log (``shell/history.py``) on real files — a torn last line, the bounds, a crash of a
real process between a compaction's write and its rename."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfdeclare.core.diagnostics import Code, Diagnostic
from tfdeclare.core.plan.history import (
    MAX_DIAGNOSTICS,
    MAX_JOBS,
    PENDING_MAX_S,
    HistoryEntry,
    JobEntry,
    Outcome,
    PassFacts,
    RecorderState,
    SourceKind,
    flush,
    newest_first,
    observe,
    parse_log,
)
from tfdeclare.core.plan.planner import Action, JobPlan, Plan, PlanOptions, PlanReason
from tfdeclare.core.run.record import Revision
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.shell.history import HistoryLog, log_path, read

A = Revision("a" * 40, "Ada <ada@example.com>", 1.0e9, "add g")
B = Revision("b" * 40, "Ada <ada@example.com>", 1.0e9, "break g")
C = Revision("c" * 40, "Ada <ada@example.com>", 1.0e9, "fix g")


def job(name: str, action: Action, reason: PlanReason = PlanReason.NEW_JOB, message: str = "") -> JobPlan:
    return JobPlan(
        name, action, (reason,), message or f"{action.value} {name}", source=SourceRef(f"jobs/{name}.yaml", 1)
    )


def error(path: str, message: str = "expected a whole number") -> Diagnostic:
    return Diagnostic(path, 4, 7, message, "$.spec.replicas.worker.count", Code.SCHEMA)


def plan(*jobs: JobPlan, errors: tuple[Diagnostic, ...] = ()) -> Plan:
    return Plan(
        jobs=jobs,
        options=PlanOptions(),
        observed={},
        diagnostics=errors,
        sources={j.name: j.source for j in jobs if j.source is not None},
    )


CREATE_G = job("g", Action.CREATE)
KEEP_G = job("g", Action.NOOP, PlanReason.UNCHANGED)
INVALID_G = job("g", Action.KEEP, PlanReason.INVALID_SPEC, "its spec is invalid")
WAITING_G = job("g", Action.KEEP, PlanReason.NOT_SETTLED, "waits to settle")
RESTART_G = job("g", Action.RESTART, PlanReason.FIELDS_FORCE_RESTART, "spec.command changed")


@pytest.mark.parametrize(
    ("changes", "problems", "outcome", "text"),
    [
        (2, 0, Outcome.APPLIED, "applied 2 changes"),
        (0, 0, Outcome.NOTHING_TO_DO, "nothing to do"),
        (0, 1, Outcome.REFUSED, "refused: 1 problem"),
        (1, 3, Outcome.PARTLY_APPLIED, "partly applied: 1 change, 3 problems"),
    ],
)
def test_outcomes(changes: int, problems: int, outcome: Outcome, text: str) -> None:
    assert Outcome.of(changes, problems) is outcome
    entry = HistoryEntry(0.0, SourceKind.GIT, outcome, A, changes=changes, problems=problems)
    assert entry.outcome_text == text


def run(
    passes: list[tuple[float, Revision | None, Plan]], state: RecorderState | None = None
) -> tuple[RecorderState, list[HistoryEntry]]:
    state = state or RecorderState()
    made: list[HistoryEntry] = []
    for now, revision, current in passes:
        state, new = observe(state, PassFacts(now, current, revision, attempt={"g": 1}.get))
        made.extend(new)
    return state, made


def test_git_three_commits_good_invalid_fix() -> None:
    """One entry per new head, none for the resyncs between; the fix's restart waits to
    settle and is recorded once it is made."""
    state, made = run(
        [
            (1.0, A, plan(CREATE_G)),
            (2.0, A, plan(KEEP_G)),  # resyncs of the same head: nothing new
            (3.0, A, plan(KEEP_G)),
            (4.0, B, plan(INVALID_G, errors=(error("jobs/g.yaml"),))),
            (5.0, B, plan(INVALID_G, errors=(error("jobs/g.yaml"),))),
            (6.0, C, plan(WAITING_G)),  # the restart waits for the settle time
            (7.0, C, plan(WAITING_G)),
            (9.0, C, plan(RESTART_G)),
            (10.0, C, plan(KEEP_G)),
        ]
    )
    assert [(e.revision.subject if e.revision else None, e.outcome, e.at) for e in made] == [
        ("add g", Outcome.APPLIED, 1.0),
        ("break g", Outcome.REFUSED, 4.0),
        ("fix g", Outcome.APPLIED, 9.0),
    ]
    assert [e.started for e in made] == [1.0, 4.0, 6.0], "when its first pass acted on it"
    created, refused, fixed = made
    assert created.jobs == (JobEntry("g", Action.CREATE, "create g", attempt=1),)
    assert created.summary == "Plan: 1 to create, 0 to resize, 0 to restart, 0 to delete."
    assert refused.problems == 1 and refused.diagnostics == (
        "jobs/g.yaml:4:7: error: expected a whole number (at $.spec.replicas.worker.count)",
    )
    assert refused.jobs == (JobEntry("g", Action.KEEP, "its spec is invalid", reason="InvalidSpec"),)
    assert fixed.jobs[0].action is Action.RESTART and fixed.rollback == f"git revert {C.commit}"
    assert refused.rollback is None and state.pending is None and state.last_head == C.commit


def test_a_restart_of_the_daemon_records_nothing_already_recorded() -> None:
    _, first = run([(1.0, A, plan(CREATE_G))])
    state = RecorderState.after(first)
    _, again = run([(5.0, A, plan(KEEP_G)), (6.0, A, plan(KEEP_G))], state)
    assert again == []
    _, refused = run([(1.0, B, plan(INVALID_G, errors=(error("jobs/g.yaml"),)))])
    _, again = run([(5.0, B, plan(INVALID_G, errors=(error("jobs/g.yaml"),)))], RecorderState.after(refused))
    assert again == [], "the same problems of the same head are nothing new"


def test_a_new_head_that_changes_nothing_is_nothing_to_do_and_partial_outcomes() -> None:
    _, made = run(
        [
            (1.0, A, plan(CREATE_G)),
            (2.0, B, plan(KEEP_G)),
            (3.0, C, plan(KEEP_G, job("h", Action.CREATE), errors=(error("jobs/x.yaml"),))),
        ]
    )
    assert [e.outcome for e in made] == [Outcome.APPLIED, Outcome.NOTHING_TO_DO, Outcome.PARTLY_APPLIED]
    assert (
        made[1].jobs == () and made[1].summary == "Plan: 0 to create, 0 to resize, 0 to restart, 0 to delete."
    )


def test_a_head_superseded_while_it_waits_is_recorded_as_it_stood() -> None:
    _, made = run([(1.0, A, plan(WAITING_G)), (2.0, B, plan(CREATE_G))])
    assert [(e.revision.commit[0] if e.revision else "", e.outcome) for e in made] == [
        ("a", Outcome.NOTHING_TO_DO),
        ("b", Outcome.APPLIED),
    ]


def test_a_revision_that_never_settles_is_recorded_after_the_bound_and_on_stop() -> None:
    state, made = run([(1.0, A, plan(WAITING_G)), (1.0 + PENDING_MAX_S, A, plan(WAITING_G))])
    assert len(made) == 1 and made[0].outcome is Outcome.NOTHING_TO_DO
    state, made = run([(1.0, B, plan(CREATE_G, job("h", Action.KEEP, PlanReason.NOT_SETTLED)))], state)
    assert made == [] and state.pending is not None
    state, made = flush(state, 2.0)
    assert [e.jobs[0].name for e in made] == ["g"] and state.pending is None


def test_a_refused_signature_is_recorded_once() -> None:
    state, made = run([(1.0, A, plan(CREATE_G))])
    for now in (2.0, 3.0):
        state, new = observe(
            state, PassFacts(now, plan(KEEP_G), A, rejected=(B.commit, "no valid signature"))
        )
        made.extend(new)
    assert [(e.revision.commit if e.revision else None, e.outcome) for e in made] == [
        (A.commit, Outcome.APPLIED),
        (B.commit, Outcome.REFUSED),
    ]
    assert made[1].diagnostics == ("no valid signature",)


def test_folder_mode_records_changes_and_changed_problems_only() -> None:
    good = plan(CREATE_G)
    broken = plan(INVALID_G, errors=(error("jobs/g.yaml"),))
    _, made = run(
        [
            (0.5, None, plan()),  # an empty folder at the start: nothing happened
            (1.0, None, good),
            (2.0, None, plan(KEEP_G)),  # a resync: nothing new
            (3.0, None, broken),
            (4.0, None, broken),  # the same problem: nothing new
            (5.0, None, plan(KEEP_G)),  # fixed back to what is applied: the problem is gone
        ]
    )
    assert [(e.source, e.outcome, e.files) for e in made] == [
        (SourceKind.FOLDER, Outcome.APPLIED, ("jobs/g.yaml",)),
        (SourceKind.FOLDER, Outcome.REFUSED, ("jobs/g.yaml",)),
        (SourceKind.FOLDER, Outcome.NOTHING_TO_DO, ("jobs/g.yaml",)),
    ]
    assert made[0].what == "folder: jobs/g.yaml"


FULL = "cannot write /state/records.sqlite (No space left on device)"


def test_a_change_that_cannot_be_written_is_not_applied_and_recorded_once() -> None:
    """A full state disk: the restart is planned every pass and written by none of them, until
    the disk has room; one "not applied" entry, then the "applied" one."""
    state = RecorderState()
    made: list[HistoryEntry] = []
    for now, current, failed in [
        (1.0, plan(CREATE_G), {}),
        (2.0, plan(RESTART_G), {"g": FULL}),  # planned, not written
        (3.0, plan(RESTART_G), {"g": FULL}),  # the same again each pass: nothing new
        (4.0, plan(RESTART_G), {"g": FULL}),
        (5.0, plan(RESTART_G), {}),  # the disk has room again: written
        (6.0, plan(KEEP_G), {}),
    ]:
        state, new = observe(state, PassFacts(now, current, None, attempt={"g": 1}.get, not_applied=failed))
        made.extend(new)
    assert [(e.at, e.outcome, e.outcome_text) for e in made] == [
        (1.0, Outcome.APPLIED, "applied 1 change"),
        (2.0, Outcome.NOT_APPLIED, f"not applied: {FULL}"),
        (5.0, Outcome.APPLIED, "applied 1 change"),
    ]
    refused = made[1]
    assert refused.changes == 0 and refused.not_applied == (("g", FULL),)
    assert refused.jobs == (JobEntry("g", Action.RESTART, FULL, reason="StateWriteFailed"),)
    assert refused.summary == "Plan: 0 to create, 0 to resize, 0 to restart, 0 to delete. (1 kept as applied)"
    again = HistoryEntry.from_json(json.loads(refused.line()))
    assert again == refused and again.to_json()["notApplied"] == {"g": FULL}


def test_a_pass_that_writes_some_changes_and_not_others_is_partly_applied() -> None:
    restart_h = job("h", Action.RESTART, PlanReason.FIELDS_FORCE_RESTART, "spec.command changed")
    _, made = run([(1.0, None, plan(CREATE_G))])
    state = RecorderState.after(made)
    facts = PassFacts(2.0, plan(RESTART_G, restart_h), None, attempt={"g": 1}.get, not_applied={"h": FULL})
    _, (entry,) = observe(state, facts)
    assert entry.outcome is Outcome.PARTLY_APPLIED
    assert entry.outcome_text == f"partly applied: 1 change, 1 not applied: {FULL}"
    assert [j.name for j in entry.jobs if j.action.changes_something and j.reason is None] == ["g"]


def test_an_entry_is_bounded() -> None:
    jobs = [job(f"j{i:03}", Action.CREATE) for i in range(MAX_JOBS + 50)]
    errors = tuple(error(f"jobs/x{i}.yaml") for i in range(MAX_DIAGNOSTICS + 5))
    _, made = run([(1.0, A, plan(*jobs, errors=errors))])
    (entry,) = made
    assert (entry.changes, len(entry.jobs), entry.jobs_omitted) == (MAX_JOBS + 50, MAX_JOBS, 50)
    assert (entry.problems, len(entry.diagnostics)) == (MAX_DIAGNOSTICS + 5, MAX_DIAGNOSTICS)
    assert HistoryEntry.from_json(json.loads(entry.line())) == entry


def test_texts_from_a_commit_show_their_control_characters_escaped_and_lose_length() -> None:
    hostile = Revision("d" * 40, "Eve <eve@example.com>\x1b[2J", 1.0e9, "\x1b]0;owned\x07" + "x" * 1000)
    _, (made,) = run([(1.0, hostile, plan(CREATE_G))])
    assert made.revision is not None and "\x1b" not in made.revision.subject + made.revision.author
    assert made.revision.subject.startswith("\\x1b]0;owned\\x07") and len(made.revision.subject) == 300
    assert "\x1b" not in made.line().decode() and "\\u001b" not in made.line().decode()


def test_newest_first_by_job_and_limit() -> None:
    _, made = run(
        [(1.0, A, plan(CREATE_G)), (2.0, B, plan(job("h", Action.CREATE))), (3.0, C, plan(RESTART_G))]
    )
    assert [e.revision.commit[0] for e in newest_first(made) if e.revision] == ["c", "b", "a"]
    assert [e.revision.commit[0] for e in newest_first(made, "g") if e.revision] == ["c", "a"]
    assert [e.revision.commit[0] for e in newest_first(made, limit=1) if e.revision] == ["c"]
    same_time = [HistoryEntry(5.0, SourceKind.FOLDER, Outcome.APPLIED, files=(f"{i}",)) for i in range(3)]
    assert [e.files for e in newest_first(same_time)] == [("2",), ("1",), ("0",)], "written last, shown first"


# ---- the log on disk ----------------------------------------------------------------------


def entry(n: int) -> HistoryEntry:
    return HistoryEntry(
        float(n), SourceKind.GIT, Outcome.APPLIED, Revision(f"{n:040x}", subject=f"commit {n}"), changes=1
    )


def test_parse_log_ignores_a_torn_last_line_and_counts_damaged_ones() -> None:
    good = entry(1).line() + entry(2).line()
    assert parse_log(good).entries == (entry(1), entry(2)) and not parse_log(good).torn
    torn = parse_log(good + entry(3).line()[:20])
    assert torn.entries == (entry(1), entry(2)) and torn.torn and torn.skipped == 0
    damaged = parse_log(entry(1).line() + b"{not json\n" + b'{"version": 99}\n' + b"[1]\n" + entry(2).line())
    assert damaged.entries == (entry(1), entry(2)) and damaged.skipped == 3


def test_an_append_after_a_torn_line_stands_on_its_own(tmp_path: Path) -> None:
    log = HistoryLog(tmp_path)
    log.append(entry(1))
    with open(log_path(tmp_path), "ab") as handle:  # a crash in the middle of a write
        handle.write(entry(2).line()[:30])
    assert read(tmp_path).entries == (entry(1),)
    again = HistoryLog(tmp_path)
    again.append(entry(3))
    parsed = read(tmp_path)
    assert parsed.entries == (entry(1), entry(3)) and parsed.skipped == 1 and not parsed.torn
    assert os.stat(log_path(tmp_path)).st_mode & 0o777 == 0o600


def test_the_log_is_compacted_to_its_bounds(tmp_path: Path) -> None:
    log = HistoryLog(tmp_path, max_entries=10, max_bytes=1 << 20)
    for n in range(10):
        log.append(entry(n))
    assert len(read(tmp_path).entries) == 10
    log.append(entry(10))  # over the bound: the newest three quarters are kept
    assert [e.at for e in read(tmp_path).entries] == [float(n) for n in range(4, 11)]
    size = len(entry(0).line())
    small = tmp_path / "small"
    log = HistoryLog(small, max_entries=1000, max_bytes=size * 8)
    for n in range(9):
        log.append(entry(n))
    assert os.path.getsize(log_path(small)) <= size * 8
    assert [e.at for e in read(small).entries] == [float(n) for n in range(3, 9)]
    assert [p.name for p in small.iterdir()] == ["history.jsonl"], "no temporary file is left"


CRASH = """
import os, sys
from pathlib import Path
from tfdeclare.shell.history import HistoryLog
from tfdeclare.core.plan.history import HistoryEntry, Outcome, SourceKind
log = HistoryLog(Path(sys.argv[1]), max_entries=4)
os.replace = lambda *a, **k: os._exit(9)  # killed after the temporary file is written, before its rename
log.append(HistoryEntry(99.0, SourceKind.FOLDER, Outcome.APPLIED, files=("x.yaml",)))
"""


def test_a_crash_between_a_compaction_and_its_rename_leaves_the_log_whole(tmp_path: Path) -> None:
    log = HistoryLog(tmp_path, max_entries=4)
    for n in range(4):
        log.append(entry(n))
    done = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path)], capture_output=True, check=False)
    assert done.returncode == 9, done.stderr
    strays = [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(strays) == 1, "the compaction was written and not renamed"
    parsed = read(tmp_path)
    assert [e.at for e in parsed.entries] == [0.0, 1.0, 2.0, 3.0, 99.0], "the append itself is durable"
    again = HistoryLog(tmp_path, max_entries=4)  # the next writer removes the stray and goes on
    assert [p.name for p in tmp_path.iterdir()] == ["history.jsonl"]
    again.append(entry(5))
    assert [e.at for e in read(tmp_path).entries] == [3.0, 99.0, 5.0]


# ---- the daemon's part: a log it cannot write -----------------------------------------------


def test_entries_the_log_cannot_take_are_kept_shown_and_written_later(tmp_path: Path) -> None:
    from tfdeclare.daemon import page
    from tfdeclare.daemon.history import History

    log_path(tmp_path).mkdir(parents=True)  # in the way of the log: every write fails
    recorder = History(tmp_path)
    recorder.after_pass(plan(CREATE_G), A, None, lambda: {}, 1.0)
    recorder.after_pass(plan(RESTART_G), B, None, lambda: {}, 2.0)
    assert recorder.error is not None and "2 entries not written yet" in recorder.error
    assert [e.revision.subject for e in recorder.recent if e.revision] == ["break g", "add g"]
    html = page.render(
        [], [], {"status": "ok", "source": "git"}, 0, history=(recorder.recent, recorder.error)
    )
    assert "The history cannot be written: 2 entries not written yet" in html
    assert f"{B.commit[:12]} break g" in html and "applied 1 change" in html

    log_path(tmp_path).rmdir()
    recorder.after_pass(plan(KEEP_G), B, None, lambda: {}, 3.0)  # nothing new, but the rest is written now
    assert recorder.error is None
    assert [e.at for e in read(tmp_path).entries] == [1.0, 2.0]
    assert "cannot be written" not in page.render([], [], {}, 0, history=(recorder.recent, recorder.error))


def test_the_command_reads_leniently_and_names_what_it_cannot_read(tmp_path: Path) -> None:
    from tests.conftest import cli

    state = tmp_path / ".tfdeclare"
    HistoryLog(state).append(entry(1))
    with open(log_path(state), "ab") as handle:
        handle.write(b"{damaged\n" + entry(2).line()[:25])  # a damaged line, and a torn one
    shown = cli("history", "-o", "json", cwd=tmp_path)
    assert shown.returncode == 0 and [e["at"] for e in json.loads(shown.stdout)] == [1.0]
    assert shown.stderr == f"tfdeclare: warning: skipped 1 unreadable line(s) of {log_path(state)}\n"
    assert cli("history", "--limit", "0", cwd=tmp_path).stderr.endswith(
        "argument --limit: '0' is not a whole number of at least 1\n"
    )
    log_path(state).unlink()
    log_path(state).symlink_to(tmp_path / "elsewhere")  # not followed
    (tmp_path / "elsewhere").write_bytes(entry(3).line())
    refused = cli("history", cwd=tmp_path)  # a link in the state folder: the folder is not read
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith(
        f"tfdeclare: error: the state folder {state} is not read: {log_path(state)} is a link (not followed)"
    )
    log_path(state).unlink()
    os.mkfifo(log_path(state))  # the reader's own check: never waited on
    refused = cli("history", cwd=tmp_path, timeout=30)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert (
        refused.stderr == f"tfdeclare: error: cannot read the history {log_path(state)}: not a regular file\n"
    )
