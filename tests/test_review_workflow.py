"""Code review: the Markdown plan's links and totals, ``-`` for a spec on stdin, and the
pre-commit hook this repository defines (its definition parses and its entry works on files)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import cli, job_yaml
from tfdeclare.core.plan.markdown import file_link
from tfdeclare.core.spec.loader import SourceRef

ROOT = Path(__file__).resolve().parent.parent


def cli_stdin(*args: str, cwd: Path, data: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfdeclare", *args],
        cwd=cwd,
        input=data,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_file_links_are_relative_or_under_the_link_base() -> None:
    source = SourceRef("specs/my job.yaml", 12)
    assert file_link(source) == "[specs/my job.yaml:12](specs/my%20job.yaml#L12)"
    assert (
        file_link(source, "https://github.com/o/r/blob/abc123/")
        == "[specs/my job.yaml:12](https://github.com/o/r/blob/abc123/specs/my%20job.yaml#L12)"
    )
    for unlinkable in ("/abs/a.yaml", "../up/a.yaml", "<stdin>"):
        assert file_link(SourceRef(unlinkable, 3), "https://x") == f"`{unlinkable}:3`"
    assert file_link(source, "https://x", link=False) == "`specs/my job.yaml:12`"


def test_plan_markdown_links_files_under_link_base(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    result = cli(
        "plan", "specs", "-o", "markdown", "--link-base", "https://github.com/o/r/blob/c0ffee", cwd=workdir
    )
    assert result.returncode == 0, result.stderr
    assert "[specs/a.yaml:1](https://github.com/o/r/blob/c0ffee/specs/a.yaml#L1)" in result.stdout
    assert "| GPUs | 0 | 0 | no change |" in result.stdout
    assert "\x1b[" not in result.stdout + result.stderr


def test_a_dash_reads_one_spec_from_stdin(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    valid = cli_stdin("validate", "-", cwd=workdir, data=job_yaml("piped"))
    assert valid.returncode == 0, valid.stderr
    assert "1 job(s) in 1 file(s): valid" in valid.stdout

    both = cli_stdin("plan", "specs", "-", "-o", "json", cwd=workdir, data=job_yaml("piped"))
    assert both.returncode == 0, both.stderr
    assert '"name": "piped"' in both.stdout and '"name": "a"' in both.stdout
    assert '"file": "<stdin>"' in both.stdout

    bad = job_yaml("piped").replace("count: 1", "count: two")
    invalid = cli_stdin("validate", "-", cwd=workdir, data=bad)
    assert invalid.returncode == 1
    assert re.search(
        r"^<stdin>:\d+:\d+: error: .*\(at \$\.spec\.replicas\.worker\.count\)$", invalid.stderr, re.M
    )
    duplicate = cli_stdin("validate", "specs", "-", cwd=workdir, data=job_yaml("a"))
    assert duplicate.returncode == 1 and "<stdin>" in duplicate.stderr

    empty = cli_stdin("plan", "-", cwd=workdir, data="")
    assert empty.returncode == 0 and "<stdin>:1: warning: holds no job document" in empty.stderr


def test_the_pre_commit_hook_checks_the_changed_spec_files(workdir: Path) -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = hooks
    assert hook["id"] == "tfdeclare-validate" and hook["language"] == "python"
    assert hook["types"] == ["yaml"]
    files = re.compile(hook["files"])
    assert files.search("specs/a.yaml") and not files.search(".github/workflows/plan.yml")

    (workdir / "specs" / "good.yaml").write_text(job_yaml("good"))
    (workdir / "specs" / "bad.yaml").write_text(job_yaml("bad").replace("kind: TFJob", "kind: Job"))
    # pre-commit runs `entry` with the changed files that match appended, from the repository root
    entry = shlex.split(hook["entry"])
    assert entry[0] == "tfdeclare"
    tfdeclare = [sys.executable, "-m", "tfdeclare", *entry[1:]]
    env = {**os.environ}
    passed = subprocess.run(
        [*tfdeclare, "specs/good.yaml"], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert passed.returncode == 0, passed.stderr
    failed = subprocess.run(
        [*tfdeclare, "specs/good.yaml", "specs/bad.yaml"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1
    assert re.search(r"^specs/bad\.yaml:\d+:\d+: error: ", failed.stderr, re.M), failed.stderr


def test_a_created_jobs_spec_is_shown_with_secrets_hidden(workdir: Path) -> None:
    text = job_yaml("a").replace("spec:\n", "spec:\n  env: {API_TOKEN: hunter2, LR: '0.1'}\n", 1)
    (workdir / "specs" / "a.yaml").write_text(text)
    shown = cli("plan", "specs", "-o", "markdown", cwd=workdir)
    assert shown.returncode == 0, shown.stderr
    assert '+ spec.env: {"API_TOKEN": "(sensitive)", "LR": "0.1"}' in shown.stdout
    assert "hunter2" not in shown.stdout
