"""Many problems at once (a real ``tfdeclare daemon --specs`` with 2000 invalid files): every
one is counted in ``/metrics``, at most 200 are listed in ``/healthz``, the page,
``problems.json`` and ``tfdeclare status``, each saying how many more stand, and the file
that holds back a running job is listed though it sorts last (``m1999``)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.test_daemon import Daemon, alive, cwd, job, pids, status, wait_until
from tfdeclare.core.plan.problems import MAX_PROBLEMS

pytestmark = pytest.mark.e2e

__all__ = ["cwd"]  # the fixture of test_daemon

FILES = 2000


def test_every_problem_is_counted_and_those_holding_jobs_back_are_listed(cwd: Path) -> None:
    specs = cwd / "specs"
    outputs = cwd / "held-out"
    outputs.mkdir()
    held = specs / f"m{FILES - 1}.yaml"
    held.write_text(job("held").replace("env: {OUT: held-out}", f"env: {{OUT: '{outputs}'}}"))
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "2")
    try:
        wait_until(lambda: len(pids(outputs)) == 1 and (status(cwd, "held") or {}).get("phase") == "Running")
        running = pids(outputs)[0]
        for i in range(FILES):
            (specs / f"m{i}.yaml").write_text(
                f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: m{i}\n"
            )
        wait_until(
            lambda: daemon.get("/healthz")[1].get("problemsOmitted") == FILES - MAX_PROBLEMS, timeout=60
        )
        health = daemon.get("/healthz")[1]
        listed = {p["path"]: p for p in health["problems"]}
        assert len(listed) == MAX_PROBLEMS
        assert listed[f"specs/m{FILES - 1}.yaml"]["jobs"] == ["held"], "the file holding a job back is listed"
        assert re.search(
            rf'^tfdeclare_source_problems\{{kind="invalid-spec"\}} {FILES}(\.0)?$',
            daemon.get("/metrics")[1],
            re.M,
        ), "every problem counted"
        with urllib.request.urlopen(daemon.url, timeout=10) as answer:
            page = answer.read().decode()
        assert f"… and {FILES - MAX_PROBLEMS} more not listed" in page and f">{FILES} problems</a>" in page
        stored = json.loads((cwd / ".tfdeclare" / "problems.json").read_text())
        assert (len(stored["problems"]), stored["problemsOmitted"]) == (MAX_PROBLEMS, FILES - MAX_PROBLEMS)
        text = cli("status", cwd=cwd).stdout
        assert f"Problems ({MAX_PROBLEMS} of {FILES}, as of" in text, text[-2000:]
        assert f"... and {FILES - MAX_PROBLEMS} more problems not listed" in text
        assert daemon.get("/jobs?problems=true")[1]["problemsOmitted"] == FILES - MAX_PROBLEMS
        document = json.loads(cli("status", "-o", "json", "--problems", cwd=cwd).stdout)
        assert document["problemsOmitted"] == FILES - MAX_PROBLEMS
        assert alive(running), "the job held back keeps running"
    finally:
        daemon.stop()


def test_apply_records_how_many_problems_it_left_out(cwd: Path) -> None:
    for i in range(MAX_PROBLEMS + 50):
        (cwd / "specs" / f"m{i}.yaml").write_text("kind: TFJob\n")
    assert cli("apply", "specs", cwd=cwd).returncode == 1
    stored = json.loads((cwd / ".tfdeclare" / "problems.json").read_text())
    assert (len(stored["problems"]), stored["problemsOmitted"]) == (MAX_PROBLEMS, 50)
    assert {"specs/m2.yaml", "specs/m199.yaml"} <= {p["path"] for p in stored["problems"]}, "natural order"
    assert f"Problems ({MAX_PROBLEMS} of {MAX_PROBLEMS + 50}" in cli("status", cwd=cwd).stdout
