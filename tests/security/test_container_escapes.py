"""Issue 20 with a real Docker engine: a container job that tries each escape never sees a host
file outside what policy allows.

- The escapes by path (``workingDir`` climbing out of the spec folder or through a link out of
  it, into the state folder, volumes of ``/``, the engine's socket or the state folder) are
  refused by ``apply``: no container is made.
- A job whose spec lies beside the default ``./.tfdeclare`` (its source folder holds the state
  folder) runs, sees its own files and the spec folder, and finds the state folder empty: no
  other job's record (with its plain environment values) and no log.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli
from tests.waiting import wait_until
from tfdeclare.backends.local.docker_runtime import owner_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SECRET = "plain-value-of-another-job"  # a marker: what no other task may read


def job(name: str, image: str, extra: str = "", command: str = "[sleep, '600']") -> str:
    return (
        f"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {{name: {name}}}\n"
        f"spec:\n  image: {image}\n  command: {command}\n  env: {{MARK: {SECRET}}}\n{extra}"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.2, mem: 128}}\n"
    )


@pytest.fixture
def ours(tmp_path: Path, docker_client: Any) -> Any:
    """The label filter of this project's containers; they are removed after the test."""
    filters = {"label": [f"tfdeclare.owner={owner_of(tmp_path / '.tfdeclare' / 'local')}"]}
    yield filters
    for container in docker_client.containers.list(ignore_removed=True, all=True, filters=filters):
        container.remove(force=True)


def test_every_escape_by_path_is_refused_and_no_container_is_made(
    tmp_path: Path, base_image: str, docker_client: Any, ours: Any
) -> None:
    (tmp_path / "specs").mkdir()
    os.symlink("/etc", tmp_path / "specs" / "etc")
    socket = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")
    escapes = {
        "climb": "  workingDir: ../../../../../etc\n",
        "link": "  workingDir: etc\n",
        "state": "  workingDir: ../.tfdeclare\n",
        "role": "",  # a role's own workingDir, below
        "root": "  volumes: [{hostPath: /, containerPath: /host}]\n",
        "socket": f"  volumes: [{{hostPath: {socket}, containerPath: /s}}]\n",
        "statevol": f"  volumes: [{{hostPath: {tmp_path / '.tfdeclare'}, containerPath: /s}}]\n",
    }
    config = f"policy: {{allowedHostPaths: [/, {tmp_path}]}}\n"  # only the fixed rules refuse
    (tmp_path / "tfdeclare.yaml").write_text(config)
    for name, extra in escapes.items():
        text = job(name, base_image, extra)
        if name == "role":
            text = text.replace("{count: 1,", "{count: 1, workingDir: ../../tmp,")
        (tmp_path / "specs" / f"{name}.yaml").write_text(text)
        result = cli("apply", "specs", cwd=tmp_path)
        assert result.returncode == 1, (name, result.stdout, result.stderr)
        assert f"specs/{name}.yaml:" in result.stderr and "Traceback" not in result.stderr, result.stderr
        (tmp_path / "specs" / f"{name}.yaml").unlink()
    assert not docker_client.containers.list(ignore_removed=True, all=True, filters=ours)


def test_a_source_folder_that_holds_the_state_folder_is_mounted_without_it(
    tmp_path: Path, base_image: str, docker_client: Any, ours: Any
) -> None:
    """The spec beside the default ``./.tfdeclare`` (``tfdeclare apply job.yaml``)."""
    state = tmp_path / ".tfdeclare"
    (tmp_path / "other.yaml").write_text(job("other", base_image))
    assert cli("apply", "other.yaml", cwd=tmp_path).returncode == 0
    records = state / "records.sqlite"  # the job records (shell/store.py)
    assert SECRET in records.read_bytes().decode(errors="replace")  # what a task must not read
    # It stays up until deleted: an ended container is removed by the next observe (the end of
    # apply may be one, on a loaded machine), and its mounts are looked at below.
    probe = (
        '[sh, -c, "ls -A $0 > seen.txt; cat $0/records.sqlite >> seen.txt 2>&1; '
        "ls $1 >> seen.txt; echo done >> seen.txt; trap 'exit 0' TERM; sleep 600 & wait\", "
        f"{state}, {tmp_path}]"
    )
    (tmp_path / "probe.yaml").write_text(job("probe", base_image, command=probe).replace(SECRET, "x"))
    applied = cli("apply", "probe.yaml", cwd=tmp_path)
    assert applied.returncode == 0, applied.stderr
    seen = state / "local" / "work" / "probe" / "worker-0" / "seen.txt"
    wait_until(lambda: seen.exists() and seen.read_text().endswith("done\n"), 60, what=f"{seen} done")
    text = seen.read_text()
    listing = text.splitlines()
    assert listing[0] == "local", text  # only the way down to its own working folder
    assert SECRET not in text and "No such file" in text, text
    assert "probe.yaml" in listing and "other.yaml" in listing, text  # its source folder it does see
    (container,) = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": [*ours["label"], "tfdeclare.job=probe"]}
    )
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts[str(state)]["Type"] == "tmpfs"
    assert mounts[str(tmp_path)]["RW"] is False
    assert json.loads(cli("status", "-o", "json", cwd=tmp_path).stdout)
    assert cli("delete", "--all", cwd=tmp_path).returncode == 0
