"""HTTP Basic credentials for the Mesos master, kept out of logs, reprs and exceptions.

This module owns loading the secret (from a file or an environment variable) and turning
principal + secret into an httpx auth object. ``Secret`` masks itself in ``repr``/``str``;
only ``reveal()`` returns the value, and only the auth object calls it.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tfdeclare.backends.mesos.errors import ConfigError

if TYPE_CHECKING:
    import httpx

    from tfdeclare.backends.mesos.config import MesosConfig


class Secret:
    """A string that never shows itself in ``repr``, ``str`` or formatting."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("Secret cannot be pickled")


@dataclass(frozen=True, slots=True)
class Credentials:
    """Principal and secret for HTTP Basic auth (master ``--http_framework_authenticators=basic``)."""

    principal: str
    secret: Secret

    def httpx_auth(self) -> httpx.Auth:
        import httpx  # here: ``plan``'s call sends ``basic_header`` and imports no httpx

        return httpx.BasicAuth(self.principal, self.secret.reveal())

    def basic_header(self) -> str:
        """The ``Authorization`` header value (never log it)."""
        token = base64.b64encode(f"{self.principal}:{self.secret.reveal()}".encode()).decode("ascii")
        return f"Basic {token}"


def load_credentials(
    principal: str, *, secret_file: str | os.PathLike[str] | None = None, secret_env: str | None = None
) -> Credentials:
    """Credentials whose secret comes from a file (content, trailing newline stripped) or an
    environment variable (by name). Exactly one source must be given. Errors name the source,
    never the value."""
    if not principal or ":" in principal:
        raise ConfigError("the principal must be non-empty and must not contain ':'")
    if (secret_file is None) == (secret_env is None):
        raise ConfigError("give exactly one of secret_file and secret_env")
    if secret_file is not None:
        try:
            value = Path(secret_file).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"cannot read the secret file {os.fspath(secret_file)!r}: {type(exc).__name__}"
            ) from None
    else:
        assert secret_env is not None
        env_value = os.environ.get(secret_env)
        if env_value is None:
            raise ConfigError(f"environment variable {secret_env!r} is not set")
        value = env_value
    if not value:
        raise ConfigError("the secret is empty")
    return Credentials(principal, Secret(value))


def credentials_for(config: MesosConfig) -> Credentials | None:
    """The credentials ``mesos.principal`` with ``secretFile`` or ``secretEnv`` give (the
    backend's and ``plan``'s), or None when the config names no secret."""
    if config.principal is None or (config.secret_file is None and config.secret_env is None):
        return None
    return load_credentials(config.principal, secret_file=config.secret_file, secret_env=config.secret_env)
