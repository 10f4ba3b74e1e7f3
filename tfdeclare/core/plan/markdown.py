"""The plan as Markdown for a pull-request comment (``plan -o markdown``).

What a reviewer reads, top to bottom: the summary line; one table row per job that changes,
with a link to the line of its file; the resources every job asks for before and after the
plan (GPUs, CPUs, memory); then per job a ``diff`` block whose ``-``/``+`` lines GitHub
colours (an old value is a ``-`` line, the new one a ``+`` line with what it forces; a created
or deleted job's whole spec, folded).

File links are relative to where ``plan`` ran (run it at the repository root), or absolute
with ``link_base`` (``https://github.com/OWNER/REPO/blob/COMMIT``: the files as of that
commit). A path that cannot be linked (absolute, above the folder, ``<stdin>``) is shown as
code. The resource totals count every job's tasks, running or finished (what the specs ask
for, as a reviewer compares files), and never a job the plan keeps from acting on.

Text from the specs (messages quoting values, file names, label keys) is never Markdown or
HTML here: in a table cell or a link's text its characters that Markdown reads (backslash,
backtick, brackets, angle brackets, ``|``) are backslash-escaped; in a code span or a fenced
block it is shown as written, the span's or fence's backticks outnumbering any run in it; and
everywhere its control characters are written out (``visible``), so no value starts a line.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from tfdeclare.core.plan.planner import ABSENT, Action, FieldChange, JobPlan, Plan
from tfdeclare.core.plan.render import (
    no_plan_line,
    preemption_lines,
    scope_lines,
    shown_value,
    spec_lines,
    summary_line,
    task_list,
    value_pair,
)
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.core.spec.model import JobSpec
from tfdeclare.core.spec.resources import Resources
from tfdeclare.core.visible import visible

_GONE = (Action.DELETE, Action.ORPHAN)  # their files no longer define them: no link
_NOTE = {"restart": "forces restart", "resize": "resizes", "in-place": "in place"}


_MARKDOWN = re.compile(r"[\\`\[\]<>|]")  # what starts code, a link, an image, HTML; a cell's end
_BACKTICKS = re.compile("`+")


def _md(text: str) -> str:
    """``text`` as Markdown shows it literally: in a table cell, a link's text, a summary."""
    return _MARKDOWN.sub(r"\\\g<0>", visible(text))


def _longest_backticks(lines: Iterable[str]) -> int:
    return max((len(run) for line in lines for run in _BACKTICKS.findall(line)), default=0)


def _code(text: str) -> str:
    """``text`` as a code span in a table cell: delimited by more backticks than any run in it
    (padded where it starts or ends with one), ``|`` escaped as a table's cell needs."""
    text = visible(text).replace("|", "\\|")
    ticks = "`" * (_longest_backticks([text]) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fenced(lines: list[str], info: str = "") -> list[str]:
    """``lines`` as a fenced code block whose fence no line can close: each line ``visible``
    (one line stays one), the fence one backtick longer than any run of them in the lines."""
    shown = [visible(line) for line in lines]
    fence = "`" * max(3, _longest_backticks(shown) + 1)
    return [fence + info, *shown, fence]


def _linkable(path: str) -> bool:
    return not (path.startswith(("/", "<", "\\")) or path == ".." or path.startswith("../"))


def file_link(source: SourceRef, link_base: str | None = None, *, link: bool = True) -> str:
    """``[specs/a.yaml:3](specs/a.yaml#L3)``, absolute under ``link_base`` when given."""
    text = f"{source.file}:{source.line}"
    if not link or not _linkable(source.file):
        return _code(text)
    target = quote(source.file.removeprefix("./")) + f"#L{source.line}"
    if link_base:
        target = link_base.rstrip("/") + "/" + target
    return f"[{_md(text)}]({target})"


def diff_lines(change: FieldChange) -> list[str]:
    """One field's change as unified-diff lines: ``- path: old`` then ``+ path: new  # effect``."""
    old, new = shown_value(change, change.old), shown_value(change, change.new)
    note = f"   # {_NOTE[change.effect.value]}"
    before, after = value_pair(old, new)
    lines = []
    if old is not ABSENT:
        lines.append(f"- {change.dotted}: {before}" + ("" if new is not ABSENT else note))
    if new is not ABSENT:
        lines.append(f"+ {change.dotted}: {after}{note}")
    return lines


def _total(specs: Iterable[Mapping[str, Any]]) -> Resources:
    total = Resources(0.0, 0, 0)
    for canonical in specs:
        total = total + JobSpec.from_canonical(canonical).total_resources
    return total


def resource_totals(plan: Plan) -> tuple[Resources, Resources]:
    """What every applied job asks for now, and what every job will ask for after the plan."""
    before = {name: job.canonical for name, job in plan.observed.items()}
    after = dict(before)
    after.update(plan.desired)
    for job in plan.jobs:
        if job.action is Action.DELETE:
            after.pop(job.name, None)
    return _total(before.values()), _total(after.values())


def _mem(mib: int) -> str:
    if mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib / 1024:.1f} GiB" if abs(mib) >= 1024 else f"{mib} MiB"


def _number(value: float) -> str:
    return f"{value:g}" if float(value).is_integer() else f"{value:.3g}"


def _delta(before: float, after: float, show: Any) -> str:
    change = after - before
    if abs(change) < 1e-9:
        return "no change"
    return ("+" if change > 0 else "-") + str(show(abs(change)))


def _totals_table(plan: Plan) -> list[str]:
    before, after = resource_totals(plan)
    rows = [
        ("GPUs", before.gpus, after.gpus, _number),
        ("CPUs", before.cpus, after.cpus, _number),
        ("memory", before.mem_mib, after.mem_mib, lambda v: _mem(int(v))),
    ]
    out = ["| requested by all jobs | before | after | change |", "|---|--:|--:|--:|"]
    for label, old, new, show in rows:
        out.append(f"| {label} | {show(old)} | {show(new)} | {_delta(old, new, show)} |")
    return [*out, ""]


def _job_row(job: JobPlan, link_base: str | None, now: float = 0.0) -> str:
    tasks = "; ".join(
        f"{label} {task_list(keys)}"
        for label, keys in (("restart", job.restart), ("start", job.start), ("stop", job.stop))
        if keys
    )
    cells = [
        f"`{job.action.symbol}`",
        _code(job.name),
        job.action.value,
        _md(
            job.message
            + "".join(f"; on failure: {line}" for line in scope_lines(job))
            + (f"; costs: {job.cost.words(now)}" if job.cost is not None else "")
            + "".join(f"; {line}" for line in preemption_lines(job))
        ),
        _md(tasks),
        "" if job.source is None else file_link(job.source, link_base, link=job.action not in _GONE),
    ]
    return "| " + " | ".join(cells) + " |"


def render_markdown(plan: Plan, *, link_base: str | None = None) -> str:
    errors = sum(1 for d in plan.diagnostics if d.is_error)
    headline = no_plan_line(errors) if errors else summary_line(plan)
    out = ["### tfdeclare plan", "", f"**{headline}**", ""]
    if plan.diagnostics:
        kinds = Counter(d.severity.value for d in plan.diagnostics)  # warnings: what apply would do
        counted = ", ".join(f"{kinds[k]} {k}(s)" for k in ("error", "warning", "note") if kinds[k])
        out.append(f"<details open><summary>{counted} in the specs</summary>")
        out.append("")
        out.extend(fenced([d.format() for d in plan.diagnostics]))
        out.append("</details>")
        out.append("")
    rows = [j for j in plan.jobs if j.action is not Action.NOOP or j.preempted_by is not None]
    if errors:  # no plan, but what is kept as applied is shown, as in the text plan
        rows = [j for j in rows if j.action is Action.KEEP]
    if rows:
        out.append("| | job | action | why | tasks | file |")
        out.append("|---|---|---|---|---|---|")
        out.extend(_job_row(job, link_base, plan.now) for job in rows)
        out.append("")
    elif not errors:
        out.append("No changes.")
        out.append("")
    if not errors and plan.has_changes:
        out.extend(_totals_table(plan))
    for job in rows if not errors else ():
        lines, what = _job_diff(plan, job)
        if not lines:
            continue
        opened = " open" if job.changes else ""  # a whole spec is there on request
        out.append(
            f"<details{opened}><summary><code>{html.escape(job.name)}</code> "
            f"{job.action.symbol} {job.action.value}: {what}</summary>"
        )
        out.append("")
        out.extend(fenced(lines, "diff"))
        out.append("</details>")
        out.append("")
    return "\n".join(out)


def _job_diff(plan: Plan, job: JobPlan) -> tuple[list[str], str]:
    """A job's ``diff`` lines and what they show: its changed fields; for a created job its
    whole spec as ``+`` lines (defaults filled in: what will run), for a deleted one as ``-``."""
    if job.changes:
        return [line for change in job.changes for line in diff_lines(change)], (
            f"{len(job.changes)} field(s) changed"
        )
    if job.action is Action.CREATE and job.name in plan.desired:
        return spec_lines(plan.desired[job.name], "+"), "the new job's spec"
    if job.action is Action.DELETE and job.name in plan.observed:
        return spec_lines(plan.observed[job.name].canonical, "-"), "the deleted job's spec"
    return [], ""
