"""``plan`` says what apply will find (issue 32): a created job's resolved spec in the text
plan, a warning at the spec's line for a job that can never fit the local backend, and the
command that applies a saved plan."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import cli, job_yaml
from tfdeclare.core.plan import render
from tfdeclare.core.plan.render import spec_lines

GPU_JOB = job_yaml("big", workers=2, roles="worker: {count: 2, resources: {cpus: 0.1, mem: 64, gpus: 4}}")


def test_text_plan_shows_the_created_jobs_resolved_spec(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", workers=2))
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("  + a will be created  (specs/a.yaml:1)")
    # the defaults filled in: what apply will run, not only what the file says
    assert lines[at + 2 : at + 9] == [
        '      + spec.command: ["sleep", "30"]',
        '      + spec.replicas.worker: {"count": 2, "resources": {"cpus": 0.1, "mem": 64, "gpus": 0}}',
        '      + spec.restartPolicy: "OnFailure"',
        "      + spec.backoffLimit: 3",
        "      + spec.terminationGracePeriodSeconds: 10",
        '      + spec.clusterSpec: "tf_config"',
        '      + spec.placement: {"strategy": "pack", "constraints": []}',
    ]
    assert lines[at + 9] == "      starts: worker-0..1"


def test_text_plan_hides_secret_looking_env_values_of_a_created_job(workdir: Path) -> None:
    extra = "  env: {API_TOKEN: hunter2-very-secret, MODE: fast}\n"
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", extra=extra))
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert "hunter2" not in result.stdout
    assert '+ spec.env: {"API_TOKEN": "(sensitive)", "MODE": "fast"}' in result.stdout


def test_a_job_that_can_never_fit_is_a_warning_at_its_spec_line(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(GPU_JOB)
    (workdir / "tfdeclare.yaml").write_text("local: {gpus: 2, cpus: 1}\n")
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr  # a warning: plan still plans it
    assert (
        "specs/a.yaml:5:1: warning: this job can never fit this machine: its tasks need 8 gpus "
        "(offered: 2) in all; the local backend offers local.cpus, local.mem and local.gpus of the "
        "config, else what the machine has: change the spec or the config, or apply will leave it "
        "Pending as Unschedulable (at $.spec)"
    ) in result.stderr
    assert "+ big will be created" in result.stdout
    # what the machine has counts where the config says nothing: 0.2 cpus fit any machine
    (workdir / "tfdeclare.yaml").write_text("local: {gpus: 8}\n")
    fits = cli("plan", "specs", cwd=workdir)
    assert fits.returncode == 0, fits.stderr
    assert "never fit" not in fits.stderr
    # each resource short is named, memory too (mem from the config)
    (workdir / "tfdeclare.yaml").write_text("local: {gpus: 8, mem: 100Mi}\n")
    memory = cli("plan", "specs", "-o", "json", cwd=workdir)
    assert "its tasks need 128 MiB of memory (offered: 100) in all" in memory.stderr
    assert json.loads(memory.stdout)["jobs"][0]["action"] == "create"


def test_apply_finds_what_plan_warned_of(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(GPU_JOB)
    (workdir / "tfdeclare.yaml").write_text("local: {gpus: 2}\n")
    assert "never fit" in cli("plan", "specs", cwd=workdir).stderr
    cli("apply", "specs", cwd=workdir)
    status = cli("status", "big", "-o", "json", cwd=workdir)
    assert status.returncode == 0, status.stderr
    assert "Unschedulable" in status.stdout


def test_saved_plan_ends_with_the_command_that_applies_it(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a"))
    text = cli("plan", "specs", "--out", "plan.json", cwd=workdir)
    assert text.returncode == 0, text.stderr
    hint = "Saved the plan to plan.json: run `tfdeclare apply plan.json` to apply exactly this plan"
    assert text.stdout.rstrip("\n").splitlines()[-1] == hint
    # a document stays parseable: the hint goes to stderr
    document = cli("plan", "specs", "-o", "json", "--out", "plan.json", cwd=workdir)
    assert json.loads(document.stdout)["summary"]["create"] == 1
    assert hint in document.stderr
    # and the command it names does what it says
    applied = cli("apply", "plan.json", cwd=workdir)
    assert applied.returncode == 0, applied.stderr + applied.stdout
    assert [job["name"] for job in json.loads(cli("status", "-o", "json", cwd=workdir).stdout)] == ["a"]


def test_a_created_jobs_long_values_are_shown_from_their_start_and_replica_env_hidden() -> None:
    """``spec_lines`` shows each value whole up to its limit (a value is not a change: no
    "…" cut to where two values differ), and hides secret-looking env values at any depth."""
    image = "registry.example.com/team/tensorflow:2.21.0-gpu"
    canonical = {
        "metadata": {"name": "a", "labels": {}},
        "spec": {
            "image": image,
            "command": None,
            "replicas": {"worker": {"count": 1, "env": {"DB_PASSWORD": "hunter2", "MODE": "fast"}}},
        },
    }
    assert spec_lines(canonical, "+") == [
        f'+ spec.image: "{image}"',
        '+ spec.replicas.worker: {"count": 1, "env": {"DB_PASSWORD": "(sensitive)", "MODE": "fast"}}',
    ]
    assert canonical["spec"]["replicas"]["worker"]["env"]["DB_PASSWORD"] == "hunter2", "not changed in place"


def test_a_long_text_plan_is_written_in_parts_that_join_as_one(workdir: Path) -> None:
    """Over ``_JOBS_A_PART`` jobs the text plan is written in parts (never held whole): the
    output is the text ``render_text`` makes, with no blank line lost or doubled between them."""
    count = 2 * render._JOBS_A_PART + 1
    for i in range(count):
        (workdir / "specs" / f"j{i:04d}.yaml").write_text(job_yaml(f"j{i:04d}"))
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    blocks = result.stdout.split("\n\n")
    assert blocks[0] == "tfdeclare will perform these actions:"
    assert [b.splitlines()[0] for b in blocks[1:-1]] == [
        f"  + j{i:04d} will be created  (specs/j{i:04d}.yaml:1)" for i in range(count)
    ]
    assert blocks[-1] == f"Plan: {count} to create, 0 to resize, 0 to restart, 0 to delete.\n"
