"""A real image registry for tests: Debian's ``docker-registry`` package (the Distribution
registry, ``docker-registry serve CONFIG``) with a config of our own: storage in a test
folder, HTTP on a free loopback port. The Docker engine treats registries on 127.0.0.0/8 as
insecure-allowed by default, so it pulls from it over plain HTTP without being configured.

``registry_server(folder)`` yields ``127.0.0.1:PORT`` once ``GET /v2/`` answers and stops the
process group after; with ``users`` it asks for their passwords (htpasswd, basic auth).
Without the package the test is skipped with one line, except under ``CI=true``, where it
fails (``.ci/run`` installs it).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.components import missing, stop_group
from tests.waiting import wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(address: str) -> bool:
    """``GET /v2/`` answers: 200, or 401 when it asks for a password."""
    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as err:
        return err.code == 401
    except (urllib.error.URLError, OSError):
        return False


def _htpasswd(users: dict[str, str]) -> str:
    """An htpasswd file's text (bcrypt, which is all the registry reads)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt
    except ImportError:
        missing("needs bcrypt password hashes for the registry: Python's crypt module is missing")
    salt = crypt.mksalt(crypt.METHOD_BLOWFISH)
    return "".join(f"{user}:{crypt.crypt(password, salt)}\n" for user, password in users.items())


@contextmanager
def registry_server(
    folder: Path, users: dict[str, str] | None = None, timeout: float = 30.0
) -> Iterator[str]:
    """Start a registry storing under ``folder`` (asking for these users' passwords, basic
    auth, when ``users`` are given); yield its ``127.0.0.1:PORT``."""
    binary = shutil.which("docker-registry")
    if binary is None:
        missing(
            "needs a real image registry: the docker-registry package is missing (apt-get install docker-registry)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{_free_port()}"
    config = folder / "config.yml"
    auth = ""
    if users:
        (folder / "htpasswd").write_text(_htpasswd(users))
        auth = f"auth: {{htpasswd: {{realm: tfdeclare-test, path: {folder / 'htpasswd'}}}}}\n"
    config.write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: '{address}'}}\n" + auth
    )
    log = (folder / "registry.log").open("wb")
    process = subprocess.Popen(
        [binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_until(  # it answers once it listens, or it has died
            lambda: _answers(address),
            timeout,
            what="docker-registry to answer",
            stop=lambda: (
                None
                if process.poll() is None
                else f"docker-registry exited with {process.returncode}: see {folder / 'registry.log'}"
            ),
        )
        yield address
    finally:
        stop_group(process)
        log.close()
