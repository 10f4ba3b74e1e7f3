"""Secrets in specs: environment values given by reference, and what output must never show.

An environment value is a string or ``{secretRef: {env: NAME}}``, ``{secretRef: {file: PATH}}``,
``{secretRef: {agentFile: PATH}}`` or ``{secretRef: {name: NAME, key: KEY}}``. The canonical spec,
job records, plans and status keep the *reference*; the backends read the value when a task
starts (``tfdeclare.backends.secrets``), so a changed secret restarts nothing (the task's
configuration names the reference) and reaches the tasks started after the change.

Masking: an environment value is shown as ``(sensitive)`` when its name looks like a secret's
(``DB_PASS``, ``API_TOKEN``, ...) or its value does (a URL with a password, a long string of
high entropy such as a cloud access key). Diagnostics never quote an environment value at all
(``tfdeclare.core.diagnostics.hides_value``).
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tfdeclare.core.enums import SecretSource

SENSITIVE = "(sensitive)"
_SENSITIVE_NAME = re.compile(
    r"SECRET|TOKEN|PASS(?:WORD|WD|PHRASE)?(?:$|_)|PASSW|PWD|CREDENTIAL|PRIVATE|PRIVKEY|API_?KEY|ACCESS_?KEY"
    r"|AUTH|(?:^|_)KEY(?:$|_)|SIGNING|SESSION|COOKIE|(?:^|_)DSN$|CONNECTION_?STRING|(?:^|_)CREDS?(?:$|_)"
    r"|(?:^|_)PAT$|KUBECONFIG",
    re.IGNORECASE,
)
_URL_WITH_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@")
# a command-line flag with its secret in the value: --password=x, --api-key x, -token=x
_FLAG_WITH_SECRET = re.compile(
    r"(?:^|\s)--?[A-Za-z0-9_-]*(?:password|passwd|secret|token|api[-_]?key)[= ]\S", re.IGNORECASE
)
_RUN = re.compile(r"[A-Za-z0-9]{16,}")
_MIN_ENTROPY_BITS = 3.3  # per character of a run: random keys score above, words below


@dataclass(frozen=True, slots=True)
class SecretRef:
    source: SecretSource
    where: str  # the variable, the file's path, or the secret's NAME
    key: str | None = None  # with SecretSource.NAME: the KEY

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SecretRef:
        """``{"secretRef": {...}}`` as the schema admits it."""
        ref = value["secretRef"]
        if "name" in ref:
            return cls(SecretSource.NAME, ref["name"], ref["key"])
        ((source, where),) = ref.items()
        return cls(SecretSource(source), where)

    def to_json(self) -> dict[str, Any]:
        if self.source is SecretSource.NAME:
            return {"secretRef": {"name": self.where, "key": self.key}}
        return {"secretRef": {self.source.value: self.where}}

    def located(self, secrets_dir: str | None) -> SecretRef:
        """A ``name``/``key`` reference as the file it names under ``secrets_dir``; others as
        they are. Raises ``LookupError`` when there is no such folder configured."""
        if self.source is not SecretSource.NAME:
            return self
        if secrets_dir is None:
            raise LookupError("no secrets.dir in the config for {secretRef: {name, key}}")
        assert self.key is not None
        return SecretRef(SecretSource.FILE, posixpath.join(secrets_dir, self.where, self.key))

    def __str__(self) -> str:
        if self.source is SecretSource.NAME:
            return f"secret {self.where}/{self.key}"
        return f"{_WORDS[self.source]} {self.where}"


_WORDS = {SecretSource.ENV: "variable", SecretSource.FILE: "file", SecretSource.AGENT_FILE: "agent file"}
EnvValue = str | SecretRef


@dataclass(frozen=True, slots=True)
class SecretsConfig:
    """The config's ``secrets`` section: where specs may take secrets from."""

    dir: str | None = None  # {name: N, key: K} -> <dir>/N/K
    allowed_env: tuple[str, ...] = ()  # glob patterns of controller variables a spec may name
    allowed_files: tuple[str, ...] = ()  # path prefixes of controller files a spec may name


def env_value(value: str | Mapping[str, Any]) -> EnvValue:
    """A canonical spec's environment value as a string or a ``SecretRef``."""
    return value if isinstance(value, str) else SecretRef.from_json(value)


@lru_cache(maxsize=1024)  # the same few names in every job of a plan
def is_sensitive_name(name: str) -> bool:
    return bool(_SENSITIVE_NAME.search(name))


def _entropy_bits(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _opaque(run: str) -> bool:
    classes = sum(1 for test in (str.islower, str.isupper, str.isdigit) if any(test(c) for c in run))
    return classes >= 2 and _entropy_bits(run) >= _MIN_ENTROPY_BITS


def looks_secret(value: str) -> bool:
    """A URL with a password, a command-line flag naming a secret with its value (``--password=x``),
    or a value holding an opaque token: 16 or more letters and digits
    in a row, of two kinds at least (lower, upper, digits), as varied as random keys are
    (names, words and paths are broken up by ``_ - . /`` or repeat their letters)."""
    return bool(_URL_WITH_PASSWORD.search(value) or _FLAG_WITH_SECRET.search(value)) or any(
        _opaque(run) for run in _RUN.findall(value)
    )


def shown_env_value(name: str, value: Any) -> Any:
    """An environment value as output may show it: references as they are (they hold no
    secret), secret-looking names or values as ``(sensitive)``."""
    if not isinstance(value, str):
        return value
    return SENSITIVE if is_sensitive_name(name) or looks_secret(value) else value
