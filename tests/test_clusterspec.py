"""The cluster description per task: TF_CONFIG shapes per role (the evaluator kept out of the
training cluster), legacy flags, `both`, and what a task's config hash depends on."""

from __future__ import annotations

import hashlib
import json
import textwrap

import pytest

from tfdeclare.core.enums import Role
from tfdeclare.core.run.clusterspec import TaskConfig, symbolic_addresses, task_configs
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.model import JobSpec


def job(
    replicas: str,
    extra: str = "",
    command: str = "[train, '--ps={ps_hosts}', '--w={worker_hosts}', '--job={job_name}', '--i={task_index}']",
) -> JobSpec:
    text = (
        textwrap.dedent(
            f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: j}}
        spec:
          command: {command}
          replicas: {replicas}
        """
        )
        + extra
    )
    result = load_file("j.yaml", text.encode())
    assert not result.diagnostics, result.diagnostics
    return result.jobs[0].spec


def addresses(spec: JobSpec) -> dict[TaskKey, str]:
    return {key: f"h{n}:{2000 + n}" for n, key in enumerate(spec.task_keys())}


def test_tf_config_per_role_keeps_the_evaluator_out_of_training() -> None:
    spec = job("{chief: {count: 1}, ps: {count: 2}, worker: {count: 2}, evaluator: {count: 1}}")
    configs = task_configs(spec, addresses(spec), attempt=0)
    tf = {key.name: json.loads(dict(c.env)["TF_CONFIG"]) for key, c in configs.items()}
    training = {"chief": ["h0:2000"], "ps": ["h1:2001", "h2:2002"], "worker": ["h3:2003", "h4:2004"]}
    for name in ("chief-0", "ps-0", "ps-1", "worker-0", "worker-1"):
        assert tf[name]["cluster"] == training
    assert tf["ps-1"]["task"] == {"type": "ps", "index": 1}
    assert tf["evaluator-0"] == {
        "cluster": {**training, "evaluator": ["h5:2005"]},
        "task": {"type": "evaluator", "index": 0},
    }
    assert configs[TaskKey(Role.WORKER, 1)].argv[1] == "--ps={ps_hosts}", "tf_config leaves the command alone"


def test_legacy_flags_and_both() -> None:
    spec = job("{ps: {count: 1}, worker: {count: 2}}", "  clusterSpec: legacy_flags\n")
    configs = task_configs(spec, addresses(spec), attempt=0)
    worker = configs[TaskKey(Role.WORKER, 1)]
    assert worker.argv == ("train", "--ps=h0:2000", "--w=h1:2001,h2:2002", "--job=worker", "--i=1")
    assert "TF_CONFIG" not in dict(worker.env)
    both = job("{chief: {count: 1}, worker: {count: 1}}", "  clusterSpec: both\n")
    chief = task_configs(both, addresses(both), attempt=0)[TaskKey(Role.CHIEF, 0)]
    assert chief.argv == ("train", "--ps=", "--w=h1:2001", "--job=chief", "--i=0")
    assert json.loads(dict(chief.env)["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}


def test_other_braces_in_a_command_are_left_alone() -> None:
    spec = job(
        "{ps: {count: 1}, worker: {count: 1}}",
        "  clusterSpec: legacy_flags\n",
        command="[train, '--json={\"a\": 1}', '--w={worker_hosts}', '{task_index}{task_index}']",
    )
    argv = task_configs(spec, addresses(spec), attempt=0)[TaskKey(Role.WORKER, 0)].argv
    assert argv == ("train", '--json={"a": 1}', "--w=h1:2001", "00")


def test_config_hash_changes_with_attempt_cluster_and_role_fields_only() -> None:
    spec = job("{worker: {count: 2}}")
    base = task_configs(spec, addresses(spec), attempt=0)
    key = TaskKey(Role.WORKER, 0)
    assert task_configs(spec, addresses(spec), attempt=0)[key].config_hash == base[key].config_hash
    assert task_configs(spec, addresses(spec), attempt=1)[key].config_hash != base[key].config_hash
    moved = {**addresses(spec), TaskKey(Role.WORKER, 1): "elsewhere:1"}
    assert task_configs(spec, moved, attempt=0)[key].config_hash != base[key].config_hash
    env = dict(base[key].env)
    assert (
        env["TFDECLARE_JOB"] == "j" and env["TFDECLARE_ROLE"] == "worker" and env["TFDECLARE_ATTEMPT"] == "0"
    )


def reference_hash(config: TaskConfig) -> str:
    """The identity as first defined: the whole document dumped at once, TF_CONFIG included."""
    encoded = json.dumps(
        {
            "argv": config.argv,
            "env": [(k, v if isinstance(v, str) else v.to_json()) for k, v in config.env],
            "resources": [config.resources.cpus, config.resources.mem_mib, config.resources.gpus],
            "image": config.image,
            "workingDir": config.working_dir,
            "volumes": [[v.host_path, v.container_path, v.mode.value] for v in config.volumes],
        },
        separators=(",", ":"),
    )
    if config.entrypoint:
        encoded += "+entrypoint"
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


SHAPES = [
    ("{worker: {count: 3}}", ""),
    ("{chief: {count: 1}, ps: {count: 2}, worker: {count: 2}, evaluator: {count: 1}}", ""),
    ("{ps: {count: 1}, worker: {count: 2}}", "  clusterSpec: both\n"),
    ("{ps: {count: 1}, worker: {count: 2}}", "  clusterSpec: legacy_flags\n"),
    (
        "{chief: {count: 1}, worker: {count: 2, env: {ZZ: 'z', A: 'ä ✓ \"q\" \\\\'}}}",
        "  env: {TFZ: '1', TF_A: x, TF_CONFIGS: y, UNICODE: 'snowman ☃ 𝄞', PW: {secretRef: {env: PW}}}\n"
        "  image: registry.example.com/tf:2\n  workingDir: /w\n"
        "  tensorboard: {logDir: /logs}\n",
    ),
]


@pytest.mark.parametrize(("replicas", "extra"), SHAPES)
def test_identity_is_the_hash_of_the_whole_document(replicas: str, extra: str) -> None:
    """The hash, fed in parts around the shared cluster, is byte for byte the one of the whole
    document; ``same_identity`` agrees with comparing hashes."""
    spec = job(replicas, extra)
    for attempt, where in ((0, addresses(spec)), (1, symbolic_addresses(spec))):
        configs = task_configs(spec, where, attempt)
        for config in configs.values():
            assert config.config_hash == reference_hash(config)
        others = task_configs(spec, addresses(spec), 0)
        for key, config in configs.items():
            for other in others.values():
                same = config.config_hash == other.config_hash
                assert config.same_identity(other) is same, (key, other.key)
            assert config.same_identity(others[key]) is (attempt == 0 and where == addresses(spec))


def test_tf_config_is_made_at_launch_from_one_cluster_per_role() -> None:
    spec = job("{chief: {count: 1}, worker: {count: 3}}")
    configs = task_configs(spec, addresses(spec), attempt=0)
    workers = [c for k, c in configs.items() if k.role is Role.WORKER]
    assert all(c.cluster is workers[0].cluster for c in workers)  # one cluster object per role
    assert all("TF_CONFIG" not in dict(c.own_env) for c in configs.values())
    assert json.loads(dict(workers[2].env)["TF_CONFIG"])["task"] == {"type": "worker", "index": 2}
