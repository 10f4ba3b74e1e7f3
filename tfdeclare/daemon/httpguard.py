"""Who may use the daemon's HTTP endpoints: the checks made before any endpoint runs.

- **Host** must be a name the daemon serves: ``localhost``, an IP literal (a DNS-rebinding
  page reaches us under its own *name*, never an address), this machine's host names, or one
  of ``daemon.serverNames``. Else 421.
- **Origin**, when a browser sends one with a ``POST``, must be one of those hosts, on our
  port (a page elsewhere cannot make us sync). Else 403.
- **Token**: with ``daemon.tokenFile``/``tokenEnv`` set, ``POST /sync`` needs
  ``Authorization: Bearer <token>`` (and so does every read — the page, ``/jobs``, logs,
  ``/metrics`` — with ``daemon.tokenForReads``; ``/healthz`` and ``/livez`` stay open for
  probes). Else 401. The daemon refuses to listen on anything but loopback with neither a
  token nor a webhook secret set (``check_listen``).
- **Webhooks**: with ``daemon.webhookSecretFile``/``webhookSecretEnv`` set, a ``POST /sync``
  that carries a git host's event or signature header (``webhook_auth.is_delivery``) needs no
  bearer token: the endpoint checks its signature (``webhook_auth.judge``). Any other
  ``POST /sync`` then needs the bearer token, and without one configured it is 401.
- **Size**: a request with a body over 1 KiB is refused (413) unread; none of ours has one,
  but a git host's delivery to ``POST /sync`` with a webhook secret configured may have up to
  ``daemon.webhookMaxBodyBytes`` (``body_limit``).
- **Numbers**: ``number`` reads a numeric query parameter: plain ASCII decimal digits in
  its range, given once; anything else is ``BadRequest`` (400), never a traceback.

Pure: the server passes the method, path, headers and its own port in.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from tfdeclare.daemon.webhook_auth import WebhookPolicy, is_delivery

SYNC_PATH = "/sync"
MAX_BODY = 1024
INT64_MAX = 2**63 - 1
UNGUARDED_READS = frozenset({"/healthz", "/livez"})  # with tokenForReads, every other GET needs the token


class BadRequest(Exception):
    """A request the endpoints answer 400 (the message says what is wrong)."""


def number(query: Mapping[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    """The query parameter ``name`` as a decimal number from ``low`` to ``high`` (``default``
    when absent); ``BadRequest`` for anything else: empty, a sign, spaces, other scripts'
    digits, a value out of range, the parameter given twice."""
    values = query.get(name)
    if values is None:
        return default
    if len(values) > 1:
        raise BadRequest(f"{name} is given {len(values)} times")
    text = values[0]
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()) or not low <= int(text) <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}, not {text[:40]!r}")
    return int(text)


@dataclass(frozen=True, slots=True)
class Refusal:
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    names: frozenset[str]  # host names served besides localhost and IP literals (lower case)
    token: str | None = None
    token_for_reads: bool = False
    webhook: WebhookPolicy | None = None  # signed git-host deliveries on POST /sync

    def __repr__(self) -> str:  # never the token nor the webhook secret
        return (
            f"AccessPolicy(names={sorted(self.names)}, token={'set' if self.token else None}, "
            f"webhook={self.webhook!r})"
        )


def body_limit(method: str, path: str, headers: Mapping[str, str], policy: AccessPolicy) -> int:
    """The largest body this request may have: ``MAX_BODY``, or the webhook bound for a
    git host's delivery to ``POST /sync`` when a webhook secret is configured."""
    if policy.webhook is not None and is_webhook_delivery(method, path, headers, policy):
        return policy.webhook.max_body
    return MAX_BODY


def is_webhook_delivery(method: str, path: str, headers: Mapping[str, str], policy: AccessPolicy) -> bool:
    """Whether ``POST /sync`` is to judge this request as a git host's delivery."""
    return policy.webhook is not None and method == "POST" and path == SYNC_PATH and is_delivery(headers)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_listen(host: str, policy: AccessPolicy) -> str | None:
    """Why the daemon may not listen on ``host`` (None: it may)."""
    if policy.token is None and policy.webhook is None and not is_loopback(host):
        return (
            f"refusing to serve the HTTP endpoints on {host} without a token: anyone who can reach it "
            "could trigger syncs and read every job's status. Set daemon.tokenFile or daemon.tokenEnv "
            "in the config (and daemon.tokenForReads to guard the page, /jobs, logs and /metrics "
            "too), or daemon.webhookSecretFile or webhookSecretEnv for git-host webhooks, "
            "or listen on 127.0.0.1"
        )
    return None


def _host_name(value: str) -> str | None:
    """The name part of a Host header or an origin's netloc (``[::1]:8470`` -> ``::1``)."""
    parts = urlsplit("//" + value.strip())
    try:
        parts.port  # noqa: B018 - a bad port is a bad header
    except ValueError:
        return None
    return parts.hostname


def _served(name: str | None, policy: AccessPolicy) -> bool:
    if not name:
        return False
    if name == "localhost" or name in policy.names:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def refusal(
    method: str, path: str, headers: Mapping[str, str], port: int, policy: AccessPolicy
) -> Refusal | None:
    """Why this request is refused (None: it may go on). ``headers`` with lower-case keys."""
    host = headers.get("host")
    if host is None or not _served(_host_name(host), policy):
        return Refusal(421, "this daemon does not serve that host name (daemon.serverNames in the config)")
    length = headers.get("content-length", "0").strip() or "0"
    limit = body_limit(method, path, headers, policy)
    # at most 18 ASCII digits before int(): a 5,000-digit length would raise in int()
    too_long = not (length.isascii() and length.isdigit() and len(length) <= 18) or int(length) > limit
    if too_long or "transfer-encoding" in headers:
        if limit > MAX_BODY:
            return Refusal(413, f"deliveries are limited to {limit} bytes (daemon.webhookMaxBodyBytes)")
        hint = ""
        if path == SYNC_PATH and is_delivery(headers) and policy.webhook is None:
            hint = "; git-host webhooks need daemon.webhookSecretFile or webhookSecretEnv in the config"
        return Refusal(413, f"request bodies are limited to {limit} bytes{hint}")
    origin = headers.get("origin")
    if method == "POST" and origin is not None:
        parts = urlsplit(origin)
        try:
            origin_port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            origin_port = None
        if not _served(parts.hostname, policy) or origin_port != port:
            return Refusal(403, "cross-origin requests are refused")
    if is_webhook_delivery(method, path, headers, policy):
        return None  # its signature is checked by the endpoint, on the body
    guarded = method == "POST" or (policy.token_for_reads and path not in UNGUARDED_READS)
    if guarded and policy.token is None and policy.webhook is not None and path == SYNC_PATH:
        return Refusal(
            401,
            "a git host's signed delivery is required (or a bearer token, with daemon.tokenFile "
            "or daemon.tokenEnv in the config)",
        )
    if guarded and policy.token is not None:
        given = headers.get("authorization", "")
        scheme, _, credential = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            credential.strip().encode(), policy.token.encode()
        ):
            return Refusal(401, "a valid token is required (Authorization: Bearer <token>)")
    return None
