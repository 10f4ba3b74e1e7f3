"""The TLS settings of the Mesos backend's connections (masters and agents over ``https://``).

This module owns what a master's certificate is checked with (``tls_verify``: nothing, the
``caFile`` bundle or httpx's own, which ``ssl_context`` makes for ``http.client`` too) and
the client certificate presented to masters that ask for one (``mesos.clientCertFile`` /
``clientKeyFile``): the private key's file is refused while others than its owner may read or
write it (as ssh refuses such a key), an encrypted key is refused rather than prompting, and
neither its content nor the library's view of it ever reaches an error or a log, only the
file's name.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfdeclare.backends.mesos.errors import ConfigError

if TYPE_CHECKING:
    from tfdeclare.backends.mesos.config import MesosConfig


@dataclass(frozen=True, slots=True)
class ClientCertificate:
    """A PEM certificate (chain) and its private key (in ``cert_file`` when ``key_file`` is None)."""

    cert_file: str
    key_file: str | None = None

    @property
    def key_holder(self) -> str:
        return self.key_file or self.cert_file


def client_certificate_of(config: MesosConfig) -> ClientCertificate | None:
    """The certificate ``mesos.clientCertFile`` (and ``clientKeyFile``) name, if any."""
    if config.client_cert_file is None:
        return None
    return ClientCertificate(config.client_cert_file, config.client_key_file)


def key_file_problem(path: str) -> str | None:
    """Why the file holding a private key may not be used (None: it may)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"cannot read the client key file {path!r}: {type(exc).__name__}"
    if not stat.S_ISREG(info.st_mode):
        return f"the client key file {path!r} is not a regular file"
    if info.st_mode & 0o077:
        return (
            f"the client key file {path!r} may be read or written by others than its owner "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod 600 it"
        )
    return None


def _no_password() -> bytes:
    raise ConfigError("an encrypted key")  # never asked for on a terminal


def load_client_certificate(context: ssl.SSLContext, client: ClientCertificate) -> None:
    """Present ``client`` from ``context``; ``ConfigError`` naming the files, never the key."""
    problem = key_file_problem(client.key_holder)
    if problem is not None:
        raise ConfigError(problem)
    try:
        context.load_cert_chain(client.cert_file, client.key_file, password=_no_password)
    except ConfigError:
        raise ConfigError(
            f"the client key file {client.key_holder!r} is encrypted: give an unencrypted key (chmod 600)"
        ) from None
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__  # the library's short name only
        raise ConfigError(
            f"cannot load the client certificate {client.cert_file!r} with its key "
            f"{client.key_holder!r}: {reason}"
        ) from None


def tls_verify(
    ca_file: str | None, insecure_skip_tls_verify: bool, client: ClientCertificate | None = None
) -> ssl.SSLContext | bool:
    """What httpx checks the master's certificate with: nothing (``tlsVerify: false``), the CA
    bundle of ``caFile``, or httpx's own (True); always a context when a client certificate is
    configured, which presents it. Raises ``ConfigError`` for an unusable file."""
    if client is None:
        if insecure_skip_tls_verify:
            return False
        if not ca_file:
            return True
    if insecure_skip_tls_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif ca_file:
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the CA file {ca_file!r}: {exc}") from None
    else:
        context = ssl_context(True)
    if client is not None:
        load_client_certificate(context, client)
    return context


def ssl_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """``tls_verify``'s answer as a context: True is httpx's default trust (``SSL_CERT_FILE``,
    ``SSL_CERT_DIR``, else certifi's bundle), so a plain ``http.client`` call trusts what the
    backend's client trusts. httpx is imported here only: ``plan``'s one call to an
    ``http://`` master imports none of it."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    import httpx

    return httpx.create_ssl_context(verify=verify)
