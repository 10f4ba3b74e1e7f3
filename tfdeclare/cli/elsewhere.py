"""What ``plan`` and ``apply`` say about the state folder they use: which one and why when it
is not the default, and the jobs they would create here that already exist under another
state folder of this user (``shell.statedirs``): ``plan`` warns, ``apply`` refuses, and no flag
makes it start a second copy (one job never runs twice; the way on is to use that folder, or
to delete the job there first)."""

from __future__ import annotations

from tfdeclare.cli.common import Settings, UserError, state_dir_note, stderr_line
from tfdeclare.core.plan.planner import Action, Plan
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.shell import statedirs


def _creates(result: Plan) -> dict[str, str]:
    """The jobs the plan creates, with their spec hashes (the planner's, when it has one)."""
    return {
        job.name: job.spec_hash or fingerprint(result.desired[job.name])
        for job in result.jobs
        if job.action is Action.CREATE and job.name in result.desired
    }


def check(settings: Settings, result: Plan, *, applying: bool) -> None:
    """Say which state folder is used (when not the default); warn about (``plan``) or
    refuse (``apply``: ``UserError``, nothing applied) the creates of jobs that exist under
    another state folder."""
    note = state_dir_note(settings)
    if note:
        stderr_line(f"tfdeclare: note: {note}")
    found, problems = statedirs.elsewhere(_creates(result), settings.state_dir)
    for problem in problems:
        stderr_line(f"tfdeclare: warning: cannot look for these jobs under other state folders: {problem}")
    live = [e for e in found if e.live]
    for each in found:
        if each.live:
            what = "refused" if applying else "would be refused by apply"
            stderr_line(
                f"tfdeclare: {'error' if applying else 'warning'}: job {each.name} would be created under "
                f"state folder {settings.state_dir}, but it exists under {each.describe()}: a second copy; "
                f"{what}. Use `--state-dir {each.state_dir}` to manage it there, or "
                f"`tfdeclare delete {each.name} --state-dir {each.state_dir}` first"
            )
        else:
            stderr_line(
                f"tfdeclare: warning: job {each.name} already finished with this very spec under "
                f"{each.describe()}; creating it under {settings.state_dir} runs it again"
            )
    if applying and live:
        names = ", ".join(statedirs.names_of(live))
        raise UserError(f"nothing applied: {names} already exist under another state folder (see above)")
