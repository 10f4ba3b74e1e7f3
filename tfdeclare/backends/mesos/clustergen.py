"""A job generation's cluster as the cluster server keeps it, and its credentials.

Each job generation (a job's attempt and the addresses of its tasks: ``clusterdoc.generation``)
has a random secret of its own (``secrets.token_urlsafe``, 256 bits). Each task of the
generation has a token and a key derived from it (``credentials``: HMAC-SHA256 of the secret
over the task's name, 128 bits each); its TaskInfo carries both (``bootstrap``): the token
travels in the request and names the task, the key never leaves the TaskInfo and the framework
process. An answer (``signed``) is the HMAC-SHA256 under the task's key of the document's exact
bytes, then those bytes: the bootstrap uses the document only once it has checked the MAC, so
an answer from anyone else (a local user who bound the port while no framework process held
it, anyone on the network path: the answer is plain HTTP) is refused, and one task's answer is
no other task's. The server looks tokens up by their SHA-256 (``token_digest``)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field

from tfdeclare.backends.mesos.bootstrap import MAC_BYTES
from tfdeclare.core.run.clusterdoc import Documents
from tfdeclare.core.run.tasks import ClusterSource, TaskKey

CREDENTIAL_CHARS = 22  # a token's and a key's length (base64url: 132 bits)
SECRET_MIN_CHARS = 43  # a generation's secret (token_urlsafe(32): 256 bits)


def credentials(secret: str, task: str) -> tuple[str, str]:
    """The token and the key of task ``task`` (``worker-3``) of the generation of ``secret``."""

    def derived(purpose: str) -> str:
        mac = hmac.new(secret.encode(), f"{purpose}\0{task}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode()[:CREDENTIAL_CHARS]

    return derived("token"), derived("key")


def signed(key: str, document: bytes) -> bytes:
    """An answer: the HMAC-SHA256 of ``document`` under ``key``, then ``document``."""
    mac = hmac.new(key.encode(), document, hashlib.sha256).digest()
    assert len(mac) == MAC_BYTES
    return mac + document


@dataclass
class Generation:
    """One job generation's cluster, its secret and the launched tasks yet to fetch it."""

    job: str
    name: str  # clusterdoc.generation
    secret: str = field(repr=False)
    source: ClusterSource
    # The launched tasks by name (worker-3): the id of the latest launch and the task's key
    tasks: dict[str, tuple[str, TaskKey]] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)
    documents: Documents | None = None  # made on the first fetch
    # Each task of the cluster by name: its token's digest (_key) and its key
    credentials: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)

    def derive(self) -> None:
        for key in self.source.addresses:
            token, mac_key = credentials(self.secret, key.name)
            self.credentials[key.name] = (token_digest(token), mac_key)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
