"""Plans as text (Terraform-like) and JSON (the same plan as data); Markdown for pull requests is
``markdown``.

Environment values whose names or values look like secrets are never shown (``(sensitive)``,
``tfdeclare.core.spec.secrets``); references to secrets are shown as they are (they hold none).

The text and Markdown plans quote the specs (values, keys, file names, messages): what they
quote is written ``visible`` (no control character, line break or bidirectional override from a
spec reaches the terminal or the comment); the JSON plan keeps every value exact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from tfdeclare.core import jsontext
from tfdeclare.core.plan.planner import (
    ABSENT,
    Action,
    FieldChange,
    JobPlan,
    Plan,
    PlanReason,
    RestartCost,
)
from tfdeclare.core.plan.preempting import Preempted
from tfdeclare.core.run.record import rfc3339
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.secrets import shown_env_value
from tfdeclare.core.tone import Painter, Tone, plain
from tfdeclare.core.visible import visible

_VERB = {
    Action.CREATE: "will be created",
    Action.UPDATE: "will be updated in place",
    Action.RESIZE: "will be resized",
    Action.RESTART: "will be restarted",
    Action.DELETE: "will be deleted",
    Action.NOOP: "is unchanged",
    Action.ORPHAN: "is orphaned",
    Action.KEEP: "is kept as applied",
    Action.MOVE: "will move to another backend",
}
_ACTION_TONES = {
    Action.CREATE: Tone.ADDED,
    Action.UPDATE: Tone.CHANGED,
    Action.RESIZE: Tone.CHANGED,
    Action.RESTART: Tone.REPLACED,
    Action.MOVE: Tone.REPLACED,
    Action.DELETE: Tone.REMOVED,
    Action.NOOP: Tone.MUTED,
    Action.ORPHAN: Tone.WARN,
    Action.KEEP: Tone.WARN,
}
_LISTED = (Action.CREATE, Action.UPDATE, Action.RESIZE, Action.RESTART, Action.MOVE, Action.DELETE)


def _redacted(value: Any, in_env: bool) -> Any:
    """``value`` with the values of every ``env`` in it as they may be shown; copied only
    where an ``env`` is (a plan of 10,000 new jobs shows 120,000 values)."""
    if not isinstance(value, dict):
        return value
    if in_env:
        return {k: shown_env_value(k, v) for k, v in value.items()}
    copied: dict[str, Any] | None = None
    for key, inner in value.items():
        if isinstance(inner, dict):
            shown = _redacted(inner, key == "env")
            if shown is not inner:
                copied = copied if copied is not None else dict(value)
                copied[key] = shown
    return value if copied is None else copied


def shown_value(change: FieldChange, value: Any) -> Any:
    """The value as it may be shown: secret-looking environment values replaced."""
    if value is ABSENT:
        return ABSENT
    path = change.path
    if len(path) >= 2 and path[-2] == "env" and isinstance(path[-1], str):
        return shown_env_value(path[-1], value)
    return _redacted(value, path[-1] == "env")


_ENCODE = jsontext.encoder()  # a plan of 10,000 new jobs shows 120,000 values


def _value_text(value: Any, limit: int = 80) -> str:
    if value is ABSENT:
        return "(absent)"
    text = visible(_ENCODE(value))  # JSON escapes C0 controls, not DEL, C1 or U+2028
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summary_line(plan: Plan) -> str:
    line = (
        f"Plan: {plan.count(Action.CREATE)} to create, {plan.count(Action.RESIZE)} to resize, "
        f"{plan.count(Action.RESTART)} to restart, {plan.count(Action.DELETE)} to delete."
    )
    extra = []
    if plan.count(Action.MOVE):
        extra.append(f"{plan.count(Action.MOVE)} to move to another backend")
    if plan.count(Action.UPDATE):
        extra.append(f"{plan.count(Action.UPDATE)} to update in place")
    outside = len(_outside(plan))
    deleting = sum(1 for j in plan.jobs if PlanReason.BEING_DELETED in j.reasons)
    preempted = sum(1 for j in plan.jobs if j.preempted_by is not None)
    unchanged = plan.count(Action.NOOP) - outside - deleting
    unchanged -= sum(1 for j in plan.jobs if j.preempted_by is not None and j.action is Action.NOOP)
    if unchanged:
        extra.append(f"{unchanged} unchanged")
    if preempted:
        extra.append(f"{preempted} preempted")
    if deleting:
        extra.append(f"{deleting} being deleted")
    if outside:
        extra.append(f"{outside} outside the paths given")
    if plan.count(Action.ORPHAN):
        extra.append(f"{plan.count(Action.ORPHAN)} orphaned")
    if plan.count(Action.KEEP):
        extra.append(f"{plan.count(Action.KEEP)} kept as applied")
    return line + (f" ({', '.join(extra)})" if extra else "")


def _outside(plan: Plan) -> list[JobPlan]:
    """The jobs last applied from files outside the paths the plan read (never pruned by it)."""
    return [j for j in plan.jobs if PlanReason.OUTSIDE_SCOPE in j.reasons]


OUTSIDE_SHOWN = 20  # a plan of one file in a state folder of many jobs names this many of the others


def task_list(keys: tuple[TaskKey, ...]) -> str:
    """``worker-0, worker-1, worker-2`` -> ``worker-0..2``."""
    parts: list[str] = []
    run: list[TaskKey] = []
    for key in [*keys, None]:
        if run and (key is None or key.role is not run[-1].role or key.index != run[-1].index + 1):
            parts.append(run[0].name if len(run) == 1 else f"{run[0].name}..{run[-1].index}")
            run = []
        if key is not None:
            run.append(key)
    return ", ".join(parts)


def value_pair(old: Any, new: Any, limit: int = 80) -> tuple[str, str]:
    """Two long strings that share a beginning are shown from just before they differ."""
    if isinstance(old, str) and isinstance(new, str):
        common = 0
        while common < min(len(old), len(new)) and old[common] == new[common]:
            common += 1
        if common > 30:
            cut = common - 15
            return _value_text("…" + old[cut:], limit), _value_text("…" + new[cut:], limit)
    return _value_text(old, limit), _value_text(new, limit)


_UNSET: tuple[object, ...] = (None, {}, [])  # values a spec's line is not shown for


def spec_lines(canonical: Mapping[str, Any], sign: str, indent: str = "") -> list[str]:
    """A whole spec, defaults filled in (what will run), as ``sign path: value`` lines: one per
    field that is set (one per role for ``replicas``), secret-looking values hidden, each after
    ``indent``. The text plan shows a created job's this way, the Markdown plan a created or
    deleted job's."""
    lines = []
    labels = canonical["metadata"].get("labels")
    if labels not in _UNSET:
        lines.append(f"{indent}{sign} metadata.labels: {_spec_value_text(labels, False)}")
    for key, value in canonical["spec"].items():
        if key == "replicas":
            for role, replica in value.items():
                if replica not in _UNSET:
                    lines.append(f"{indent}{sign} spec.replicas.{role}: {_spec_value_text(replica, False)}")
        elif value not in _UNSET:
            lines.append(f"{indent}{sign} spec.{key}: {_spec_value_text(value, key == 'env')}")
    return lines


def _spec_value_text(value: Any, in_env: bool) -> str:
    """``_value_text(_redacted(value, in_env), 100)``, without walking a mapping that holds no
    ``env``: its JSON text says so (a key ``env`` is written ``"env": ``, which a string's
    own quotes, escaped, can never spell)."""
    if not isinstance(value, dict):
        return _value_text(value, 100)
    if in_env:
        return _value_text(_redacted(value, True), 100)
    text = visible(_ENCODE(value))
    if '"env": ' in text:
        return _value_text(_redacted(value, False), 100)
    return text if len(text) <= 100 else text[:97] + "..."


def _change_line(change: FieldChange, paint: Painter) -> str:
    old, new = shown_value(change, change.old), shown_value(change, change.new)
    dotted = visible(change.dotted)  # a label's or an env variable's key is anyone's to write
    if old is ABSENT:
        body = paint(f"+ {dotted} = {_value_text(new)}", Tone.ADDED)
    elif new is ABSENT:
        body = paint(f"- {dotted} (was {_value_text(old)})", Tone.REMOVED)
    else:
        before, after = value_pair(old, new)
        body = paint(f"~ {dotted}: {before} → {after}", Tone.CHANGED)
    note = {"restart": "forces restart", "resize": "resizes", "in-place": "in place"}[change.effect.value]
    return body + paint(f"   # {note}", Tone.MUTED)


_Worded = dict[int, tuple[object, Any]]
"""Jobs of one shape share their task keys and restart scopes (``task_keys_of``,
``created_scopes``): a text plan words each such tuple once, looked up by identity (the
entry keeps the tuple, so its id stays its own)."""


def _shared_task_list(keys: tuple[TaskKey, ...], worded: _Worded) -> str:
    found = worded.get(id(keys))
    if found is None or found[0] is not keys:
        found = worded[id(keys)] = (keys, task_list(keys))
    return str(found[1])


def _shared_scope_lines(job: JobPlan, worded: _Worded) -> list[str]:
    scopes = job.scopes
    found = worded.get(id(scopes))
    if found is None or found[0] is not scopes:
        found = worded[id(scopes)] = (scopes, [f"      on failure: {line}" for line in scope_lines(job)])
    lines: list[str] = found[1]
    return lines


def _job_text(
    job: JobPlan,
    paint: Painter,
    created: Mapping[str, Any] | None = None,
    now: float = 0.0,
    worded: _Worded | None = None,
) -> list[str]:
    """A job's block; ``created``: a created job's canonical spec, shown whole (what apply
    will run, defaults filled in), as Terraform shows a ``+ resource``; ``worded``: what a
    plan's earlier blocks worded (``_Worded``)."""
    worded = {} if worded is None else worded
    where = f"  ({visible(str(job.source))})" if job.source else ""
    verb = _VERB[job.action] + (", but preempted" if job.preempted_by is not None else "")
    tone = Tone.REPLACED if job.preempted_by is not None else _ACTION_TONES[job.action]
    headline = paint(f"{job.action.symbol} {job.name} {verb}", tone)
    lines = [f"  {headline}{where}", f"      why: {visible(job.message)}"]
    if created is not None and paint is plain:
        lines.extend(spec_lines(created, "+", "      "))
    elif created is not None:
        lines.extend(f"      {paint(line, Tone.ADDED)}" for line in spec_lines(created, "+"))
    lines.extend(f"      {_change_line(c, paint)}" for c in job.changes)
    if job.restart:
        lines.append(f"      restarts: {task_list(job.restart)}")
    if job.cost is not None:
        lines.append(f"      costs: {job.cost.words(now)}")
    if job.start:
        lines.append(f"      starts: {_shared_task_list(job.start, worded)}")
    if job.stop:
        lines.append(f"      stops: {task_list(job.stop)}")
    if job.scopes:
        lines.extend(_shared_scope_lines(job, worded))
    lines.extend(f"      {line}" for line in preemption_lines(job))
    return lines


def preemption_lines(job: JobPlan) -> list[str]:
    """Whom applying the plan preempts for ``job``, or for whom it is preempted: why, and which
    of its tasks stop after what grace (``PlanOptions.room``)."""
    lines = [
        f"preempts: {visible(p.job)} ({p.why}): stops {task_list(p.tasks)} after a {p.grace_s:g} s grace"
        for p in job.preempts
    ]
    p = job.preempted_by
    if p is not None:
        lines.append(
            f"preempted: by {visible(p.by)} ({p.why}): stops {task_list(p.tasks)} after a {p.grace_s:g} s "
            "grace; it runs again when there is room"
        )
    return lines


def scope_lines(job: JobPlan) -> list[str]:
    """``worker restarts alone (restartScope Task: why)``, one line per scope and reason."""
    groups: dict[tuple[str, str], list[str]] = {}
    for each in job.scopes:
        groups.setdefault((each.scope.value, each.message), []).append(each.role.value)
    lines = []
    for (scope, why), roles in groups.items():
        what = "alone" if scope == "Task" else "the whole job"
        verb = "restarts" if len(roles) == 1 else "restart"
        lines.append(f"{', '.join(roles)} {verb} {what} (restartScope {scope}: {visible(why)})")
    return lines


def no_plan_line(errors: int) -> str:
    return f"No plan: the files have {errors} error(s). Running jobs are not affected."


def render_text(plan: Plan, *, show_unchanged: bool = False, paint: Painter = plain) -> str:
    return "".join(render_text_parts(plan, show_unchanged=show_unchanged, paint=paint))


_JOBS_A_PART = 500  # the text plan of 10,000 new jobs is 16 MB: written in parts, never whole


def render_text_parts(plan: Plan, *, show_unchanged: bool = False, paint: Painter = plain) -> Iterator[str]:
    """``render_text`` in parts (their concatenation is that text), to write as they come."""
    lines: list[str] = []
    scope = plan.options.scope
    if plan.options.prune and scope is not None:
        lines.append(f"Prune scope: only jobs last applied from {visible(scope.describe())} may be deleted.")
        lines.append("")
    outside = _outside(plan)
    listed = [
        j
        for j in plan.jobs
        if j.action in _LISTED
        or j.preempted_by is not None
        or (show_unchanged and j.action is Action.NOOP and j not in outside)
    ]
    errors = sum(1 for d in plan.diagnostics if d.is_error)
    if errors:  # as Terraform: no plan from files with errors (it would be a plan of some of them)
        lines.append(paint(no_plan_line(errors), Tone.BAD))
        lines.append("")
    elif listed:
        lines.append("tfdeclare will perform these actions:")
        lines.append("")
        worded: _Worded = {}
        for number, job in enumerate(listed, 1):
            created = plan.desired.get(job.name) if job.action is Action.CREATE else None
            lines.extend(_job_text(job, paint, created, plan.now, worded))
            lines.append("")
            if number % _JOBS_A_PART == 0:  # (the summary line comes last: no part ends the text)
                yield "\n".join(lines) + "\n"
                lines = []
    else:
        lines.append(paint("No changes: the running jobs match the files.", Tone.GOOD))
        lines.append("")
    kept = [j for j in plan.jobs if j.action is Action.KEEP or PlanReason.READ_DIFFERENTLY in j.reasons]
    if kept:
        lines.append("Kept as applied, not acted on now:")
        lines.extend(f"  {paint('! ' + j.name, Tone.WARN)}: {visible(j.message)}" for j in kept)
        lines.append("")
    orphans = [j for j in plan.jobs if j.action is Action.ORPHAN]
    if orphans:
        lines.append("Not in the files (orphaned; nothing is done to them):")
        lines.extend(
            f"  {paint('? ' + j.name, Tone.WARN)} ({_phase_word(j)}): {visible(j.message)}" for j in orphans
        )
        lines.append("")
    if outside and (plan.options.prune or show_unchanged):
        lines.append("Outside the paths given (not pruned; nothing is done to them):")
        lines.extend(
            f"  {paint('= ' + j.name, Tone.MUTED)} ({_phase_word(j)}): {visible(j.message)}"
            for j in outside[:OUTSIDE_SHOWN]
        )
        if len(outside) > OUTSIDE_SHOWN:
            lines.append(f"  ... and {len(outside) - OUTSIDE_SHOWN} more (-o json lists them all)")
        lines.append("")
    if not errors:
        lines.append(paint(summary_line(plan), Tone.STRONG))
    yield "\n".join(lines).rstrip("\n") + "\n"


def _phase_word(job: JobPlan) -> str:
    return job.phase.value if job.phase else "unknown"


def _change_json(change: FieldChange) -> dict[str, Any]:
    old, new = shown_value(change, change.old), shown_value(change, change.new)
    return {
        "path": change.dotted,
        "old": None if old is ABSENT else old,
        "new": None if new is ABSENT else new,
        "oldPresent": old is not ABSENT,
        "newPresent": new is not ABSENT,
        "effect": change.effect.value,
    }


def plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "formatVersion": 1,
        "summary": {action.value: plan.count(action) for action in Action},
        "hasChanges": plan.has_changes,
        "options": {
            "prune": plan.options.prune,
            "allowEmpty": plan.options.allow_empty,
            # present only when the plan was given paths (so plans of golden cases read as before)
            **(
                {"pruneScope": {"paths": list(scope.shown or scope.roots), "stdin": scope.stdin}}
                if (scope := plan.options.scope) is not None
                else {}
            ),
        },
        "jobs": [
            {
                "name": job.name,
                "action": job.action.value,
                "symbol": job.action.symbol,
                "reasons": [r.value for r in job.reasons],
                "message": job.message,
                "source": {"file": job.source.file, "line": job.source.line} if job.source else None,
                "phase": job.phase.value if job.phase else None,
                "specHash": job.spec_hash,
                "previousSpecHash": job.previous_hash,
                "changes": [_change_json(c) for c in job.changes],
                "tasks": {
                    "restart": [k.name for k in job.restart],
                    "start": [k.name for k in job.start],
                    "stop": [k.name for k in job.stop],
                },
                "diagnostics": [d.to_json() for d in job.diagnostics],
                "moves": {"from": job.moves[0], "to": job.moves[1]} if job.moves else None,
                # present only when the plan shows them (so plans without them read as before)
                **(
                    {
                        "restartScopes": {
                            s.role.value: {
                                "scope": s.scope.value,
                                "reason": s.reason.value,
                                "message": s.message,
                            }
                            for s in job.scopes
                        }
                    }
                    if job.scopes
                    else {}
                ),
                # present only for a running job that declares spec.checkpoint (issue 34)
                **({"cost": _cost_json(job.cost, plan.now)} if job.cost is not None else {}),
                # present only where applying the plan preempts (so other plans read as before)
                **({"preempts": [_preempted_json(p, p.job) for p in job.preempts]} if job.preempts else {}),
                **(
                    {"preemptedBy": _preempted_json(job.preempted_by, job.preempted_by.by)}
                    if job.preempted_by is not None
                    else {}
                ),
            }
            for job in plan.jobs
        ],
        "diagnostics": [d.to_json() for d in plan.diagnostics],
    }


def _preempted_json(preempted: Preempted, job: str) -> dict[str, Any]:
    """A preemption as the other job's line says it: that job, the priorities, the victim's
    tasks that stop and their grace."""
    return {
        "job": job,
        "priority": preempted.by_priority,
        "preemptedPriority": preempted.priority,
        "tasks": [k.name for k in preempted.tasks],
        "gracePeriodSeconds": preempted.grace_s,
        "message": preempted.why,
    }


def _cost_json(cost: RestartCost, now: float) -> dict[str, Any]:
    lost = cost.lost_s(now)
    return {
        "checkpointStep": cost.checkpoint_step,
        "since": rfc3339(cost.since),
        "workLostSeconds": None if lost is None else round(float(lost), 1),
        "message": cost.words(now),
    }


def render_json(plan: Plan) -> str:
    return json.dumps(plan_json(plan), indent=2, ensure_ascii=False) + "\n"
