"""Secrets: diagnostics never quote an environment value; output masks secret-looking names
and values; references to secrets are checked against the config, resolved only when a task
starts (the real CLI and local backend), and their values appear in no record, plan, status or
error. (Each backend's own reading of references is in ``tests/backend_conformance.py``.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cli
from tfdeclare.backends.secrets import agent_file_argv
from tfdeclare.core.enums import SecretSource
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.policy import PolicyConfig, policy_checks
from tfdeclare.core.spec.secrets import SecretRef, SecretsConfig, looks_secret, shown_env_value


def job(env: str, name: str = "s", command: str = "[sleep, '60']") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\nspec:\n  command: {command}\n"
        f"  env:\n{env}  replicas:\n    worker: {{count: 1, resources: {{cpus: 0.1, mem: 64}}}}\n"
    )


# values that are wrong in some way: none may appear in any diagnostic
BAD_VALUES = [
    "98765432109876",  # a number (the example)
    "98765.4321",
    "1e98765",  # infinite
    "[hunter2, x]",
    "{nested: hunter2pw}",
    "!!binary aHVudGVyMnB3",
    "!!int hunter2pw",
    '"a\\0hunter2pw"',
    "{secretRef: {file: hunter2pw}}",
    "{secretRef: {env: hunter2-pw}}",
]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_no_diagnostic_quotes_an_environment_value(value: str) -> None:
    text = job(f"    AWS_SECRET_ACCESS_KEY: {value}\n")
    result = load_file("s.yaml", text.encode())
    assert result.diagnostics, value
    secret = "hunter2" if "hunter2" in value else value.split(".", maxsplit=1)[0]
    for diagnostic in result.diagnostics:
        assert secret not in diagnostic.format(), diagnostic.format()
        assert "AWS_SECRET_ACCESS_KEY" in (diagnostic.json_path or ""), diagnostic.format()


MASKED = {  # name, value: shown as (sensitive)
    "by name": ("DB_PASS", "hunter2pw"),
    "by name, PASSWORD": ("MYSQL_PASSWORD", "x"),
    "by name, token": ("HF_TOKEN", "abc"),
    "by name, key": ("AWS_SECRET_ACCESS_KEY", "98765432109876"),
    "URL with a password": ("DATABASE_URL", "postgres://u:hunter3pw@h/db"),
    "AWS access key id": ("ID", "AKIAIOSFODNN7EXAMPLE"),
    "AWS secret key": ("S", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "GitHub token": ("G", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    "Slack token": ("SL", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    "JWT": ("J", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w"),
    "hex key": ("H", "4f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c"),
    # names and shapes a review found shown (2026-12-06)
    "by name, a key with a suffix": ("ENCRYPTION_KEY_B64", "c2VjcmV0"),
    "by name, a personal access token": ("GITHUB_PAT", "abc"),
    "by name, credentials": ("CREDS", "user:pw"),
    "by name, an SSH key": ("SSH_PRIVKEY", "-----BEGIN"),
    "by name, a kubeconfig": ("KUBECONFIG_DATA", "apiVersion: v1"),
    "a flag with its password": ("EXTRA_ARGS", "--verbose --password=hunter2"),
    "a flag with its token": ("OPTS", "-v --api-key abc123"),
}
SHOWN = {  # ordinary values stay readable
    "path": ("DATA_DIR", "/data/imagenet/train-00001-of-01024"),
    "words": ("SCHEDULE", "learning_rate_schedule_cosine_v2"),
    "image": ("IMAGE", "registry.example.com/tf:2.21.0-gpu"),
    "bucket": ("OUT", "gs://bucket/path/to/run-2024-05-01"),
    "number": ("LR", "0.1"),
    "URL without password": ("URL", "https://user@example.com/x"),
    "a flag without a secret": ("TRAIN_ARGS", "--epochs=10 --password-file /run/secrets/db"),
    "a monkey, not a key": ("MONKEY", "george"),
    "a path, not a PAT": ("PATH_PREFIX", "/opt/x"),
}


@pytest.mark.parametrize("case", sorted(MASKED))
def test_secret_names_and_value_shapes_are_masked(case: str) -> None:
    assert shown_env_value(*MASKED[case]) == "(sensitive)"


@pytest.mark.parametrize("case", sorted(SHOWN))
def test_ordinary_values_are_shown(case: str) -> None:
    name, value = SHOWN[case]
    assert not looks_secret(value) and shown_env_value(name, value) == value


def test_plan_shows_no_secret_in_any_format_and_plan_files_are_private(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    env = "".join(f"    {name}: {json.dumps(value)}\n" for name, value in MASKED.values())
    env += "".join(f"    {name}: {json.dumps(value)}\n" for name, value in SHOWN.values())
    (tmp_path / "specs" / "s.yaml").write_text(job(env))
    assert cli("apply", "specs", cwd=tmp_path).returncode == 0
    try:
        changed = env.replace("hunter2pw", "hunter9pw").replace("/data/imagenet", "/data/imagenet2")
        changed = changed.replace("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN8EXAMPLE")
        (tmp_path / "specs" / "s.yaml").write_text(job(changed))
        for output in ("text", "json", "markdown"):
            result = cli("plan", "specs", "-o", output, "--out", "p.json", cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            for _, value in MASKED.values():  # as a value, not inside a word (`x` of "exactly")
                shown = re.search(rf"(?<![\w./:-]){re.escape(value)}(?![\w./:-])", result.stdout)
                assert shown is None, (output, value)
            assert "(sensitive)" in result.stdout and "/data/imagenet2" in result.stdout
        assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o600
    finally:
        cli("delete", "--all", cwd=tmp_path)


def test_references_are_checked_against_the_configs_secrets_section() -> None:
    text = job(
        "    A: {secretRef: {env: HOME}}\n    B: {secretRef: {file: /etc/shadow}}\n"
        "    C: {secretRef: {name: db, key: password}}\n    D: {secretRef: {agentFile: /run/secrets/x}}\n"
        "    E: {secretRef: {env: WANDB_API_KEY}}\n    F: {secretRef: {file: /srv/secrets/../x}}\n"
    )
    refused = {
        d.json_path: d.message
        for d in load_file("s.yaml", text.encode(), policy_checks(PolicyConfig(), ())).diagnostics
    }
    assert refused == {
        "$.spec.env.A.secretRef": "A: the controller's variable HOME is not readable by specs (secrets.allowedEnv)",
        "$.spec.env.B.secretRef": "B: the controller's file /etc/shadow is not readable by specs (secrets.allowedFiles)",
        "$.spec.env.C.secretRef": "C: {name, key} references need secrets.dir in the config",
        "$.spec.env.E.secretRef": "E: the controller's variable WANDB_API_KEY is not readable by specs (secrets.allowedEnv)",
        "$.spec.env.F.secretRef": "F: the controller's file /srv/x is not readable by specs (secrets.allowedFiles)",
    }
    config = SecretsConfig(
        dir="/srv/secrets", allowed_env=("WANDB_*", "HOME"), allowed_files=("/etc/shadow", "/srv")
    )
    assert not load_file("s.yaml", text.encode(), policy_checks(PolicyConfig(), (), config)).diagnostics


def test_the_agent_file_wrapper_reads_files_on_the_tasks_machine(tmp_path: Path) -> None:
    (tmp_path / "a").write_text('it\'s a "secret" $(touch pwned)\n\n')
    refs = [
        ("A", SecretRef(SecretSource.AGENT_FILE, str(tmp_path / "a"))),
        ("B", SecretRef(SecretSource.ENV, "X")),
    ]
    argv = agent_file_argv(["python3", "-c", "import os; print(os.environ['A'])"], refs)
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == 'it\'s a "secret" $(touch pwned)\n'
    assert not (tmp_path / "pwned").exists()
    missing = agent_file_argv(["true"], [("A", SecretRef(SecretSource.AGENT_FILE, str(tmp_path / "none")))])
    result = subprocess.run(missing, capture_output=True, text=True, check=False)
    assert result.returncode == 126 and "cannot read the file of A" in result.stderr
    assert agent_file_argv(["true"], refs[1:]) == ["true"]


@pytest.mark.e2e  # the real CLI applies a real job and waits for it: 11 of make unit's 83 s
def test_references_resolve_at_launch_and_their_values_are_stored_nowhere(tmp_path: Path) -> None:
    """The real CLI and local backend: every kind of reference reaches the task; no file of the
    state or status folders, no plan and no output holds a value."""
    secrets = tmp_path / "secrets"
    (secrets / "db").mkdir(parents=True)
    (secrets / "db" / "password").write_text("named-Secret-4Wq\n")
    (tmp_path / "controller-file").write_text("file-Secret-5Er\n")
    (tmp_path / "agent-file").write_text("agent-Secret-6Ty\n")
    (tmp_path / "tfdeclare.yaml").write_text(
        f"secrets: {{dir: secrets, allowedEnv: [TFD_*], allowedFiles: [{tmp_path}/controller-file]}}\n"
    )
    values = {"N": "named-Secret-4Wq", "F": "file-Secret-5Er", "G": "agent-Secret-6Ty", "E": "env-Secret-7Ui"}
    out = tmp_path / "out.json"
    script = (
        f"import os, json; open({str(out)!r}, 'w').write(json.dumps({{k: os.environ[k] for k in 'NFGE'}}))"
    )
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "s.yaml").write_text(
        job(
            "    N: {secretRef: {name: db, key: password}}\n"
            f"    F: {{secretRef: {{file: {tmp_path}/controller-file}}}}\n"
            f"    G: {{secretRef: {{agentFile: {tmp_path}/agent-file}}}}\n"
            "    E: {secretRef: {env: TFD_SECRET}}\n",
            command=json.dumps(["python3", "-c", script]),
        )
    )
    env = {"TFD_SECRET": values["E"]}
    shown = [cli("plan", "specs", "--out", "p.json", cwd=tmp_path, env=env)]
    shown.append(cli("apply", "p.json", "--wait", "--timeout", "60", cwd=tmp_path, env=env))
    assert shown[-1].returncode == 0, shown[-1].stdout + shown[-1].stderr
    assert json.loads(out.read_text()) == values
    shown += [cli("status", "-o", "json", cwd=tmp_path), cli("status", cwd=tmp_path)]
    for path in [
        tmp_path / "p.json",
        *(tmp_path / ".tfdeclare").rglob("*"),
        *(tmp_path / "status").rglob("*"),
    ]:
        if path.is_file() and not path.is_symlink() and not path.name.endswith(".log"):
            data = path.read_text(errors="replace")
            assert not any(v in data for v in values.values()), path
    for result in shown:
        assert not any(v in result.stdout + result.stderr for v in values.values())
    # a secret that cannot be read: the launch fails, naming the variable, never a value
    (tmp_path / "secrets" / "db" / "password").unlink()
    (tmp_path / "specs" / "s.yaml").write_text(
        (tmp_path / "specs" / "s.yaml").read_text().replace("name: s", "name: t")
    )
    result = cli("apply", "specs", cwd=tmp_path, env=env)
    assert "N: cannot read the file" in result.stdout + result.stderr
    cli("delete", "--all", cwd=tmp_path)
