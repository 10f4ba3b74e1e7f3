"""A client certificate for masters that ask for one (``mesos.clientCertFile`` /
``clientKeyFile``, issue 33): the scheduler client (subscription and pipelined calls), ``plan``'s
read-only ``GET_AGENTS`` and the config file, against a local TLS server that requires a
certificate a self-made CA signed (``openssl``); the key file refused while others may read
it or when encrypted, and never shown.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.conftest import cli, job_yaml
from tests.mesos_script_server import Reply, Request, ScriptServer, new_uuid
from tfdeclare.backends import registry
from tfdeclare.backends.mesos import BaseHandler, ClientConfig, FrameworkInfo, SchedulerClient
from tfdeclare.backends.mesos.errors import ConfigError, MesosConnectionError, SubscribeTimeoutError
from tfdeclare.backends.mesos.readonly import ask
from tfdeclare.backends.mesos.tls import ClientCertificate, tls_verify

FAST: dict[str, Any] = {
    "backoff_initial": 0.05,
    "backoff_cap": 0.2,
    "backoff_jitter": 0.0,
    "connect_timeout": 2.0,
    "call_timeout": 5.0,
    "subscribe_timeout": 5.0,
}


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two self-made CAs; the first signed the master's certificate (127.0.0.1) and a client
    certificate, the second another client certificate. Keys are 0600."""
    if shutil.which("openssl") is None:
        missing("openssl is not installed")
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=tfdeclare test {ca}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                 "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"))  # fmt: skip
    leaves = (
        ("master", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "ca", "extendedKeyUsage=clientAuth\n"),
        ("stranger", "other-ca", "extendedKeyUsage=clientAuth\n"),
    )
    for leaf, ca, ext in leaves:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={leaf}", "-keyout", str(d / f"{leaf}.key"),
                 "-out", str(d / f"{leaf}.csr"))  # fmt: skip
        (d / f"{leaf}.ext").write_text(ext + "basicConstraints=CA:FALSE\n")
        _openssl("x509", "-req", "-in", str(d / f"{leaf}.csr"), "-CA", str(d / f"{ca}.pem"), "-CAkey",
                 str(d / f"{ca}.key"), "-CAcreateserial", "-days", "2", "-extfile", str(d / f"{leaf}.ext"),
                 "-out", str(d / f"{leaf}.pem"))  # fmt: skip
        (d / f"{leaf}.key").chmod(0o600)
    return d


def cert(pki: Path, leaf: str) -> ClientCertificate:
    return ClientCertificate(str(pki / f"{leaf}.pem"), str(pki / f"{leaf}.key"))


AGENTS = {
    "type": "GET_AGENTS",
    "get_agents": {
        "agents": [
            {
                "agent_info": {"id": {"value": "S1"}, "hostname": "127.0.0.1"},
                "total_resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}}],
            }
        ]
    },
}


def _operator(req: Request) -> Reply:
    if req.type == "GET_AGENTS":
        return Reply(200, json.dumps(AGENTS).encode(), {"Content-Type": "application/json"})
    return Reply(202)


@pytest.fixture
def master(pki: Path) -> Iterator[ScriptServer]:
    """A master on TLS that refuses any client without a certificate the first CA signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "master.pem", pki / "master.key")
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(pki / "ca.pem")
    srv = ScriptServer(tls=ctx)
    srv.on_call = _operator
    yield srv
    srv.close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., SchedulerClient]]:
    clients: list[SchedulerClient] = []

    def make(master: str, **overrides: Any) -> SchedulerClient:
        fw = FrameworkInfo(user="svc", name="tfdeclare-test")
        client = SchedulerClient(
            ClientConfig(master=master, framework=fw, **{**FAST, **overrides}), BaseHandler()
        )
        clients.append(client)
        client.start()
        return client

    yield make
    for c in clients:
        c.stop()


def test_the_scheduler_client_presents_the_configured_certificate(
    pki: Path, master: ScriptServer, make_client: Callable[..., SchedulerClient]
) -> None:
    """Without one, or with one another CA signed, the master's handshake refuses the client;
    with the configured one it subscribes and the pipelined calls go over the same TLS."""
    ca = str(pki / "ca.pem")
    for presented in (None, cert(pki, "stranger")):
        refused = make_client(master.url, ca_file=ca, client_certificate=presented)
        with pytest.raises(SubscribeTimeoutError) as info:
            refused.wait_subscribed(0.5)
        assert isinstance(info.value.last_error, MesosConnectionError), info.value.last_error
        refused.stop()
    assert master.requests == []  # no request got through the handshake
    client = make_client(master.url, ca_file=ca, client_certificate=cert(pki, "client"))
    assert client.wait_subscribed(5) == "fw-1"
    client.revive()
    assert client.acknowledge_many([("a", "t", new_uuid())]) == 1  # the pipelined connection too
    assert {r.type for r in master.requests} >= {"SUBSCRIBE", "REVIVE", "ACKNOWLEDGE"}
    # the key in the certificate's own file (no key file) works as well
    both = pki / "client-both.pem"
    both.write_bytes((pki / "client.pem").read_bytes() + (pki / "client.key").read_bytes())
    both.chmod(0o600)
    one_file = make_client(master.url, ca_file=ca, client_certificate=ClientCertificate(str(both)))
    assert one_file.wait_subscribed(5) == "fw-1"


def test_plans_read_only_call_presents_the_certificate(pki: Path, master: ScriptServer) -> None:
    ca = str(pki / "ca.pem")
    with pytest.raises(MesosConnectionError):
        ask(master.url, "GET_AGENTS", timeout_s=5, ca_file=ca)
    body = ask(master.url, "GET_AGENTS", timeout_s=5, ca_file=ca, client_certificate=cert(pki, "client"))
    assert body == AGENTS
    # tlsVerify false still presents the certificate (the master's own is then not checked)
    body = ask(master.url, "GET_AGENTS", timeout_s=5, insecure_skip_tls_verify=True,
               client_certificate=cert(pki, "client"))  # fmt: skip
    assert body == AGENTS


def test_plan_reads_the_files_from_the_config_and_asks_with_them(
    pki: Path, master: ScriptServer, tmp_path: Path
) -> None:
    """The command line: relative file names from the config's folder; plan's warning comes
    from the master's answer (1 cpu), so the question went through the TLS handshake."""
    for name in ("ca.pem", "client.pem", "client.key"):
        shutil.copy(pki / name, tmp_path / name)
    (tmp_path / "client.key").chmod(0o600)
    (tmp_path / "specs").mkdir()
    job = "worker: {count: 1, resources: {cpus: 2, mem: 256}}"
    (tmp_path / "specs" / "one.yaml").write_text(job_yaml("cert-plan", roles=job))
    (tmp_path / "tfdeclare.yaml").write_text(
        f"backend: mesos\nmesos: {{master: '{master.url}', caFile: ca.pem, clientCertFile: client.pem, "
        "clientKeyFile: client.key}\n"
    )
    result = cli("plan", "specs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "a worker task needs cpus 2" in result.stderr and "has cpus 1" in result.stderr, result.stderr
    assert "could not ask" not in result.stderr
    assert [r.type for r in master.requests] == ["GET_AGENTS"]
    # a key others may read: plan says why it could not ask, naming the file, never the key
    (tmp_path / "client.key").chmod(0o644)
    loose = cli("plan", "specs", cwd=tmp_path)
    assert loose.returncode == 0, loose.stderr
    assert "could not ask" in loose.stderr and "client.key" in loose.stderr and "chmod 600" in loose.stderr
    assert "PRIVATE KEY" not in loose.stderr
    assert len(master.requests) == 1


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620], ids=lambda mode: f"{mode:04o}")
def test_a_key_file_others_may_read_or_write_is_refused(pki: Path, tmp_path: Path, mode: int) -> None:
    key = tmp_path / "client.key"
    shutil.copy(pki / "client.key", key)
    key.chmod(mode)
    with pytest.raises(ConfigError) as info:
        tls_verify(None, False, ClientCertificate(str(pki / "client.pem"), str(key)))
    assert f"mode {mode:04o}" in str(info.value) and str(key) in str(info.value)
    assert "PRIVATE KEY" not in str(info.value)


def test_an_encrypted_key_is_refused_without_asking_for_its_password(pki: Path, tmp_path: Path) -> None:
    key = tmp_path / "encrypted.key"
    _openssl("pkey", "-in", str(pki / "client.key"), "-aes256", "-passout", "pass:hunter22", "-out", str(key))
    key.chmod(0o600)
    with pytest.raises(ConfigError, match="is encrypted") as info:
        tls_verify(None, False, ClientCertificate(str(pki / "client.pem"), str(key)))
    assert "hunter22" not in str(info.value) and "PRIVATE KEY" not in str(info.value)


def test_a_key_that_is_not_the_certificates_is_refused_naming_both_files(pki: Path) -> None:
    wrong = ClientCertificate(str(pki / "client.pem"), str(pki / "stranger.key"))
    with pytest.raises(ConfigError) as info:
        tls_verify(str(pki / "ca.pem"), False, wrong)
    message = str(info.value)
    assert "client.pem" in message and "stranger.key" in message and "PRIVATE KEY" not in message, message


def test_without_a_client_certificate_the_verification_settings_are_as_before(pki: Path) -> None:
    assert tls_verify(None, False) is True and tls_verify(None, True) is False
    assert isinstance(tls_verify(str(pki / "ca.pem"), False), ssl.SSLContext)
    context = tls_verify(None, True, cert(pki, "client"))
    assert isinstance(context, ssl.SSLContext) and context.verify_mode is ssl.CERT_NONE


def test_the_config_takes_the_files_from_its_folder_and_a_key_needs_its_certificate() -> None:
    text = "backend: mesos\nmesos: {clientCertFile: tls/client.pem, clientKeyFile: /keys/client.key}\n"
    config, problems = registry.parse_config_file("c.yaml", text.encode(), "/cfg")
    assert problems == [] and config is not None
    mesos = config.backends["mesos"]
    assert (mesos.client_cert_file, mesos.client_key_file) == ("/cfg/tls/client.pem", "/keys/client.key")
    _, problems = registry.parse_config_file(
        "c.yaml", textwrap.dedent("mesos:\n  clientKeyFile: k\n").encode(), "/"
    )
    assert [p.format() for p in problems] == [
        "c.yaml:1:1: error: missing required field 'clientCertFile' (at $.mesos)"
    ]
