"""Backends as plugins: the registry, the composed config schema and file, and each backend's
spec checks, as pure functions and through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import cli, job_yaml
from tfdeclare.backends import registry
from tfdeclare.backends.local.config import LocalConfig, LocalRuntime
from tfdeclare.backends.local.plugin import check_job as local_check
from tfdeclare.backends.local.plugin import root_warnings as local_root_warnings
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.backends.mesos.plugin import check_job as mesos_check
from tfdeclare.backends.mesos.plugin import user_warnings as mesos_user_warnings
from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.spec.loader import LoadedJob, load_file
from tfdeclare.core.spec.schema import Schema

# ---- the registry -----------------------------------------------------------------------------


def test_registry_names_each_backend_once() -> None:
    assert registry.names() == ("local", "mesos")
    for name in registry.names():
        plugin = registry.plugin(name)
        assert plugin.name == name
        assert plugin.config_schema()["$id"].endswith(f"/backends/{name}.schema.json")


def test_an_unknown_backend_is_a_lookup_error_naming_the_known_ones() -> None:
    with pytest.raises(registry.UnknownBackend, match=r"unknown backend 'kubernetes'; one of local, mesos"):
        registry.plugin("kubernetes")


def test_importing_the_registry_imports_no_backend() -> None:
    probe = (
        "import sys, tfdeclare.backends.registry\n"
        "heavy = [m for m in sys.modules if m == 'httpx' or m.startswith("
        "('tfdeclare.backends.mesos.client', 'tfdeclare.backends.mesos.backend', "
        "'tfdeclare.backends.local.backend'))]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the config schema and file ---------------------------------------------------------------


def _undescribed(schema: Any, path: str = "$") -> list[str]:
    missing = []
    for key, sub in schema.get("properties", {}).items():
        if "description" not in sub:
            missing.append(f"{path}.{key}")
        missing.extend(_undescribed(sub, f"{path}.{key}"))
    return missing


def test_the_config_schema_is_composed_from_each_backends_fragment() -> None:
    document = registry.config_schema()
    jsonschema.Draft202012Validator.check_schema(document)
    assert document["properties"]["backend"]["enum"] == ["local", "mesos"]
    for name in registry.names():
        fragment = registry.plugin(name).config_schema()
        assert document["properties"][name]["properties"] == fragment["properties"]
    assert _undescribed(document) == []
    assert {e["backend"] for e in document["examples"]} == {"local", "mesos"}
    reference = jsonschema.Draft202012Validator(document)
    ours = Schema(document)
    for example in document["examples"]:
        assert ours.validate(example) == []
        assert not list(reference.iter_errors(example))
    for wrong in ({"backend": "yarn"}, {"mesos": {"nope": 1}}, {"local": {"gpus": -1}}):
        assert ours.validate(wrong) != []
        assert list(reference.iter_errors(wrong))


def test_schema_config_prints_the_composed_schema(tmp_path: Path) -> None:
    result = cli("schema", "config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == registry.config_schema()


@pytest.mark.parametrize("name", ["local", "mesos"])
def test_each_backends_default_config_is_its_schema_defaults(name: str) -> None:
    config, problems = registry.parse_config_file("c.yaml", b"backend: local\n", "/etc/tfdeclare")
    assert problems == [] and config is not None
    assert config.backends[name] == registry.plugin(name).config_type()


def _problems(text: str) -> list[str]:
    config, problems = registry.parse_config_file("c.yaml", textwrap.dedent(text).encode(), "/cfg")
    assert (config is None) == bool(problems)
    return [p.format() for p in problems]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("backend: yarn\n", 'c.yaml:1:10: error: must be one of local, mesos; got "yarn" (at $.backend)'),
        ("mesos:\n  containerizer: rkt\n", "c.yaml:2:18: error: must be one of mesos, docker"),
        ("mesos:\n  nope: 1\n", "c.yaml:2:3: error: unknown field 'nope'"),
        ("local:\n  mem: 0Gi\n", "c.yaml:2:8: error: mem '0Gi' must be more than 0 (at $.local.mem)"),
        (
            "local:\n  portRange: {first: 3000, last: 2000}\n",
            "c.yaml:2:3: error: first must not be after last (at $.local.portRange)",
        ),
        # what the master refuses at SUBSCRIBE (apply retried it until its subscribe timeout)
        ('mesos:\n  roles: ["bad role"]\n', "c.yaml:2:11: error: must be a Mesos role"),
        ("mesos:\n  roles: [-ml]\n", "c.yaml:2:11: error: must be a Mesos role"),
        ("mesos:\n  roles: [ml/../x]\n", "c.yaml:2:11: error: must be a Mesos role"),
        (
            "mesos:\n  master: ftp://127.0.0.1:5050\n",
            "c.yaml:2:11: error: must be an http://, https:// or zk://",
        ),
    ],
)
def test_config_errors_name_file_line_and_json_path(text: str, expected: str) -> None:
    (problem,) = _problems(text)
    assert problem.startswith(expected), problem


@pytest.mark.parametrize("roles", ["['*']", "[ml]", "[ml/team-a, gpu.pool]", "['team/a/b']"])
def test_mesos_roles_the_master_takes_are_valid(roles: str) -> None:
    assert _problems(f"mesos:\n  roles: {roles}\n  master: zk://h1:2181,h2:2181/mesos\n") == []


def test_a_mistake_in_any_backends_section_is_reported_whichever_is_chosen() -> None:
    assert _problems("backend: mesos\nlocal: {mem: 0Gi}\n") == [
        "c.yaml:2:14: error: mem '0Gi' must be more than 0 (at $.local.mem)"
    ]


def test_sections_parse_into_each_backends_config_with_files_from_the_config_folder() -> None:
    text = """\
        backend: mesos
        local: {cpus: 2, mem: 1Gi, portRange: {first: 21000, last: 21999}}
        mesos: {master: "zk://zk:2181/mesos", secretFile: secret.txt, caFile: /etc/ca.pem, roles: [ml]}
        """
    config, problems = registry.parse_config_file("c.yaml", textwrap.dedent(text).encode(), "/cfg")
    assert problems == [] and config is not None
    assert config.backend == "mesos"
    assert config.backends["local"] == LocalConfig(cpus=2.0, mem_mib=1024, port_first=21000, port_last=21999)
    mesos = config.backends["mesos"]
    assert isinstance(mesos, MesosConfig)
    assert (mesos.master, mesos.secret_file, mesos.ca_file, mesos.roles) == (
        "zk://zk:2181/mesos",
        "/cfg/secret.txt",
        "/etc/ca.pem",
        ("ml",),
    )


# ---- spec checks, pure ------------------------------------------------------------------------

JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: j}
spec:
  command: [python, train.py]
  replicas:
    chief: {count: 1, resources: {cpus: 1, mem: 1Gi}}
    worker: {count: 2, resources: {cpus: 1, mem: 1Gi, gpus: 1}}
"""
IMAGE = "  image: tf:2\n"
VOLUMES = "  volumes: [{hostPath: /mnt/data, containerPath: /data}]\n"
CONSTRAINTS = "  placement: {constraints: [{attribute: rack, operator: In, values: [r1]}]}\n"


def _job(text: str) -> LoadedJob:
    (job,) = load_file("j.yaml", text.encode()).jobs
    return job


def _at(path: tuple[str | int, ...], message: str) -> Diagnostic:
    return Diagnostic("j.yaml", None, None, message, ".".join(map(str, path)), Code.BACKEND)


def _paths(found: list[Diagnostic]) -> list[str | None]:
    return [d.json_path for d in found]


def test_local_accepts_a_job_it_can_run() -> None:
    assert local_check(LocalConfig(), _job(JOB), _at) == []


PROCESS, DOCKER = LocalConfig(runtime=LocalRuntime.PROCESS), LocalConfig(runtime=LocalRuntime.DOCKER)


@pytest.mark.parametrize(
    ("config", "extra", "path", "words"),
    [
        (PROCESS, IMAGE, "spec.image", "local.runtime is process: the job would run as a bare process"),
        (DOCKER, "", "spec", "local.runtime is docker: every job runs in a container"),
        (LocalConfig(), VOLUMES, "spec.volumes", "spec.volumes need a container"),
        (PROCESS, VOLUMES, "spec.volumes", "spec.volumes need a container"),
        (LocalConfig(), CONSTRAINTS, "spec.placement.constraints", "no agent attributes"),
    ],
)
def test_local_refuses_what_it_cannot_honour(config: LocalConfig, extra: str, path: str, words: str) -> None:
    (problem,) = local_check(config, _job(JOB + extra), _at)
    assert problem.json_path == path and words in problem.message


def test_local_runs_images_and_volumes_in_containers_by_default() -> None:
    assert local_check(LocalConfig(), _job(JOB + IMAGE + VOLUMES), _at) == []
    assert local_check(DOCKER, _job(JOB + IMAGE + VOLUMES), _at) == []


def test_local_reports_every_problem_of_a_job() -> None:
    found = local_check(PROCESS, _job(JOB + IMAGE + VOLUMES + CONSTRAINTS), _at)
    assert _paths(found) == ["spec.image", "spec.volumes", "spec.placement.constraints"]


def test_mesos_takes_gpus_with_either_containerizer_warning_what_docker_does() -> None:
    """As upstream: the Docker containerizer reserves a task's GPUs on the agent
    (``allocateNvidiaGpus``) without passing them to docker; a warning says so (issue 22)."""
    gpu_job, cpu_job = _job(JOB), _job(JOB.replace(", gpus: 1", ""))
    assert mesos_check(MesosConfig(containerizer="mesos"), gpu_job, _at) == []
    assert mesos_check(MesosConfig(containerizer="docker"), cpu_job, _at) == []
    (found,) = mesos_check(MesosConfig(containerizer="docker"), gpu_job, _at)
    assert found.json_path == "spec.replicas.worker.resources.gpus" and found.severity is Severity.WARNING
    assert "reserves these GPUs on the agent, as upstream Mesos does" in found.message
    result = load_file("j.yaml", JOB.encode(), (partial(mesos_check, MesosConfig(containerizer="docker")),))
    assert len(result.jobs) == 1 and not result.has_errors, "a warning leaves the job valid"
    assert [d.severity for d in result.diagnostics] == [Severity.WARNING]


def test_mesos_warns_that_a_relative_checkpoint_folder_is_not_read() -> None:
    """Issue 34: a relative spec.checkpoint.dir lies in an agent's sandbox; an absolute one on a
    shared filesystem is read (and the local backend reads either)."""
    mesos = MesosConfig(containerizer="mesos")
    (found,) = mesos_check(mesos, _job(JOB + "  checkpoint: {dir: ckpt}\n"), _at)
    assert found.json_path == "spec.checkpoint.dir" and found.severity is Severity.WARNING
    assert "Mesos sandbox" in found.message
    assert mesos_check(mesos, _job(JOB + "  checkpoint: {dir: /mnt/shared/ckpt}\n"), _at) == []
    assert local_check(LocalConfig(), _job(JOB + "  checkpoint: {dir: ckpt}\n"), _at) == []


def test_a_roles_own_image_runs_in_containers_like_spec_image() -> None:
    text = JOB.replace("worker: {count: 2,", "worker: {count: 2, image: tf:2,")
    (problem,) = local_check(LocalConfig(runtime=LocalRuntime.PROCESS), _job(text), _at)
    assert problem.json_path == "spec.replicas.worker.image" and "local.runtime is process" in problem.message
    assert local_check(LocalConfig(), _job(text), _at) == []  # auto: the worker runs in a container
    (problem,) = local_check(LocalConfig(runtime=LocalRuntime.DOCKER), _job(text), _at)
    assert "role chief of this one has none" in problem.message


ENTRYPOINT = JOB.replace("  command: [python, train.py]\n", "  image: tf:2\n  workingDir: /w\n")


def test_mesos_refuses_a_working_dir_for_an_images_entrypoint_under_its_own_containerizer() -> None:
    (problem,) = mesos_check(MesosConfig(containerizer="mesos"), _job(ENTRYPOINT), _at)
    assert problem.json_path == "spec.workingDir" and "entrypoint" in problem.message
    assert "or use mesos.containerizer: docker, which runs it with --workdir" in problem.message
    with_args = ENTRYPOINT.replace("  workingDir: /w\n", "  workingDir: /w\n  args: [python, t.py]\n")
    (problem,) = mesos_check(MesosConfig(containerizer="mesos"), _job(with_args), _at)
    assert "to the first of the args ('python'), leaving the rest as args" in problem.message
    cpu_only = ENTRYPOINT.replace(", gpus: 1", "")
    assert mesos_check(MesosConfig(containerizer="docker"), _job(cpu_only), _at) == []
    assert mesos_check(MesosConfig(), _job(ENTRYPOINT.replace("  workingDir: /w\n", "")), _at) == []
    # each path the error offers works: the first of the args as the command, or docker
    fixed = with_args.replace("  args: [python, t.py]\n", "  command: [python]\n  args: [t.py]\n")
    assert mesos_check(MesosConfig(containerizer="mesos"), _job(fixed), _at) == []
    gpu = [d.severity for d in mesos_check(MesosConfig(containerizer="docker"), _job(with_args), _at)]
    assert gpu == [Severity.WARNING]


def test_mesos_accepts_images_volumes_and_constraints() -> None:
    assert mesos_check(MesosConfig(), _job(JOB + IMAGE + VOLUMES + CONSTRAINTS), _at) == []


def test_the_loader_places_a_checks_problems_and_keeps_the_job_out() -> None:
    result = load_file("j.yaml", (JOB + VOLUMES).encode(), (partial(local_check, LocalConfig()),))
    assert result.jobs == ()
    assert [(d.line, d.column, d.json_path, d.code) for d in result.diagnostics] == [
        (9, 3, "$.spec.volumes", Code.BACKEND)
    ]


# ---- spec checks through the CLI --------------------------------------------------------------


def _write(workdir: Path, extra: str) -> None:
    (workdir / "specs" / "j.yaml").write_text(job_yaml("j", extra=extra))


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        (VOLUMES, "specs/j.yaml:9:3: error: spec.volumes need a container"),
        (CONSTRAINTS, "specs/j.yaml:9:15: error: the local backend has no agent attributes"),
    ],
)
def test_validate_and_plan_on_local_report_the_field(workdir: Path, extra: str, where: str) -> None:
    (workdir / "tfdeclare.yaml").write_text("policy: {allowedHostPaths: [/mnt/data]}\n")  # none by default
    _write(workdir, extra)
    for command in ("validate", "plan"):
        result = cli(command, "specs", cwd=workdir)
        assert result.returncode == 1, result.stdout
        assert where in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert cli("validate", "specs", "--backend", "mesos", cwd=workdir).returncode == 0


NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture
def silent_socket(tmp_path: Path) -> Any:
    """A unix socket that is bound but never listened on: connecting is refused."""
    import socket

    path = tmp_path / "docker.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    try:
        yield path
    finally:
        sock.close()


@pytest.mark.parametrize("where", ["nowhere", "silent"])
def test_without_an_engine_plan_warns_and_apply_refuses(workdir: Path, where: str, request: Any) -> None:
    """plan works offline: no engine is a warning at the image's line saying what apply needs
    (exit 0, or 2 with --detailed-exitcode); apply, which would run the job, refuses it. Never a
    silent bare process, never an exception's repr; validate, which judges files only,
    accepts it; with local.runtime process the image itself is refused."""
    if where == "silent":
        path = request.getfixturevalue("silent_socket")
        env, why = {"DOCKER_HOST": f"unix://{path}"}, "nothing listens there (connection refused)"
    else:
        env, why = NO_ENGINE, "nothing is there (no such socket)"
    address = env["DOCKER_HOST"]
    _write(workdir, IMAGE)
    assert cli("validate", "specs", cwd=workdir, env=env).returncode == 0
    result = cli("plan", "specs", cwd=workdir, env=env)
    assert result.returncode == 0, result.stderr
    assert (
        f"specs/j.yaml:9:10: warning: no Docker engine answers at {address}: {why}: apply needs a Docker "
        "engine to run this job's containers"
    ) in result.stderr, result.stderr
    assert "+ j will be created" in result.stdout
    assert cli("plan", "--detailed-exitcode", "specs", cwd=workdir, env=env).returncode == 2
    result = cli("apply", "specs", cwd=workdir, env=env)
    assert result.returncode == 1, result.stdout
    assert (
        f"specs/j.yaml:9:10: error: this job runs in containers, but no Docker engine answers at {address}: "
        f"{why}: start the engine or point DOCKER_HOST at it"
    ) in result.stderr, result.stderr
    for output in (cli("plan", "specs", cwd=workdir, env=env).stderr, result.stderr):
        assert "Traceback" not in output and "Error(" not in output and "('" not in output, output
    assert not (workdir / "status" / "j.yaml").exists()
    mesos = cli("plan", "specs", "--backend", "mesos", cwd=workdir, env=env)  # the agents pull
    assert mesos.returncode == 0 and "+ j will be created" in mesos.stdout, mesos.stderr
    assert "Docker" not in mesos.stderr and "pull" not in mesos.stderr, mesos.stderr
    (workdir / "tfdeclare.yaml").write_text("local: {runtime: process}\n")
    result = cli("validate", "specs", cwd=workdir)
    assert "specs/j.yaml:9:10: error: local.runtime is process" in result.stderr


@pytest.mark.docker
def test_plan_says_which_images_apply_will_pull(workdir: Path, docker_client: Any, base_image: str) -> None:
    """An image the engine lacks is a warning at plan (apply pulls it); under
    imagePullPolicy Never a warning at plan and an error at apply; present ones say nothing."""
    _write(workdir, "  image: tfdeclare-no-such-image:1\n")
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert (
        "specs/j.yaml:9:10: warning: will pull tfdeclare-no-such-image:1 at apply (the Docker engine does "
        "not have it) (at $.spec.image)"
    ) in result.stderr, result.stderr
    _write(workdir, "  image: tfdeclare-no-such-image:1\n  imagePullPolicy: Always\n")
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr  # it pulls anyway
    _write(workdir, "  image: tfdeclare-no-such-image:1\n  imagePullPolicy: Never\n")
    result = cli("plan", "specs", cwd=workdir)
    never = (
        "the Docker engine has no image tfdeclare-no-such-image:1, and imagePullPolicy is Never: {}build "
        "or pull it first, or set imagePullPolicy to IfNotPresent"
    )
    assert result.returncode == 0 and "specs/j.yaml:9:10: warning: " + never.format("apply will fail; ") in (
        result.stderr
    ), result.stderr
    result = cli("apply", "specs", cwd=workdir)
    assert result.returncode == 1 and "specs/j.yaml:9:10: error: " + never.format("") in result.stderr
    image_id = docker_client.images.get(base_image).id
    for present in (base_image, image_id):  # by tag, and by id
        _write(workdir, f"  image: '{present}'\n  imagePullPolicy: Never\n")
        result = cli("plan", "specs", cwd=workdir)
        assert result.returncode == 0 and "+ j will be created" in result.stdout, result.stderr
        assert "warning" not in result.stderr, result.stderr
    # a role's own image (Kubeflow parity) is checked like the job's, under its own policy
    spec = workdir / "specs" / "j.yaml"
    spec.write_text(
        spec.read_text().replace(
            "worker: {count: 1,",
            "worker: {count: 1, image: tfdeclare-no-such:2, imagePullPolicy: IfNotPresent,",
        )
    )
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0
    assert "warning: will pull tfdeclare-no-such:2 at apply" in result.stderr, result.stderr
    assert "(at $.spec.replicas.worker.image)" in result.stderr
    # and TensorBoard's own image, under the job's policy
    _write(
        workdir,
        f"  image: '{base_image}'\n  tensorboard: {{logDir: logs, image: 'tfdeclare-no-such-tb:3'}}\n",
    )
    result = cli("plan", "specs", cwd=workdir)
    assert result.returncode == 0
    assert "warning: will pull tfdeclare-no-such-tb:3 at apply" in result.stderr, result.stderr
    assert "(at $.spec.tensorboard.image)" in result.stderr


def test_plan_on_mesos_with_docker_takes_gpus_with_a_warning(workdir: Path) -> None:
    (workdir / "tfdeclare.yaml").write_text("backend: mesos\nmesos: {containerizer: docker}\n")
    gpus = "worker: {count: 1, resources: {cpus: 1, mem: 64, gpus: 1}}"
    (workdir / "specs" / "j.yaml").write_text(job_yaml("j", roles=gpus))
    result = cli("validate", "specs", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert (
        "specs/j.yaml:8:60: warning: the Docker containerizer (mesos.containerizer: docker) reserves "
        "these GPUs on the agent, as upstream Mesos does, but does not pass them to docker"
    ) in result.stderr
    assert "(at $.spec.replicas.worker.resources.gpus)" in result.stderr
    assert cli("plan", "specs", "--backend", "local", cwd=workdir).returncode == 0


def test_the_example_specs_are_valid_on_both_backends(tmp_path: Path) -> None:
    specs = Path(__file__).resolve().parents[1] / "specs"
    for backend in registry.names():
        result = cli("validate", str(specs), "--backend", backend, cwd=tmp_path)
        assert result.returncode == 0, result.stderr


def test_the_daemon_reports_what_the_backend_cannot_honour(workdir: Path) -> None:
    from tests.test_daemon import Daemon, wait_until

    _write(workdir, VOLUMES)
    daemon = Daemon(workdir, "--specs", "specs", "--interval", "5")
    try:
        where = "specs/j.yaml:9:3: error: spec.volumes need a container"
        wait_until(lambda: where in daemon.text())
        assert not (workdir / "status" / "j.yaml").exists()
    finally:
        assert daemon.stop() == 0


def test_local_warns_about_root_processes_only_for_jobs_that_run_them() -> None:
    """Issue 20: a controller running as root runs image-less jobs as root processes, which
    no policy binds; plan and apply say so once. Not for container jobs, nor as another user."""
    process = _job(JOB)
    container = _job(JOB.replace("  command: [python, train.py]\n", "  image: tf:2\n  command: [python]\n"))
    [warning] = local_root_warnings(LocalConfig(), [container, process], 0)
    assert "runs as root" in warning and "whatever the policy says" in warning
    assert local_root_warnings(LocalConfig(), [container], 0) == []
    assert local_root_warnings(LocalConfig(), [process], 1000) == []
    assert local_root_warnings(LocalConfig(runtime=LocalRuntime.DOCKER), [container], 0) == []
    assert local_root_warnings(LocalConfig(), [], 0) == []


# ---- Mesos: the user tasks run as -----------------------------------------------------------


def test_mesos_warns_about_root_only_without_a_user() -> None:
    [warning] = mesos_user_warnings(MesosConfig(), 0)
    assert "mesos.user is not set and tfdeclare runs as root" in warning
    assert mesos_user_warnings(MesosConfig(user="trainer"), 0) == []
    assert mesos_user_warnings(MesosConfig(), 1000) == []


@pytest.mark.parametrize("user", [None, "trainer"])
def test_plan_and_apply_print_the_root_warning(tmp_path: Path, user: str | None) -> None:
    """As root without mesos.user: one warning on stderr from plan (apply prints it before it
    connects); with a user, or not as root, none."""
    setting = f", user: {user}" if user else ""
    (tmp_path / "tfdeclare.yaml").write_text(
        f"backend: mesos\nmesos: {{master: 'http://127.0.0.1:9', subscribeTimeoutSeconds: 1{setting}}}\n"
    )
    (tmp_path / "job.yaml").write_text(job_yaml("demo"))
    expect_warning = user is None and os.geteuid() == 0
    for command in (["plan", "job.yaml"], ["apply", "job.yaml"]):
        result = cli(*command, cwd=tmp_path)
        warned = "tfdeclare: warning: mesos.user is not set and tfdeclare runs as root" in result.stderr
        assert warned == expect_warning, (command, result.stderr)
        if command[0] == "apply":  # no master there: the warning came before that error
            assert result.returncode == 1 and "cannot reach the Mesos master" in result.stderr
