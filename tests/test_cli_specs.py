"""``validate``, ``plan`` and ``schema`` as a user runs them: exit codes, outputs, saved plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli, job_yaml


def test_validate_ok_and_error_exit_codes(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    ok = cli("validate", "specs", cwd=workdir)
    assert ok.returncode == 0, ok.stderr
    assert "1 job(s) in 1 file(s): valid" in ok.stdout
    (workdir / "specs" / "b.yaml").write_text(job_yaml("b").replace("count: 1", "count: many"))
    bad = cli("validate", "specs", cwd=workdir)
    assert bad.returncode == 1
    assert (
        'specs/b.yaml:8:21: error: expected a whole number, got "many" (at $.spec.replicas.worker.count)'
        in bad.stderr
    )
    assert "Traceback" not in bad.stderr + bad.stdout


def test_validate_json_output(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a") + "  extra: 1\n")
    result = cli("validate", "specs", "-o", "json", cwd=workdir)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    assert data["diagnostics"][0] == {
        "path": "specs/a.yaml",
        "line": 9,
        "column": 3,
        "severity": "error",
        "code": "schema",
        "message": "unknown field 'extra'; allowed: activeDeadlineSeconds, args, backoffLimit, checkpoint, clusterSpec, "
        "command, env, evaluatorGraceSeconds, healthCheck, image, imagePullPolicy, placement, platformRestartLimit, priority, priorityClassName, replicas, restartPolicy, "
        "restartScope, successPolicy, suspend, tensorboard, terminationGracePeriodSeconds, ttlSecondsAfterFinished, "
        "volumes, workingDir",
        "jsonPath": "$.spec.extra",
    }


def test_validate_missing_path_and_hidden_files(workdir: Path) -> None:
    (workdir / "specs" / ".hidden.yaml").write_text("not: [valid")
    (workdir / "specs" / "notes.txt").write_text("ignored")
    (workdir / "specs" / "a.yml").write_text(job_yaml("a"))
    assert cli("validate", "specs", cwd=workdir).returncode == 0
    missing = cli("validate", "nope", cwd=workdir)
    assert missing.returncode == 1
    assert "nope:1: error: no such file or folder" in missing.stderr
    # a dangling link reads the same whether named or found in its folder (a whole-file problem)
    (workdir / "gone").mkdir()
    os.symlink("nowhere", workdir / "gone" / "dangling.yaml")
    named = cli("validate", "gone/dangling.yaml", cwd=workdir)
    walked = cli("validate", "gone", cwd=workdir)
    assert named.returncode == walked.returncode == 1
    expected = "gone/dangling.yaml:1: error: cannot read: No such file or directory"
    assert expected in named.stderr and expected in walked.stderr, (named.stderr, walked.stderr)


def test_status_and_state_dirs_are_not_read_as_specs(workdir: Path) -> None:
    (workdir / "status").mkdir()
    (workdir / "status" / "a.yaml").write_text("kind: TFJobStatus\n")
    (workdir / "a.yaml").write_text(job_yaml("a"))
    result = cli("validate", ".", cwd=workdir)
    assert result.returncode == 0, result.stderr


def test_the_config_file_beside_the_specs_is_not_read_as_one(workdir: Path) -> None:
    """``plan .`` from a project's root, where ``tfdeclare.yaml`` lies beside the specs: the
    config in effect is passed over by the walk (also when named by --config or the
    environment), and read as a spec only when named as one."""
    (workdir / "tfdeclare.yaml").write_text("statusDir: status\n")
    (workdir / "a.yaml").write_text(job_yaml("a"))
    (workdir / "team").mkdir()
    (workdir / "team" / "settings.yaml").write_text("policy: {maxTasksPerJob: 10}\n")
    for how in ([], ["--config", "team/settings.yaml"]):
        config = workdir / ("team/settings.yaml" if how else "tfdeclare.yaml")
        other = workdir / ("tfdeclare.yaml" if how else "team/settings.yaml")
        result = cli("validate", ".", *how, cwd=workdir)
        assert result.returncode == 1, result.stderr  # only the other one is read as a spec
        assert str(other.relative_to(workdir)) in result.stderr
        assert str(config.relative_to(workdir)) not in result.stderr, result.stderr
    (workdir / "team" / "settings.yaml").unlink()
    clean = cli("plan", ".", cwd=workdir)
    assert clean.returncode == 0, clean.stderr
    assert "+ a will be created" in clean.stdout
    named = cli("validate", "tfdeclare.yaml", cwd=workdir)
    assert (
        named.returncode == 1
        and "tfdeclare.yaml:1:1: error: missing required field 'apiVersion'" in named.stderr
    )


@pytest.mark.parametrize(
    ("args", "folder"),
    [
        (("validate", "specs", "--status-dir", "specs"), "status folder"),
        (("plan", "specs", "--status-dir", "specs/"), "status folder"),
        (("apply", "specs/s.yaml", "--status-dir", "specs"), "status folder"),
        (("apply", "specs", "--state-dir", "specs"), "state folder"),
        (("daemon", "--specs", "specs", "--status-dir", "./specs", "--port", "0"), "status folder"),
        (
            ("daemon", "--specs", "specs", "--prune", "--allow-empty", "--state-dir", "specs", "--port", "0"),
            "state folder",
        ),
    ],
)
def test_a_status_or_state_folder_that_is_the_specs_folder_is_refused(
    workdir: Path, args: tuple[str, ...], folder: str
) -> None:
    """Status and state folders are passed over by the walk, and a job's status file is
    ``<name>.yaml``: the specs folder as either read no spec (the daemon with --prune then
    deleted every job and its file) and had ``s.yaml`` overwritten with the status of job
    ``s``. Refused before anything is read, written or started."""
    spec = workdir / "specs" / "s.yaml"
    spec.write_text(job_yaml("s"))
    before = sorted(p.name for p in (workdir / "specs").iterdir())
    result = cli(*args, cwd=workdir, timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"the {folder} is where the specs are" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert spec.read_text() == job_yaml("s")
    assert sorted(p.name for p in (workdir / "specs").iterdir()) == before


_PEAK_OF_CHILD = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)
print(done.stderr)
"""


@pytest.mark.parametrize("command", ["validate", "convert"])
def test_a_file_over_the_limit_is_refused_unread(workdir: Path, command: str) -> None:
    """A spec author pushes a 1 GiB file (sparse here): it is refused at its size, not read
    into memory first (which took a gigabyte and seconds, in the daemon too)."""
    (workdir / "specs" / "big.yaml").write_bytes(b"")
    os.truncate(workdir / "specs" / "big.yaml", 1 << 30)
    target = "specs" if command == "validate" else "specs/big.yaml"
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-m", "tfdeclare", command, target],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    peak_kib, code = map(int, out.split("\n", 1)[0].split())
    assert code == 1
    assert "specs/big.yaml:1: error: file is 1073741824 bytes, more than the limit of 1048576" in out
    assert peak_kib < 200 * 1024, f"{peak_kib} KiB: the file was read"


def test_plan_text_detailed_exitcode_and_saved_plan(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", workers=2))
    plain = cli("plan", "specs", cwd=workdir)
    assert plain.returncode == 0
    assert "+ a will be created" in plain.stdout
    assert "Plan: 1 to create, 0 to resize, 0 to restart, 0 to delete." in plain.stdout
    detailed = cli("plan", "specs", "--detailed-exitcode", "--out", "plan.json", cwd=workdir)
    assert detailed.returncode == 2
    saved = json.loads((workdir / "plan.json").read_text())
    assert saved["kind"] == "TFDeclarePlan"
    assert set(saved["desiredAll"]) == {"a"}
    assert saved["plan"]["summary"]["create"] == 1


def test_plan_json_and_markdown(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    data = json.loads(cli("plan", "specs", "-o", "json", cwd=workdir).stdout)
    assert data["jobs"][0]["action"] == "create" and data["jobs"][0]["reasons"] == ["NewJob"]
    markdown = cli("plan", "specs", "-o", "markdown", cwd=workdir).stdout
    assert markdown.startswith("### tfdeclare plan")
    assert "| `+` | `a` | create |" in markdown


def test_plan_with_errors_exits_1_and_refuses_to_save(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text("apiVersion: [")
    result = cli("plan", "specs", "--out", "plan.json", "--detailed-exitcode", cwd=workdir)
    assert result.returncode == 1
    assert "specs/a.yaml:2:1: error:" in result.stderr
    assert not (workdir / "plan.json").exists()
    assert "Traceback" not in result.stderr


def test_invalid_config_names_file_line_and_path(workdir: Path) -> None:
    (workdir / "tfdeclare.yaml").write_text("backend: kubernetes\n")
    result = cli("validate", "specs", cwd=workdir)
    assert result.returncode == 1
    assert (
        'tfdeclare.yaml:1:10: error: must be one of local, mesos; got "kubernetes" (at $.backend)'
        in result.stderr
    )


def test_schema_command_prints_valid_json(workdir: Path) -> None:
    for name in ("job", "status", "config"):
        result = cli("schema", name, cwd=workdir)
        assert result.returncode == 0
        assert json.loads(result.stdout)["$id"].endswith(f"{name}.schema.json")
    assert cli("schema", "nope", cwd=workdir).returncode == 1


def test_common_options_work_before_and_after_the_command(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    (workdir / "tfdeclare.yaml").write_text("backend: kubernetes\n")  # invalid: must not be read
    before = cli("--config", "other.yaml", "validate", "specs", cwd=workdir)
    assert before.returncode == 1 and "cannot read config other.yaml" in before.stderr
    (workdir / "good.yaml").write_text("backend: local\n")
    after = cli("--config", "other.yaml", "validate", "specs", "--config", "good.yaml", cwd=workdir)
    assert after.returncode == 0, after.stderr
