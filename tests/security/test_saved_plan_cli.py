"""Issue 29, finding 1, through the real command: a saved plan is evidence, not authority.

``apply PLANFILE`` once re-checked the source-folder rule against the ``file`` the plan
recorded: editing ``desiredAll.<job>.file`` to ``/fake.yaml`` (or to a file in the folder of
the Docker engine's socket) with ``workingDir: etc`` (or ``.``) gave a container host ``/etc``
or the socket's folder. Now the specs are read again from the plan's paths and every claim is
compared: each edit below is refused, exit 1, naming the job and the field, and no job record
or status file is made. The property test over every field is ``test_saved_plan_edits``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli
from tfdeclare.shell.store import StateStore

pytestmark = pytest.mark.e2e

JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: reader}
spec:
  command: [cat, passwd]
  workingDir: sub
  replicas:
    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}
"""


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A project whose ``specs/reader.yaml`` is planned into ``plan.json`` (nothing applied)."""
    (tmp_path / "specs" / "sub").mkdir(parents=True)
    (tmp_path / "specs" / "reader.yaml").write_text(JOB)
    made = cli("plan", "specs", "--out", "plan.json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    return tmp_path, json.loads((tmp_path / "plan.json").read_text())


def nothing_applied(project: Path) -> None:
    assert StateStore(project / ".tfdeclare").names() == []
    status = project / "status"
    assert not status.exists() or not list(status.iterdir())


def apply_edited(project: Path, saved: dict[str, Any]) -> tuple[int, str]:
    (project / "plan.json").write_text(json.dumps(saved))
    result = cli("apply", "plan.json", cwd=project)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr


@pytest.mark.parametrize(
    ("file", "working_dir"),
    [("/fake.yaml", "etc"), ("/var/run/fake.yaml", "."), ("/run/fake.yaml", "."), ("/fake.yaml", None)],
)
def test_a_plan_whose_job_file_is_edited_is_refused_and_runs_nothing(
    planned: tuple[Path, dict[str, Any]], file: str, working_dir: str | None
) -> None:
    project, saved = planned
    saved["desiredAll"]["reader"]["file"] = file
    if working_dir is not None:
        saved["desiredAll"]["reader"]["spec"]["spec"]["workingDir"] = working_dir
    code, stderr = apply_edited(project, saved)
    assert code == 1, stderr
    assert (
        f"specs/reader.yaml:3:18: error: job reader: the plan says desiredAll.reader.file/line is '{file}' line 1, "
        "the files now say 'specs/reader.yaml' line 1: run `tfdeclare plan` again"
    ) in stderr
    if working_dir is not None:
        assert "specs/reader.yaml:4:1: error: job reader: the plan's spec differs" in stderr
        assert "(at $.spec.workingDir)" in stderr
        assert f"'{working_dir}'" not in stderr  # values are not quoted
    assert "nothing applied from plan.json" in stderr
    nothing_applied(project)


def test_a_plan_pointed_at_other_paths_is_checked_as_those_paths_are(
    planned: tuple[Path, dict[str, Any]],
) -> None:
    """Re-reading other paths is ``apply thosepaths``: policy-checked where the files lie."""
    project, saved = planned
    (project / "other").mkdir()
    (project / "other" / "reader.yaml").write_text(JOB.replace("workingDir: sub", "workingDir: ../../../etc"))
    saved["paths"] = ["other"]
    code, stderr = apply_edited(project, saved)
    assert code == 1, stderr
    assert "other/reader.yaml:6:15: error:" in stderr and "(at $.spec.workingDir)" in stderr
    nothing_applied(project)
    # and files that pass the policy but are not what was planned: refused as not matching
    (project / "other" / "reader.yaml").write_text(JOB.replace("cat, passwd", "cat, shadow"))
    code, stderr = apply_edited(project, saved)
    assert code == 1 and "(at $.spec.command[1])" in stderr, stderr
    assert "the plan says files is ['specs/reader.yaml'], the files now give ['other/reader.yaml']" in stderr
    nothing_applied(project)


def test_a_plan_of_standard_input_is_neither_saved_nor_applied(planned: tuple[Path, dict[str, Any]]) -> None:
    project, saved = planned
    refused = cli("plan", "-", "--out", "stdin.json", cwd=project)
    assert refused.returncode == 1 and "standard input (`-`) cannot be read again" in refused.stderr
    assert not (project / "stdin.json").exists()
    saved["paths"] = ["-"]
    code, stderr = apply_edited(project, saved)
    assert code == 1 and "was made from standard input, which cannot be read again" in stderr, stderr
    nothing_applied(project)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("formatVersion", 2, "formatVersion: 2; this tfdeclare reads 1"),
        ("stateDir", "/elsewhere", "was made for backend local and state folder /elsewhere"),
        ("backend", "mesos", "was made for backend mesos"),
        ("observedFingerprint", "0" * 64, "is stale: the jobs it was planned against have changed"),
        ("paths", "specs", "paths: missing or of the wrong type"),
    ],
)
def test_edits_of_the_plan_files_own_fields_are_refused(
    planned: tuple[Path, dict[str, Any]], field: str, value: Any, says: str
) -> None:
    project, saved = planned
    saved[field] = value
    code, stderr = apply_edited(project, saved)
    assert code == 1 and says in stderr, stderr
    nothing_applied(project)


def test_an_honest_plan_still_applies(planned: tuple[Path, dict[str, Any]]) -> None:
    project, _ = planned
    try:
        applied = cli("apply", "plan.json", "--prune", cwd=project)
        assert applied.returncode == 0, applied.stderr
        assert "reader will be created" in applied.stdout
        assert "warning: --prune is ignored: a saved plan applies with the options it was made with" in (
            applied.stderr
        )
        loaded = StateStore(project / ".tfdeclare").load("reader")
        assert loaded is not None
        record = loaded.to_json()
        assert record["source"] == {"file": "specs/reader.yaml", "line": 1}
        assert record["sourceDir"] == str((project / "specs").resolve())
    finally:
        assert cli("delete", "--all", cwd=project).returncode == 0
