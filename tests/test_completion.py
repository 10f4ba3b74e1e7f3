"""Shell completion: the generated bash script loaded in a real bash completes commands,
option values and job names; zsh's and fish's scripts are generated (and checked by their
shell where it is installed), and fish's protocol is answered by the real command."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.components import missing
from tests.conftest import cli, job_yaml

BIN = str(Path(sys.executable).parent)  # where the tfdeclare entry point is installed

BASH_COMPLETE = r"""
source <(tfdeclare completion bash) || exit 9
complete -p tfdeclare
c() {
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
    read -ra COMP_WORDS <<< "$COMP_LINE"
    [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
    _python_argcomplete tfdeclare "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    echo "$1 => $(printf '%s,' "${COMPREPLY[@]}")"
}
"""


def bash_complete(cwd: Path, *lines: str) -> list[str]:
    """Load the completion script in a real bash and complete each command line as bash's
    TAB does; the first line is ``complete -p tfdeclare``."""
    if shutil.which("bash") is None:
        pytest.fail("bash is needed")
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"]}
    script = BASH_COMPLETE + "".join(f'c "{line}"\n' for line in lines)
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "status").mkdir()
    for name in ("bert", "vit"):
        (tmp_path / "status" / f"{name}.yaml").write_text(f"name: {name}\n")
    return tmp_path


def test_bash_completes_commands_values_and_job_names(project: Path) -> None:
    lines = bash_complete(
        project, "tfdeclare va", "tfdeclare plan -o ", "tfdeclare status b", "tfdeclare completion f"
    )
    assert lines[0].startswith("complete ") and lines[0].endswith(" tfdeclare")
    assert "-F _python_argcomplete" in lines[0]
    assert "tfdeclare va => validate ," in lines
    assert "tfdeclare plan -o  => text,json,yaml,markdown," in lines
    assert "tfdeclare status b => bert ," in lines
    assert "tfdeclare completion f => fish ," in lines


def _fish_offers(project: Path, answer: Path, line: str) -> list[str]:
    """What the command itself offers fish for ``line`` (argcomplete's protocol)."""
    subprocess.run(
        [sys.executable, "-m", "tfdeclare"],
        cwd=project,
        env={
            **os.environ,
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_SHELL": "fish",
            "_ARGCOMPLETE_IFS": "\n",
            "_ARGCOMPLETE_DFS": "\t",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
        },
        capture_output=True,
        timeout=60,
        check=False,
    )
    return [entry.split("\t")[0] for entry in answer.read_text().splitlines()]


def test_fish_is_answered_by_the_command_itself(project: Path, tmp_path: Path) -> None:
    script = cli("completion", "fish", cwd=project)
    assert script.returncode == 0 and "complete --command tfdeclare" in script.stdout
    answer = tmp_path / "answer"
    line = "tfdeclare logs "
    offered = _fish_offers(project, answer, line)
    assert {"bert", "vit", "--follow"} <= set(offered), offered


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(project: Path, shell: str) -> None:
    script = cli("completion", shell, cwd=project)
    assert script.returncode == 0 and "tfdeclare" in script.stdout
    if shutil.which(shell) is None:
        missing(f"{shell} is not installed: its script is only generated here")
    checked = subprocess.run([shell, "-n"], input=script.stdout, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr


def test_an_unknown_shell_is_a_usage_error(project: Path) -> None:
    result = cli("completion", "powershell", cwd=project)
    assert result.returncode == 1 and "invalid choice" in result.stderr


@pytest.mark.slow
@pytest.mark.e2e
def test_task_option_completes_from_the_jobs_tasks(workdir: Path) -> None:
    (workdir / "specs" / "a.yaml").write_text(job_yaml("a", workers=2, command="[python, -c, pass]"))
    assert cli("apply", "specs", "--wait", "--timeout", "60", cwd=workdir).returncode == 0
    lines = bash_complete(
        workdir,
        "tfdeclare logs a --task ",
        "tfdeclare logs a --task worker-1",
        "tfdeclare logs a --task worker:",
        "tfdeclare logs nope --task ",
    )
    assert "tfdeclare logs a --task  => worker-0,worker-1," in lines  # as every output names them
    assert "tfdeclare logs a --task worker-1 => worker-1 ," in lines  # the one match, and a space
    # the alias, once begun: bash breaks words at ':', so what follows it is offered
    assert "tfdeclare logs a --task worker: => 0,1," in lines
    assert "tfdeclare logs nope --task  => ," in lines  # nothing offered


def test_bash_completes_schema_names_and_explains_field_paths(project: Path) -> None:
    (project / "specs.yaml").write_text("a file that must not be offered\n")
    lines = bash_complete(
        project,
        "tfdeclare schema ",
        "tfdeclare schema s",
        "tfdeclare expl",
        "tfdeclare explain me",
        "tfdeclare explain spec.repl",
        "tfdeclare explain spec.replicas.worker.co",
        "tfdeclare explain spec.replicas.worker.count",
        "tfdeclare explain metadata.labels.",
        "tfdeclare explain spec.nope.",
        "tfdeclare explain --schema config lo",
    )
    assert "tfdeclare schema  => -h,--help,job,status,config," in lines  # never file names
    assert "tfdeclare schema s => status ," in lines
    assert "tfdeclare expl => explain ," in lines
    # a field that alone matches comes with its fields: the shell stops after it, no space
    assert "tfdeclare explain me => metadata,metadata.name,metadata.labels," in lines
    assert (
        "tfdeclare explain spec.repl => spec.replicas,spec.replicas.chief,spec.replicas.ps,"
        "spec.replicas.worker,spec.replicas.evaluator,"
    ) in lines
    assert (
        "tfdeclare explain spec.replicas.worker.co => spec.replicas.worker.count,spec.replicas.worker.command,"
        in lines
    )
    assert "tfdeclare explain spec.replicas.worker.count => spec.replicas.worker.count ," in lines  # a leaf
    assert "tfdeclare explain metadata.labels. => ," in lines  # any key: nothing to offer
    assert "tfdeclare explain spec.nope. => ," in lines
    assert (
        "tfdeclare explain --schema config lo => local,local.runtime,local.pullTimeoutSeconds,local.cpus,"
        in "\n".join(lines)
    )


def test_fish_is_answered_field_paths_by_the_command_itself(project: Path, tmp_path: Path) -> None:
    answer = tmp_path / "answer"
    line = "tfdeclare explain spec.replicas.worker.resources."
    offered = _fish_offers(project, answer, line)
    prefix = "spec.replicas.worker.resources."
    assert offered == [prefix + "cpus", prefix + "mem", prefix + "gpus"], offered
