"""`make images` (tools/build_images.py) builds images/tf-cpu on the locally made test base
(no registry here): pip in the build reaches PyPI through this machine's network and trusts
its CA bundle (extra-ca.crt), and the image runs TensorFlow with the example scripts, and TensorBoard. The
engine's layer cache makes a repeated run quick."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO
from tests.docker_env import HOST_CA_BUNDLE

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.mark.timeout(1500)  # the first build downloads TensorFlow
def test_make_images_builds_tf_cpu_on_the_test_base(docker_client: Any, base_image: str) -> None:
    recipe = (REPO / "images" / "tf-cpu" / "Dockerfile").read_bytes() + base_image.encode()
    tag = f"tfdeclare-test-examples:{hashlib.sha256(recipe).hexdigest()[:16]}"
    ca = ["--ca-file", str(HOST_CA_BUNDLE)] if HOST_CA_BUNDLE.exists() else []
    built = subprocess.run(
        [sys.executable, "tools/build_images.py", "tf-cpu", "--base", base_image, "--tag", tag, *ca],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert f"built {tag}" in built.stdout
    output = docker_client.containers.run(
        tag,
        [
            "python",
            "-c",
            "import os, tensorflow as tf; "
            "print(tf.__version__, os.getuid(), os.path.exists('/tmp/build'), 'PIP_CERT' in os.environ, os.listdir())",
        ],
        remove=True,
        network_mode="none",
    )
    version, uid, ca_left, pip_cert, scripts = output.decode().strip().split(" ", 4)
    assert (version, uid) == ("2.21.0", "10001")
    assert (ca_left, pip_cert) == ("False", "False"), "the build's CA is pip's during the build only"
    assert "mwms_train.py" in scripts
    board = docker_client.containers.run(tag, ["tensorboard", "--version"], remove=True, network_mode="none")
    assert board.decode().strip().startswith("2.21"), "spec.tensorboard runs `tensorboard` in the image"
