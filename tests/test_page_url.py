"""The daemon tells the backend where its status page is (``BackendPlugin.with_page_url``):
Mesos shows it as the framework's web UI link unless the config names one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tfdeclare.backends import registry
from tfdeclare.backends.mesos.config import MesosConfig
from tfdeclare.cli.common import Settings
from tfdeclare.cli.daemon_command import page_url
from tfdeclare.core.config import Config


def settings(backend: str, **backends: object) -> Settings:
    return Settings(Config(backend=backend, backends=backends), Path("/s"), Path("/st"), None)


def test_mesos_gets_the_page_unless_its_config_names_one() -> None:
    told = settings("mesos").with_page_url("http://h:8470/")
    assert told.backend_config == MesosConfig(webui_url="http://h:8470/")
    kept = settings("mesos", mesos=MesosConfig(webui_url="https://proxy/tf/")).with_page_url("http://h:8470/")
    assert kept.backend_config.webui_url == "https://proxy/tf/"


def test_a_backend_without_a_web_ui_is_unchanged() -> None:
    assert registry.plugin("local").with_page_url is None
    before = settings("local")
    assert before.with_page_url("http://h:8470/") is before


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8470/"),
        ("::1", "http://[::1]:8470/"),
        ("0.0.0.0", f"http://{socket.getfqdn()}:8470/"),
        ("tf.example.com", "http://tf.example.com:8470/"),
    ],
)
def test_page_url(host: str, url: str) -> None:
    assert page_url(host, 8470) == url
