"""Git-host deliveries on ``POST /sync``: which host sent one, whether it is signed with the
daemon's secret (``daemon.webhookSecretFile`` / ``webhookSecretEnv``), and what it asks for.

A request is a **delivery** when it carries a git host's event or signature header
(``is_delivery``). ``judge`` checks its signature on the raw body first, and only a delivery
signed with the secret is parsed:

- **GitHub**: ``X-GitHub-Event``, ``X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>``;
- **Gitea, Forgejo, Gogs**: ``X-Gitea-Event`` (``X-Forgejo-Event``, ``X-Gogs-Event``; they also
  send ``X-GitHub-Event``, so they are told apart first), ``X-Gitea-Signature: <hex HMAC>``
  (or ``X-Forgejo-Signature``, ``X-Gogs-Signature``, ``X-Hub-Signature-256``);
- **GitLab**: ``X-Gitlab-Event``, ``X-Gitlab-Token: <the secret itself>``;
- **Bitbucket** Cloud and Server/Data Center: ``X-Event-Key``, ``X-Hub-Signature:
  sha256=<hex HMAC>``.

Every comparison is ``hmac.compare_digest`` (constant time); SHA-1 signatures are not taken.
A missing or wrong signature is ``REFUSED`` (401) and nothing else is looked at. A signed
delivery is then a ``PING`` (GitHub ``ping``, Bitbucket ``diagnostics:ping``: 200, nothing
done), a ``SYNC`` (a push that touches the watched branch, or any push in folder mode: 202, a
sync), ``IGNORED`` (another branch, a tag, another event: 202, the answer says why), or
``MALFORMED`` (a body that is not a JSON object: 400). Gitea's and GitLab's "Test" buttons send
a push of the latest commit, judged as one (a sync changes nothing when nothing changed).

The body is JSON (``application/json``); GitHub's ``application/x-www-form-urlencoded``
(``payload=<JSON>``) is read too. Pure: the server passes the headers (lower-case names), the
body and the policy in. The secret is never part of a verdict, a repr or a message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs

DEFAULT_MAX_BODY = 1024 * 1024  # daemon.webhookMaxBodyBytes


class GitHost(StrEnum):
    GITHUB = "github"
    GITEA = "gitea"  # Forgejo and Gogs too
    GITLAB = "gitlab"
    BITBUCKET = "bitbucket"  # Cloud, Server and Data Center


class Outcome(StrEnum):
    """What a delivery comes to (its HTTP status is ``Verdict.code``)."""

    SYNC = "sync"
    IGNORED = "ignored"
    PING = "ping"
    REFUSED = "refused"  # no signature, or a wrong one
    MALFORMED = "malformed"  # signed, but not a JSON object


_CODES = {
    Outcome.SYNC: 202,
    Outcome.IGNORED: 202,
    Outcome.PING: 200,
    Outcome.REFUSED: 401,
    Outcome.MALFORMED: 400,
}
_FORM = "application/x-www-form-urlencoded"

_GITEA_EVENTS = ("x-gitea-event", "x-forgejo-event", "x-gogs-event")
_GITEA_SIGNATURES = ("x-gitea-signature", "x-forgejo-signature", "x-gogs-signature", "x-hub-signature-256")
_EVENT_HEADERS = (*_GITEA_EVENTS, "x-gitlab-event", "x-github-event", "x-event-key")
_SIGNATURE_HEADERS = (*_GITEA_SIGNATURES, "x-gitlab-token", "x-hub-signature")


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """How the daemon takes deliveries: the shared ``secret``, the watched ``branch`` (None:
    folder mode, where every push syncs) and the largest body read (``max_body`` bytes)."""

    secret: str
    branch: str | None = None
    max_body: int = DEFAULT_MAX_BODY

    def __repr__(self) -> str:  # never the secret
        return f"WebhookPolicy(secret='***', branch={self.branch!r}, max_body={self.max_body})"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reason: str  # for a person (the answer's JSON and the log)
    host: GitHost | None = None
    event: str | None = None
    delivery: str | None = None  # the host's delivery id, when it sends one

    @property
    def code(self) -> int:
        return _CODES[self.outcome]

    def answer(self, sync: str | None = None) -> dict[str, Any]:
        """The JSON answer; ``sync`` is ``requested`` or ``coalesced`` for a ``SYNC``."""
        body: dict[str, Any] = {}
        if self.outcome is Outcome.REFUSED or self.outcome is Outcome.MALFORMED:
            body["error"] = self.reason
        elif self.outcome is Outcome.SYNC:
            body["sync"] = sync
            body["reason"] = self.reason
        elif self.outcome is Outcome.PING:
            body["ping"] = "ok"
            body["reason"] = self.reason
        else:
            body["ignored"] = self.reason
        body.update({"host": self.host, "event": self.event, "delivery": self.delivery})
        return {k: v for k, v in body.items() if v is not None}


def is_delivery(headers: Mapping[str, str]) -> bool:
    """Whether the request carries a git host's event or signature header."""
    return any(name in headers for name in (*_EVENT_HEADERS, *_SIGNATURE_HEADERS))


def host_of(headers: Mapping[str, str]) -> GitHost | None:
    """The git host that sent a delivery, by its headers (None: none we know)."""
    if "x-gitlab-event" in headers or "x-gitlab-token" in headers:
        return GitHost.GITLAB
    if any(name in headers for name in (*_GITEA_EVENTS, *_GITEA_SIGNATURES[:3])):  # not X-Hub-*
        return GitHost.GITEA
    if "x-github-event" in headers:
        return GitHost.GITHUB
    if "x-event-key" in headers:
        return GitHost.BITBUCKET
    return None


def _event(host: GitHost, headers: Mapping[str, str]) -> str | None:
    names = {
        GitHost.GITHUB: ("x-github-event",),
        GitHost.GITEA: _GITEA_EVENTS,
        GitHost.GITLAB: ("x-gitlab-event",),
        GitHost.BITBUCKET: ("x-event-key",),
    }[host]
    return next((headers[n].strip() for n in names if n in headers), None)


def _delivery_id(headers: Mapping[str, str]) -> str | None:
    for name in (
        "x-github-delivery",
        "x-gitea-delivery",
        "x-forgejo-delivery",
        "x-gogs-delivery",
        "x-gitlab-event-uuid",
        "x-request-uuid",  # Bitbucket Cloud
        "x-request-id",  # Bitbucket Server
    ):
        if name in headers:
            return headers[name].strip()[:100]
    return None


def _hmac_matches(given: str, body: bytes, secret: str, prefix: str) -> bool:
    expected = prefix + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    text = given.strip()
    if prefix and text[: len(prefix)].lower() == prefix:
        text = prefix + text[len(prefix) :]
    return hmac.compare_digest(expected.encode(), text.lower().encode("utf-8", "replace"))


def signature_problem(host: GitHost, headers: Mapping[str, str], body: bytes, secret: str) -> str | None:
    """Why this delivery from ``host`` is not signed with ``secret`` (None: it is)."""
    if host is GitHost.GITLAB:
        token = headers.get("x-gitlab-token")
        if token is None:
            return "no X-Gitlab-Token header: set the webhook's secret token in GitLab"
        if not hmac.compare_digest(token.strip().encode("utf-8", "replace"), secret.encode()):
            return "wrong X-Gitlab-Token"
        return None
    if host is GitHost.GITEA:
        header = next((n for n in _GITEA_SIGNATURES if n in headers), None)
        if header is None:
            return "no X-Gitea-Signature header: set the webhook's secret in Gitea"
        prefix = "sha256=" if header == "x-hub-signature-256" else ""
        return None if _hmac_matches(headers[header], body, secret, prefix) else f"wrong {_title(header)}"
    header = "x-hub-signature-256" if host is GitHost.GITHUB else "x-hub-signature"
    given = headers.get(header)
    if given is None:
        return f"no {_title(header)} header: set the webhook's secret in {_HOST_NAMES[host]}"
    if not given.strip().lower().startswith("sha256="):
        return f"{_title(header)} must be sha256=<HMAC-SHA256 of the body>"
    return None if _hmac_matches(given, body, secret, "sha256=") else f"wrong {_title(header)}"


_HOST_NAMES = {
    GitHost.GITHUB: "GitHub",
    GitHost.GITEA: "Gitea",
    GitHost.GITLAB: "GitLab",
    GitHost.BITBUCKET: "Bitbucket",
}


def _title(header: str) -> str:
    return "-".join("GitHub" if p == "github" else p.capitalize() for p in header.split("-"))


def _payload(headers: Mapping[str, str], body: bytes) -> dict[str, Any] | None:
    """The delivery's JSON object (None: not one)."""
    try:
        text = body.decode("utf-8")
        if headers.get("content-type", "").split(";")[0].strip().lower() == _FORM:
            text = parse_qs(text, max_num_fields=10).get("payload", [""])[0]
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _pushed_refs(host: GitHost, event: str, payload: Mapping[str, Any]) -> list[str] | None:
    """The refs a push moved (``refs/heads/B``, ``refs/tags/T``); None: not a push."""
    if host is GitHost.GITHUB or host is GitHost.GITEA:
        return [payload["ref"]] if event == "push" and isinstance(payload.get("ref"), str) else None
    if host is GitHost.GITLAB:  # Push Hook, System Hook; tests of some versions say Push Event
        pushed = payload.get("object_kind") == "push" and isinstance(payload.get("ref"), str)
        return [payload["ref"]] if pushed else None
    if event == "repo:push":  # Bitbucket Cloud: push.changes[].new/old {type: branch|tag, name}
        push = payload.get("push")
        changes = push.get("changes") if isinstance(push, dict) else None
        return list(_cloud_refs(changes)) if isinstance(changes, list) else None
    if event == "repo:refs_changed":  # Server / Data Center: changes[].ref.id
        changes = payload.get("changes")
        return list(_server_refs(changes)) if isinstance(changes, list) else None
    return None


def _cloud_refs(changes: list[Any]) -> Iterator[str]:
    for change in changes:
        if not isinstance(change, dict):
            continue
        for side in ("new", "old"):  # new is null when the branch was deleted
            ref = change.get(side)
            if isinstance(ref, dict) and isinstance(ref.get("name"), str):
                kind = "tags" if ref.get("type") in ("tag", "annotated_tag") else "heads"
                yield f"refs/{kind}/{ref['name']}"
                break


def _server_refs(changes: list[Any]) -> Iterator[str]:
    for change in changes:
        if not isinstance(change, dict):
            continue
        ref = change.get("ref")
        ref_id = ref.get("id") if isinstance(ref, dict) else change.get("refId")
        if isinstance(ref_id, str):
            yield ref_id


def judge(headers: Mapping[str, str], body: bytes, policy: WebhookPolicy) -> Verdict:
    """What the delivery with ``headers`` (lower-case names) and ``body`` comes to."""
    host = host_of(headers)
    delivery = _delivery_id(headers)
    if host is None:
        why = "a signature header without a git host's event header"
        return Verdict(Outcome.REFUSED, why, None, None, delivery)
    event = _event(host, headers)
    problem = signature_problem(host, headers, body, policy.secret)
    if problem is not None:
        return Verdict(Outcome.REFUSED, problem, host, event, delivery)
    if event is None:
        return Verdict(Outcome.MALFORMED, f"no event header ({_HOST_NAMES[host]})", host, None, delivery)
    payload = _payload(headers, body)
    if payload is None:
        return Verdict(Outcome.MALFORMED, "the body is not a JSON object", host, event, delivery)
    if (host, event) in ((GitHost.GITHUB, "ping"), (GitHost.BITBUCKET, "diagnostics:ping")):
        return Verdict(Outcome.PING, "the webhook works; nothing to do", host, event, delivery)
    refs = _pushed_refs(host, event, payload)
    if refs is None:
        return Verdict(Outcome.IGNORED, f"{event!r} is not a push", host, event, delivery)
    if policy.branch is None:
        return Verdict(Outcome.SYNC, "a push (folder mode: any push syncs)", host, event, delivery)
    watched = f"refs/heads/{policy.branch}"
    if watched in refs:
        return Verdict(Outcome.SYNC, f"a push to {watched}, the watched branch", host, event, delivery)
    moved = ", ".join(refs[:5]) or "no ref"
    return Verdict(
        Outcome.IGNORED, f"a push to {moved}, not the watched branch {policy.branch}", host, event, delivery
    )
