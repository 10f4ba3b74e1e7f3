"""Suspension and preemption end to end on the local backend, as a user runs them: real CLI
processes, real task processes that record the SIGTERM they get, status files checked against
the schema. ``spec.suspend`` edited in the file suspends and resumes a job (on the same ports);
a high-priority job that does not fit preempts a low-priority one, which runs again once the
high one has finished. Neither counts as a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, kill_leftovers, worker_ports
from tests.test_e2e_local import TASK, pids_alive, status_of, wait_until

pytestmark = pytest.mark.e2e

# The top of this worker's slice: other tests take ports from its start, and a resumed gang
# should find its own ports free again.
PORTS = (worker_ports()[0] + 700, worker_ports()[0] + 799)


def config(cpus: float) -> str:
    return (
        "restartBackoff: {initialSeconds: 0.2, maxSeconds: 1}\n"
        f"local: {{cpus: {cpus}, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
    )


def job(name: str, workers: int, mode: str, *, cpus: float = 0.1, extra: str = "") -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        f"  env: {{OUT: out/{name}}}\n"
        "  workingDir: .\n"
        "  terminationGracePeriodSeconds: 5\n"
        f"{extra}"
        "  replicas:\n"
        f"    worker: {{count: {workers}, resources: {{cpus: {cpus}, mem: 64}}, "
        f"command: [python, {TASK}, '{mode}']}}\n"
    )


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs" / "out").mkdir(parents=True)
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def outputs(project: Path, name: str) -> dict[str, dict[str, object]]:
    folder = project / "specs" / "out" / name
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def terms(project: Path, name: str) -> set[str]:
    return {p.stem for p in (project / "specs" / "out" / name).glob("*.term")}


def refreshed(project: Path, name: str) -> dict[str, object]:
    result = cli("status", "--refresh", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    return status_of(project, name)


def test_suspend_from_the_file_stops_gracefully_and_resume_reuses_the_ports(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(8))
    (project / "specs" / "out" / "bert").mkdir()
    spec_file = project / "specs" / "bert.yaml"
    spec_file.write_text(job("bert", 2, "term"))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(
        lambda: refreshed(project, "bert")["phase"] == "Running" and len(outputs(project, "bert")) == 2
    )
    first = outputs(project, "bert")
    pids = [int(r["pid"]) for r in first.values()]  # type: ignore[call-overload]

    spec_file.write_text(job("bert", 2, "term", extra="  suspend: true\n"))
    plan = cli("plan", "specs", cwd=project)
    assert "suspends: stops 2 task(s) after a 5 s grace" in plan.stdout, plan.stdout
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    wait_until(lambda: refreshed(project, "bert")["phase"] == "Suspended" and not pids_alive(pids))
    assert terms(project, "bert") == {"worker-0.0", "worker-1.0"}, "each task got SIGTERM, not a kill"
    shown = wait_until_message(
        project, "bert", "suspend: false (runPolicy.suspend in a Kubeflow manifest) runs it again"
    )
    assert shown["restarts"] == 0 and shown["suspensions"] == 1 and shown["preemptions"] == 0
    assert shown["suspension"]["reason"] == "Suspended"  # type: ignore[index]
    assert {c["type"]: c["reason"] for c in shown["conditions"]}["Suspended"] == "Suspended"  # type: ignore[union-attr,index]
    launches = sorted((project / ".tfdeclare" / "local" / "tasks").iterdir())  # a folder per launch
    assert refreshed(project, "bert")["phase"] == "Suspended", "nothing relaunches a suspended job"
    assert sorted((project / ".tfdeclare" / "local" / "tasks").iterdir()) == launches, (
        "no launch in that pass"
    )
    assert len(outputs(project, "bert")) == 2
    text = cli("status", "bert", cwd=project).stdout
    assert "bert: Suspended" in text and "preemptions 0, suspensions 1 (not counted as restarts)" in text, (
        text
    )

    spec_file.write_text(job("bert", 2, "term"))
    plan = cli("plan", "specs", cwd=project)
    assert "resumes: starts its 2 task(s) again" in plan.stdout, plan.stdout
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(
        lambda: refreshed(project, "bert")["phase"] == "Running" and len(outputs(project, "bert")) == 4
    )
    again = outputs(project, "bert")
    for index in (0, 1):
        before = first[f"worker-{index}.0"]["tfConfig"]
        after = again[f"worker-{index}.1"]["tfConfig"]
        assert before == after, "the resumed gang runs on the same ports"  # same cluster, same ports
    final = refreshed(project, "bert")
    assert final["restarts"] == 0 and final["suspension"] is None
    history = final["suspensionHistory"]
    assert [h["reason"] for h in history] == ["Suspended"] and history[0]["resumeTime"]  # type: ignore[index,union-attr]


def wait_until_message(project: Path, name: str, words: str) -> dict[str, object]:
    seen: dict[str, object] = {}

    def has() -> bool:
        seen.update(refreshed(project, name))
        return words in str(seen["message"])

    wait_until(has)
    return seen


def test_a_high_priority_job_preempts_a_low_one_which_resumes_when_it_is_done(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(1))  # room for the low job, or for the high one
    for name in ("low", "high"):
        (project / "specs" / "out" / name).mkdir()
    (project / "specs" / "low.yaml").write_text(job("low", 2, "term", cpus=0.5))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: refreshed(project, "low")["phase"] == "Running" and len(outputs(project, "low")) == 2)
    low_pids = [int(r["pid"]) for r in outputs(project, "low").values()]  # type: ignore[call-overload]

    (project / "specs" / "high.yaml").write_text(
        job("high", 1, "until=go", cpus=0.6, extra="  priority: 10\n")
    )
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    low = status_of(project, "low")
    assert low["phase"] == "Suspended", low
    assert low["suspension"]["reason"] == "Preempted"  # type: ignore[index]
    assert low["suspension"]["preemptedBy"] == "high"  # type: ignore[index]
    assert "preempted by high" in str(low["message"])
    assert "preempting low" in str(status_of(project, "high")["message"])

    wait_until(lambda: refreshed(project, "high")["phase"] in ("Running", "Succeeded"))
    assert not pids_alive(low_pids)
    assert terms(project, "low") == {"worker-0.0", "worker-1.0"}, "the victim's tasks got SIGTERM"
    assert refreshed(project, "low")["phase"] == "Suspended", "it waits while the high job runs"
    (project / "specs" / "out" / "high" / "go").touch()  # the high job may finish now

    wait_until(lambda: refreshed(project, "high")["phase"] == "Succeeded", timeout=40)
    wait_until(lambda: refreshed(project, "low")["phase"] == "Running" and len(outputs(project, "low")) == 4)
    low = status_of(project, "low")
    assert low["restarts"] == 0 and low["preemptions"] == 1 and low["suspensions"] == 0
    assert low["suspension"] is None
    assert [(h["reason"], h["preemptedBy"]) for h in low["suspensionHistory"]] == [("Preempted", "high")]  # type: ignore[union-attr,index]
    assert status_of(project, "high")["preemptions"] == 0
    text = cli("status", "low", cwd=project).stdout
    assert "restarts 0" in text and "preemptions 1, suspensions 0" in text, text
    assert "preempted by high at" in text and "priority 10 > 0" in text, text


def test_never_preempts_a_job_of_the_same_priority(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(1))
    for name in ("first", "second"):
        (project / "specs" / "out" / name).mkdir()
    (project / "specs" / "first.yaml").write_text(job("first", 2, "term", cpus=0.5, extra="  priority: 3\n"))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: refreshed(project, "first")["phase"] == "Running")
    (project / "specs" / "second.yaml").write_text(
        job("second", 1, "term", cpus=0.5, extra="  priority: 3\n")
    )
    assert cli("apply", "specs", cwd=project).returncode == 0
    for _ in range(3):
        assert refreshed(project, "first")["phase"] == "Running"
    second = status_of(project, "second")
    assert second["phase"] == "Pending"
    assert {c["type"]: c["reason"] for c in second["conditions"]}["Ready"] == "WaitingForResources"  # type: ignore[union-attr,index]
    assert "preempting" not in str(second["message"])
    assert terms(project, "first") == set()


PSS_TASK = str(Path(__file__).parent / "pss_stand_in.py")


def pss_job(name: str) -> str:
    command = f"command: [python, {PSS_TASK}, out/{name}]"
    roles = "".join(
        f"    {role}: {{count: 1, resources: {{cpus: 0.3, mem: 64}}, {command}}}\n"
        for role in ("chief", "ps", "worker")
    )
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\n"
        f"metadata: {{name: {name}}}\n"
        "spec:\n"
        "  workingDir: .\n"
        "  terminationGracePeriodSeconds: 10\n"
        f"  replicas:\n{roles}"
    )


def stamps(project: Path, name: str, suffix: str) -> dict[str, str]:
    folder = project / "specs" / "out" / name
    return {p.name.removesuffix(suffix): p.read_text() for p in folder.glob(f"*{suffix}")}


def test_a_preempted_pss_job_stops_its_chief_first_so_that_it_saves_while_the_ps_serve(project: Path) -> None:
    """Real processes (tests/pss_stand_in.py): the chief, SIGTERMed, needs its ps for 0.5 s
    more to save; the ps dies at once on SIGTERM as TensorFlow's servers do. The chief is
    stopped first and the ps only after it has exited: the save finds the ps serving."""
    (project / "tfdeclare.yaml").write_text(config(1))
    for name in ("pss", "high"):
        (project / "specs" / "out" / name).mkdir()
    (project / "specs" / "pss.yaml").write_text(pss_job("pss"))
    assert cli("apply", "specs", cwd=project).returncode == 0
    wait_until(lambda: len(stamps(project, "pss", ".up")) == 3)
    (project / "specs" / "high.yaml").write_text(
        job("high", 1, "until=go", cpus=0.5, extra="  priority: 10\n")
    )
    applied = cli("apply", "specs", cwd=project)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    wait_until(lambda: refreshed(project, "high")["phase"] == "Running", timeout=40)
    saved = stamps(project, "pss", ".saved")
    assert list(saved) == ["chief-0.0"], saved
    said, saved_at = saved["chief-0.0"].split("\n")
    assert said == "ok", said
    (term,) = stamps(project, "pss", ".term").values()
    assert float(term) >= float(saved_at), "the ps got its SIGTERM after the chief had saved"
    low = status_of(project, "pss")
    assert low["phase"] == "Suspended" and low["restarts"] == 0 and low["preemptions"] == 1
    (project / "specs" / "out" / "high" / "go").touch()
