"""Issue 20: whoever can push a spec gets only what policy allows, through every field that
names a path or an image, in every form (job, role, TensorBoard, Kubeflow), by every entry
(validate, plan, apply, standard input, convert, a hand-edited saved plan, the daemon).

A property test generates hostile values (``..`` chains, links out of the folder, the state,
status and engine-socket paths, unlisted images) for each field and shows each refused with
``file:line:col`` and its JSON path, exit 1, by every entry; benign values of the same fields
are accepted. The CLI runs in-process (``tfdeclare.cli.main.main``) for speed, except the
daemon, which runs as a real process once over a folder of every hostile form.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfdeclare.cli.main import main
from tfdeclare.shell.store import StateStore

CONFIG = """\
backend: mesos  # accepts images and volumes; nothing here reaches a master
policy:
  allowedImages: ["registry.example.com/*"]
  allowedHostPaths: [PROJECT/data, /var]
"""
GOOD_IMAGE = "registry.example.com/tf:2"


def native(extra: str, worker: str = "{count: 1, resources: {cpus: 1, mem: 64}}") -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: bad}\n"
        f"spec:\n  image: {GOOD_IMAGE}\n  command: [python, train.py]\n{extra}"
        f"  replicas:\n    worker: {worker}\n"
    )


def kubeflow(worker_container: str, worker_pod: str = "") -> str:
    """A TFJob whose Chief is benign and whose Worker carries the value (so it stays the
    Worker's own, not hoisted to the job)."""
    pod = textwrap.indent(worker_pod, " " * 10)
    container = textwrap.indent(worker_container, " " * 14)
    return (
        "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: bad}\nspec:\n  tfReplicaSpecs:\n"
        "    Chief:\n      replicas: 1\n      template:\n        spec:\n          containers:\n"
        f"            - name: tensorflow\n              image: {GOOD_IMAGE}\n"
        "              command: [python, train.py]\n"
        "    Worker:\n      replicas: 1\n      template:\n        spec:\n"
        f"{pod}          containers:\n            - name: tensorflow\n"
        f"              command: [python, train.py]\n{container}"
    )


@dataclass(frozen=True)
class Form:
    """One field in one form: the spec text for a value, where the refusal is reported, and
    where the value lies in the native canonical form (for the saved plan)."""

    text: Callable[[str], str]
    at: str  # the end of the JSON path of the diagnostic
    canonical: tuple[str | int, ...] | None  # None: not in the saved plan's native form as is
    kind: str  # path | volume | logdir | checkpoint | image


FORMS: dict[str, Form] = {
    "job workingDir": Form(
        lambda v: native(f"  workingDir: {v}\n"), "$.spec.workingDir", ("spec", "workingDir"), "path"
    ),
    "role workingDir": Form(
        lambda v: native("", f"{{count: 1, workingDir: {v}}}"),
        "$.spec.replicas.worker.workingDir",
        ("spec", "replicas", "worker", "workingDir"),
        "path",
    ),
    "volume hostPath": Form(
        lambda v: native(f"  volumes: [{{hostPath: {v}, containerPath: /d}}]\n"),
        "$.spec.volumes[0].hostPath",
        ("spec", "volumes", 0, "hostPath"),
        "volume",
    ),
    "tensorboard logDir": Form(
        lambda v: native(f"  tensorboard: {{logDir: {v}}}\n"),
        "$.spec.tensorboard.logDir",
        ("spec", "tensorboard", "logDir"),
        "logdir",
    ),
    "checkpoint dir": Form(  # issue 34: read by the controller
        lambda v: native(f"  checkpoint: {{dir: {v}}}\n"),
        "$.spec.checkpoint.dir",
        ("spec", "checkpoint", "dir"),
        "checkpoint",
    ),
    "Kubeflow workingDir": Form(
        lambda v: kubeflow(f"workingDir: {v}\nimage: {GOOD_IMAGE}\n"),
        ".containers[0].workingDir",
        None,
        "path",
    ),
    "Kubeflow hostPath": Form(
        lambda v: kubeflow(
            f"image: {GOOD_IMAGE}\nvolumeMounts: [{{name: d, mountPath: /d}}]\n",
            f"volumes: [{{name: d, hostPath: {{path: {v}}}}}]\n",
        ),
        ".volumes[0].hostPath.path",
        None,
        "volume",
    ),
    "job image": Form(
        lambda v: native("").replace(GOOD_IMAGE, v), "$.spec.image", ("spec", "image"), "image"
    ),
    "role image": Form(
        lambda v: native("", f"{{count: 1, image: {v!r}}}"),
        "$.spec.replicas.worker.image",
        ("spec", "replicas", "worker", "image"),
        "image",
    ),
    "tensorboard image": Form(
        lambda v: native(f"  tensorboard: {{logDir: runs, image: {v!r}}}\n"),
        "$.spec.tensorboard.image",
        ("spec", "tensorboard", "image"),
        "image",
    ),
    "Kubeflow replica image": Form(
        lambda v: kubeflow(f"image: {v!r}\n"), ".containers[0].image", None, "image"
    ),
}

# Hostile values by kind; PROJECT, STATE and STATUS are filled in per project.
CLIMBS = st.builds(
    lambda k, tail: "../" * k + tail,
    st.integers(1, 8),
    st.sampled_from(["etc", "tmp", ".tfdeclare", ".tfdeclare/jobs", "status", "", "x/../.."]),
)
HOSTILE: dict[str, st.SearchStrategy[str]] = {
    "path": st.one_of(
        CLIMBS,
        st.sampled_from(
            ["out", "deep/out", "STATE", "STATE/jobs", "STATUS/x", "./out/..", "STATE/../.tfdeclare"]
        ),
    ),
    "volume": st.sampled_from(
        [
            "/etc",
            "/",
            "/var/run",  # allowed by the policy, but holds the engine's socket
            "/var/run/docker.sock",
            "PROJECT",  # holds the state folder
            "PROJECT/data/../.tfdeclare",
            "PROJECT/data/../../..",
            "STATE",
            "STATE/jobs",
        ]
    ),
    "logdir": st.builds(lambda k: "../" * k + "jobs", st.integers(2, 8)),
    "checkpoint": st.one_of(
        st.builds(lambda k: "../" * k + "jobs", st.integers(2, 8)),
        st.sampled_from(["/etc", "/", "STATE", "STATE/jobs", "STATUS/x", "PROJECT/data/../.tfdeclare"]),
    ),
    "image": st.sampled_from(
        [
            "evil.io/miner:latest",
            "registry.example.com.evil.io/x:1",
            "docker.io/library/python:3",
            "registry.example.co/tf:2",
        ]
    ),
}
BENIGN = {
    "path": ["sub", "./sub/../sub", "/workspace", "inside"],
    "volume": ["PROJECT/data", "PROJECT/data/sets/../x", "/var/lib/datasets"],
    "logdir": ["runs", "../chief-0/logs", "gs://bucket/runs"],
    "checkpoint": ["ckpt", "../worker-0/ckpt", "PROJECT/data/ckpt", "/var/lib/ckpt"],
    "image": [GOOD_IMAGE, "registry.example.com/team/tf@sha256:" + "a" * 64],
}
ENTRIES = ("validate", "plan", "apply", "stdin", "convert")


def make_project(root: Path) -> Path:
    """A project: the config, ``specs/`` (and the project) with a link out (``escape -> /etc``) and
    one inside it (``specs/inside -> sub``), and ``data/`` (an allowed host path)."""
    project = root.resolve()
    (project / "specs" / "sub").mkdir(parents=True)
    (project / "data").mkdir()
    (project / "tfdeclare.yaml").write_text(CONFIG.replace("PROJECT", str(project)))
    os.symlink("/etc", project / "specs" / "escape")
    os.symlink("/etc", project / "escape")  # for a spec read from stdin: its folder is the project
    os.symlink("sub", project / "specs" / "inside")
    return project


def spec_text(form: Form, value: str) -> str:
    """The form's spec with ``value`` (paths quoted as JSON strings; images as they are)."""
    return form.text(value if form.kind == "image" else json.dumps(value))


def fill(value: str, project: Path) -> str:
    return (
        value.replace("PROJECT", str(project))
        .replace("STATE", str(project / ".tfdeclare"))
        .replace("STATUS", str(project / "status"))
    )


@contextlib.contextmanager
def inside(folder: Path, stdin: bytes = b"") -> Iterator[io.StringIO]:
    """Run in ``folder`` with ``stdin``, capturing stderr."""
    before = Path.cwd()
    err = io.StringIO()
    fake_stdin = io.TextIOWrapper(io.BytesIO(stdin))
    old_stdin = sys.stdin
    os.chdir(folder)
    sys.stdin = fake_stdin
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            yield err
    finally:
        sys.stdin = old_stdin
        os.chdir(before)


def run_entry(project: Path, entry: str, text: str) -> tuple[int, str, str]:
    """(exit code, stderr, the file name diagnostics use) of one entry on ``text``."""
    if entry == "stdin":
        with inside(project, text.encode()) as err:
            code = main(["plan", "-"])
        return code, err.getvalue(), "<stdin>"
    (project / "specs" / "bad.yaml").write_text(text)
    with inside(project) as err:
        code = main([entry, "specs/bad.yaml" if entry == "convert" else "specs"])
    return code, err.getvalue(), "specs/bad.yaml"


def assert_refused(code: int, stderr: str, file: str, at: str, what: str) -> None:
    """Exit 1 and ``FILE:LINE:COL: error: ... (at $...AT)`` (a saved plan's mismatch too)."""
    assert code == 1, (what, stderr)
    lines = [x for x in stderr.splitlines() if x.startswith(f"{file}:")]
    pattern = re.compile(
        rf"^{re.escape(file)}:\d+:\d+: error: .*\(at \$\S*{re.escape(at.removeprefix('$'))}\)$"
    )
    assert any(pattern.match(x) for x in lines), (what, stderr)
    assert "Traceback" not in stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_hostile_value_of_every_field_is_refused_at_its_line_by_every_entry(
    data: st.DataObject,
) -> None:
    name = data.draw(st.sampled_from(sorted(FORMS)), label="form")
    form = FORMS[name]
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp))
        value = fill(data.draw(HOSTILE[form.kind], label="value"), project)
        if form.kind == "path" and value in ("out", "deep/out", "./out/.."):
            value = "escape" + value.removeprefix(".").removeprefix("out").removeprefix(
                "deep/out"
            )  # a link out
        text = spec_text(form, value)
        for entry in ENTRIES:
            code, stderr, file = run_entry(project, entry, text)
            assert_refused(code, stderr, file, form.at, f"{name}={value!r} by {entry}")
        assert not (project / "status").exists() or not list((project / "status").iterdir())


@pytest.mark.parametrize("name", sorted(FORMS))
def test_benign_values_of_every_field_are_accepted(tmp_path: Path, name: str) -> None:
    form = FORMS[name]
    project = make_project(tmp_path)
    for value in BENIGN[form.kind]:
        text = spec_text(form, fill(value, project))
        for entry in ("validate", "plan", "stdin", "convert"):
            code, stderr, _ = run_entry(project, entry, text)
            assert code == 0, (name, value, entry, stderr)


@pytest.mark.parametrize("name", sorted(n for n, f in FORMS.items() if f.canonical is not None))
def test_a_hand_edited_saved_plan_is_refused_for_each_field(tmp_path: Path, name: str) -> None:
    form = FORMS[name]
    assert form.canonical is not None
    project = make_project(tmp_path)
    benign = fill(BENIGN[form.kind][0], project)
    hostile = fill(
        {
            "path": "../../etc",
            "volume": "/var/run/docker.sock",
            "logdir": "../../../jobs",
            "checkpoint": "STATE/jobs",
            "image": "evil.io/miner:latest",
        }[form.kind],
        project,
    )
    (project / "specs" / "bad.yaml").write_text(spec_text(form, benign))
    with inside(project) as err:
        assert main(["plan", "specs", "--out", "p.json"]) in (0, 2), err.getvalue()
    saved = json.loads((project / "p.json").read_text())
    place = saved["desiredAll"]["bad"]["spec"]
    *parents, last = form.canonical
    for key in parents:
        place = place[key]
    place[last] = hostile
    (project / "p.json").write_text(json.dumps(saved))
    with inside(project) as err:
        code = main(["apply", "p.json"])
    assert_refused(code, err.getvalue(), "specs/bad.yaml", form.at, name)
    assert not StateStore(project / ".tfdeclare").names()


WORDS = {  # what each kind's refusal says (the daemon's log has other lines at the same places)
    "path": ("outside", "no job may use it"),
    "volume": ("no job may use it", "is not allowed"),
    "logdir": ("leads out",),
    "checkpoint": ("leads out", "is not allowed", "no job may use it"),
    "image": ("policy.allowedImages",),
}


@pytest.mark.slow
def test_the_daemon_refuses_every_hostile_form_and_runs_none(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    # the local backend: the daemon's passes need no cluster (Mesos would wait for its master)
    config = (project / "tfdeclare.yaml").read_text().replace("backend: mesos", "backend: local")
    (project / "tfdeclare.yaml").write_text(config)
    hostile = {
        "path": "../../etc",
        "volume": "/",
        "logdir": "../../jobs",
        "checkpoint": "../../jobs",
        "image": "evil.io/miner:latest",
    }
    expected = {}
    for index, (_, form) in enumerate(sorted(FORMS.items())):
        text = spec_text(form, fill(hostile[form.kind], project)).replace("name: bad", f"name: bad{index}")
        (project / "specs" / f"bad{index}.yaml").write_text(text)
        expected[f"specs/bad{index}.yaml"] = form

    def refused(line: str, file: str, form: Form) -> bool:
        return (
            f" {file}:" in f" {line}"
            and " error: " in line
            and line.endswith(f"{form.at.removeprefix('$')})")
            and any(w in line for w in WORDS[form.kind])
        )

    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdeclare",
            "daemon",
            "--specs",
            "specs",
            "--port",
            "0",
            "--interval",
            "3600",
        ],
        cwd=project,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        assert daemon.stderr is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all(
            any(refused(x, f, form) for x in seen) for f, form in expected.items()
        ):
            line = daemon.stderr.readline()
            if not line:
                break
            seen.append(line.strip())
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    for file, form in expected.items():
        assert any(refused(x, file, form) for x in seen), (file, form.at, seen)
    assert not StateStore(project / ".tfdeclare").names()


def test_the_field_screen_covers_what_every_known_spec_runs() -> None:
    """The rules skip resolving the runs when the cheap look at the fields (``FieldScreen``)
    says nothing could break them: that look must cover every image, working folder, task and
    GPU that runs, for every spec the project knows (examples, golden cases, Kubeflow
    manifests, the forms above)."""
    from tfdeclare.core.spec.loader import load_file

    repo = Path(__file__).resolve().parents[2]
    files = [
        *repo.glob("specs/*.yaml"),
        *repo.glob("tests/golden/**/*.yaml"),
        *repo.glob("tests/kubeflow/*.yaml"),
    ]
    texts = [(str(p), p.read_bytes()) for p in files if p.is_file()]  # some golden cases hold broken links
    texts += [(name, spec_text(form, v).encode()) for name, form in FORMS.items() for v in BENIGN[form.kind]]
    jobs = [job for name, data in texts for job in load_file(name, data).jobs]
    assert len(jobs) > 40
    for job in jobs:
        screen, runs = job.screen, job.runs
        assert {r.image for r in runs if r.image} <= screen.images, job.name
        assert {r.working_dir for r in runs if r.working_dir} <= screen.working_dirs, job.name
        assert sum(r.count for r in runs) == screen.tasks, job.name
        assert sum(r.count * r.resources.gpus for r in runs) == screen.gpus, job.name
        assert screen.unset_image or all(r.image for r in runs), job.name
