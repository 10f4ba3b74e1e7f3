"""The container tests' own ground: an engine answers, and the images built here run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_base_image_runs_python_with_host_networking_and_a_read_only_volume(
    docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    (tmp_path / "hello.txt").write_text("from the host\n")
    output = docker_client.containers.run(
        base_image,
        ["python3", "-c", "import socket; print(open('/in/hello.txt').read().strip(), socket.gethostname())"],
        network_mode="host",
        volumes={str(tmp_path): {"bind": "/in", "mode": "ro"}},
        remove=True,
    )
    import socket

    assert output.decode().split() == ["from", "the", "host", socket.gethostname()]


def test_a_second_build_of_the_base_image_is_the_cached_one(docker_client: Any, base_image: str) -> None:
    from tests import docker_env

    assert docker_env.base_image(docker_client) == base_image


@pytest.mark.tf
def test_tensorflow_image_imports_tensorflow(docker_client: Any, tensorflow_image: str) -> None:
    output = docker_client.containers.run(
        tensorflow_image,
        ["python", "-c", "import tensorflow as tf; print(tf.__version__)"],
        network_mode="host",
        remove=True,
    )
    assert output.decode().strip().splitlines()[-1].startswith("2.")
