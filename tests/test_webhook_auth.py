"""Git-host deliveries on ``POST /sync``: the signature rules and what each delivery comes to
(``webhook_auth.judge``, tables of deliveries shaped as each host sends them), and the real HTTP
server on a socket taking them: their sizes, the 401s, the bearer token beside them, the 405s."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli
from tests.git_host_deliveries import (
    Delivery,
    bitbucket_cloud_push,
    bitbucket_server_ping,
    bitbucket_server_push,
    gitea_push,
    github_event,
    github_ping,
    github_push,
    gitlab_push,
)
from tests.waiting import wait_until
from tfdeclare.backends import registry
from tfdeclare.cli.common import UserError
from tfdeclare.cli.daemon_command import access_policy
from tfdeclare.core.config import DaemonConfig
from tfdeclare.daemon.httpguard import MAX_BODY, AccessPolicy, refusal
from tfdeclare.daemon.server import MAX_LARGE_READS, DaemonServer
from tfdeclare.daemon.webhook_auth import GitHost, Outcome, WebhookPolicy, judge

SECRET = "webhook-secret-for-the-tests-0123"
TOKEN = "t0ken-for-the-tests-0123456789"
HEAD = "b" * 40
WATCHED = WebhookPolicy(SECRET, "main")


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def verdict(delivery: Delivery, policy: WebhookPolicy = WATCHED, secret: str = SECRET) -> tuple[Outcome, str]:
    headers, body = delivery.signed(secret)
    found = judge(lower(headers), body, policy)
    return found.outcome, found.reason


PUSHES_TO_MAIN = [
    github_push("refs/heads/main", HEAD),
    gitea_push("refs/heads/main", HEAD),
    gitea_push("refs/heads/main", HEAD, forgejo=True),
    gitlab_push("refs/heads/main", HEAD),
    gitlab_push("refs/heads/main", HEAD, event="System Hook"),
    gitlab_push("refs/heads/main", HEAD, event="Push Event"),  # GitLab's Test button, some versions
    bitbucket_cloud_push("main", HEAD),
    bitbucket_server_push("refs/heads/main", HEAD),
]


@pytest.mark.parametrize(
    "delivery", PUSHES_TO_MAIN, ids=lambda d: f"{d.host}-{d.headers.get('X-Gitlab-Event', '')}"
)
def test_a_signed_push_to_the_watched_branch_syncs(delivery: Delivery) -> None:
    assert len(delivery.body()) > MAX_BODY  # as large as the hosts send them
    outcome, reason = verdict(delivery)
    assert outcome is Outcome.SYNC, reason
    assert "refs/heads/main" in reason
    assert verdict(delivery, WebhookPolicy(SECRET, None))[0] is Outcome.SYNC  # folder mode


@pytest.mark.parametrize("delivery", PUSHES_TO_MAIN, ids=lambda d: d.host)
def test_a_wrong_or_missing_signature_is_refused(delivery: Delivery) -> None:
    assert verdict(delivery, secret="another-secret-0123456789")[0] is Outcome.REFUSED
    headers, body = delivery.unsigned()
    unsigned = judge(lower(headers), body, WATCHED)
    assert unsigned.outcome is Outcome.REFUSED and unsigned.code == 401
    assert "no " in unsigned.reason  # says which header is missing
    headers, body = delivery.signed(SECRET)
    tampered = body.replace(HEAD.encode(), b"c" * 40)
    assert tampered != body
    found = judge(lower(headers), tampered, WATCHED)
    assert SECRET not in json.dumps(found.answer()) and SECRET not in repr(found)
    if delivery.host != "gitlab":  # GitLab sends the secret itself and signs nothing
        assert found.outcome is Outcome.REFUSED  # the body is what is signed


@pytest.mark.parametrize(
    "delivery",
    [
        github_push("refs/heads/feature", HEAD),
        github_push("refs/tags/main", HEAD),  # a tag named like the branch
        gitea_push("refs/heads/dev", HEAD),
        gitlab_push("refs/heads/main-old", HEAD),
        gitlab_push("refs/tags/v1", HEAD, event="Tag Push Hook", kind="tag_push"),
        bitbucket_cloud_push("feature", HEAD),
        bitbucket_cloud_push("main", HEAD, kind="tag"),
        bitbucket_server_push("refs/heads/release", HEAD),
        github_event("issues", {"action": "opened", "issue": {"number": 1}}),
        github_event("pull_request", {"action": "opened", "number": 2, "ref": "refs/heads/main"}),
    ],
    ids=lambda d: d.host,
)
def test_other_branches_tags_and_events_are_answered_and_ignored(delivery: Delivery) -> None:
    headers, body = delivery.signed(SECRET)
    found = judge(lower(headers), body, WATCHED)
    assert found.outcome is Outcome.IGNORED and found.code == 202, found.reason
    assert "ignored" in found.answer() and "sync" not in found.answer()


def test_pings_are_answered_200_and_do_nothing() -> None:
    for delivery in (github_ping(), bitbucket_server_ping()):
        headers, body = delivery.signed(SECRET)
        found = judge(lower(headers), body, WATCHED)
        assert (found.outcome, found.code) == (Outcome.PING, 200), found.reason
        assert found.answer()["ping"] == "ok"
        assert judge(lower(headers), body + b" ", WATCHED).outcome is Outcome.REFUSED  # still signed


def test_the_signature_rules() -> None:
    delivery = github_push("refs/heads/main", HEAD)
    headers, body = delivery.signed(SECRET)
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    base = {k: v for k, v in lower(headers).items() if not k.startswith("x-hub-signature")}

    def outcome(**changed: str) -> Outcome:
        return judge({**base, **changed}, body, WATCHED).outcome

    assert outcome(**{"x-hub-signature-256": f"sha256={digest}"}) is Outcome.SYNC
    assert outcome(**{"x-hub-signature-256": f"SHA256={digest.upper()}"}) is Outcome.SYNC  # hex in any case
    assert outcome(**{"x-hub-signature-256": f" sha256={digest} "}) is Outcome.SYNC
    for bad in (digest, f"sha256={digest[:-1]}", f"sha256={digest}0", "sha256=", "", f"sha1={digest}", "é"):
        assert outcome(**{"x-hub-signature-256": bad}) is Outcome.REFUSED, bad
    sha1 = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    assert outcome(**{"x-hub-signature": sha1}) is Outcome.REFUSED  # SHA-1 alone is not taken
    # GitLab sends the secret itself; Gitea an HMAC without a prefix
    gitlab_headers, gitlab_body = gitlab_push("refs/heads/main", HEAD).signed(SECRET)
    for token, expected in ((SECRET, Outcome.SYNC), (SECRET[:-1], Outcome.REFUSED), ("", Outcome.REFUSED)):
        assert (
            judge({**lower(gitlab_headers), "x-gitlab-token": token}, gitlab_body, WATCHED).outcome
            is expected
        )
    gitea_headers, gitea_body = gitea_push("refs/heads/main", HEAD).signed(SECRET)
    only = {k: v for k, v in lower(gitea_headers).items() if "signature" not in k}
    gitea_digest = hmac.new(SECRET.encode(), gitea_body, hashlib.sha256).hexdigest()
    assert judge({**only, "x-gitea-signature": gitea_digest}, gitea_body, WATCHED).outcome is Outcome.SYNC
    assert judge({**only, "x-forgejo-signature": gitea_digest}, gitea_body, WATCHED).outcome is Outcome.SYNC
    assert judge({**only, "x-gitea-signature": "0" * 64}, gitea_body, WATCHED).outcome is Outcome.REFUSED
    # a GitHub signature header alone names no host: refused
    assert judge({"x-hub-signature-256": f"sha256={digest}"}, body, WATCHED).outcome is Outcome.REFUSED


def test_signed_bodies_that_are_not_json_objects_are_400() -> None:
    headers = lower(github_push("refs/heads/main", HEAD).signed(SECRET)[0])
    for body in (b"", b"[1, 2]", b"\xff\xfe", b"{", b"[" * 100_000 + b"]" * 100_000):
        signed = {
            **headers,
            "x-hub-signature-256": "sha256=" + hmac.new(SECRET.encode(), body, "sha256").hexdigest(),
        }
        found = judge(signed, body, WATCHED)
        assert (found.outcome, found.code) == (Outcome.MALFORMED, 400), body[:10]


def test_github_form_encoded_deliveries_are_read() -> None:
    from urllib.parse import urlencode

    delivery = github_push("refs/heads/main", HEAD)
    body = urlencode({"payload": delivery.body().decode()}).encode()
    headers = {
        **lower(delivery.headers),
        "content-type": "application/x-www-form-urlencoded",
        "x-hub-signature-256": "sha256=" + hmac.new(SECRET.encode(), body, "sha256").hexdigest(),
    }
    found = judge(headers, body, WATCHED)
    assert found.outcome is Outcome.SYNC and found.host is GitHost.GITHUB


def test_the_secret_is_never_shown(tmp_path: Path) -> None:
    (tmp_path / "hook").write_text(SECRET + "\n")
    policy = access_policy(DaemonConfig(webhook_secret_file=str(tmp_path / "hook")), "127.0.0.1", "main")
    assert policy.webhook is not None and policy.webhook.secret == SECRET and policy.webhook.branch == "main"
    assert SECRET not in repr(policy) and SECRET not in repr(policy.webhook) and SECRET not in str(policy)
    assert policy.webhook.max_body == 1024 * 1024
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(UserError, match="webhook secret is too short") as raised:
        access_policy(DaemonConfig(webhook_secret_file=str(tmp_path / "short")), "127.0.0.1")
    assert "abc" not in str(raised.value)
    with pytest.raises(UserError, match=r"cannot read daemon.webhookSecretFile .*missing: FileNotFoundError"):
        access_policy(DaemonConfig(webhook_secret_file=str(tmp_path / "missing")), "127.0.0.1")
    with pytest.raises(
        UserError, match=r"daemon\.webhookSecretEnv: the variable TFD_NO_SUCH_HOOK is not set"
    ):
        access_policy(DaemonConfig(webhook_secret_env="TFD_NO_SUCH_HOOK"), "127.0.0.1")
    # a webhook secret guards POST /sync, so the daemon may listen beyond loopback with it
    assert (
        access_policy(DaemonConfig(webhook_secret_file=str(tmp_path / "hook")), "0.0.0.0").webhook is not None
    )


def test_the_guard_lets_deliveries_through_to_their_signature_check() -> None:
    webhook = AccessPolicy(frozenset(), None, webhook=WATCHED)
    both = AccessPolicy(frozenset(), TOKEN, webhook=WATCHED)
    headers, _ = github_push("refs/heads/main", HEAD).signed(SECRET)
    delivery = {**lower(headers), "host": "127.0.0.1"}
    plain = {"host": "127.0.0.1", "content-length": "0"}
    bearer = {**plain, "authorization": f"Bearer {TOKEN}"}
    cases: list[tuple[AccessPolicy, str, str, dict[str, str], int | None]] = [
        (webhook, "POST", "/sync", delivery, None),  # judged by the endpoint
        (both, "POST", "/sync", delivery, None),
        (webhook, "POST", "/sync", plain, 401),  # a missing signature
        (both, "POST", "/sync", plain, 401),
        (both, "POST", "/sync", bearer, None),  # scripts keep their token
        (webhook, "POST", "/sync", {**plain, "content-length": "5000"}, 413),  # unsigned bodies stay small
        (webhook, "POST", "/sync", {**delivery, "content-length": str(2**20 + 1)}, 413),
        (webhook, "POST", "/other", delivery, 413),  # the large bound is for /sync only
        (AccessPolicy(frozenset()), "POST", "/sync", delivery, 413),  # no secret configured
        (webhook, "POST", "/sync", {**delivery, "host": "hooks.example"}, 421),  # daemon.serverNames
        (webhook, "POST", "/sync", {**delivery, "origin": "http://evil.example"}, 403),
    ]
    for policy, method, path, given, expected in cases:
        found = refusal(method, path, given, 8470, policy)
        assert (found.code if found else None) == expected, (method, path, given.get("content-length"))
    found = refusal("POST", "/sync", delivery, 8470, AccessPolicy(frozenset()))
    assert found is not None and "daemon.webhookSecretFile" in found.reason  # says what to set


# ---- the real server ---------------------------------------------------------------------


class Endpoints:
    def __init__(self) -> None:
        self.syncs = 0

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"status": "ok"}

    def metrics_text(self) -> str:
        return "tfdeclare_up 1\n"

    def jobs(self) -> list[dict[str, Any]]:
        return []

    def request_sync(self) -> bool:
        self.syncs += 1
        return True


@pytest.fixture
def served() -> Iterator[tuple[DaemonServer, Endpoints]]:
    endpoints = Endpoints()
    server = DaemonServer("127.0.0.1", 0, endpoints, AccessPolicy(frozenset(), TOKEN, webhook=WATCHED))
    server.start()
    yield server, endpoints
    server.close()


def post(
    server: DaemonServer, path: str, headers: dict[str, str], body: bytes = b"", method: str = "POST"
) -> tuple[int, dict[str, str], Any]:
    host, port = server.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders(body or None)
        response = connection.getresponse()
        data = response.read()
        answer = json.loads(data) if data else None
        return response.status, {k.lower(): v for k, v in response.getheaders()}, answer
    finally:
        connection.close()


def test_the_server_takes_each_hosts_deliveries(served: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = served
    for delivery in PUSHES_TO_MAIN:
        headers, body = delivery.signed(SECRET)
        code, _, answer = post(server, "/sync", headers, body)
        assert code == 202 and answer["sync"] in ("requested", "coalesced"), (delivery.host, answer)
    assert endpoints.syncs == len(PUSHES_TO_MAIN)
    code, _, answer = post(server, "/sync", *github_push("refs/heads/other", HEAD).signed(SECRET))
    assert code == 202 and "not the watched branch main" in answer["ignored"]
    code, _, answer = post(server, "/sync", *github_ping().signed(SECRET))
    assert (code, answer["ping"], answer["event"]) == (200, "ok", "ping")
    assert endpoints.syncs == len(PUSHES_TO_MAIN)


def test_in_folder_mode_any_signed_push_syncs() -> None:
    endpoints = Endpoints()
    policy = AccessPolicy(frozenset(), webhook=WebhookPolicy(SECRET, None))
    server = DaemonServer("127.0.0.1", 0, endpoints, policy)
    server.start()
    try:
        for delivery in (github_push("refs/heads/dev", HEAD), bitbucket_cloud_push("feature", HEAD)):
            code, _, answer = post(server, "/sync", *delivery.signed(SECRET))
            assert code == 202 and answer["sync"] in ("requested", "coalesced"), answer
        assert post(server, "/sync", *github_ping().signed(SECRET))[0] == 200
        assert (
            post(server, "/sync", *github_push("refs/heads/dev", HEAD).signed("wrong-0123456789abcdef"))[0]
            == 401
        )
        assert post(server, "/sync", {})[0] == 401  # no token configured: only signed deliveries sync
        assert endpoints.syncs == 2
    finally:
        server.close()


def test_the_server_refuses_unsigned_and_wrongly_signed_deliveries(
    served: tuple[DaemonServer, Endpoints],
) -> None:
    server, endpoints = served
    delivery = github_push("refs/heads/main", HEAD)
    code, _, answer = post(server, "/sync", *delivery.signed("not-the-secret-0123456789"))
    assert code == 401 and answer["error"] == "wrong X-Hub-Signature-256"
    code, _, answer = post(server, "/sync", *delivery.unsigned())
    assert code == 401 and "no X-Hub-Signature-256 header" in answer["error"]
    plain = {"Content-Type": "application/json", "Content-Length": "2"}
    assert post(server, "/sync", plain, b"{}")[0] == 401  # neither signed nor a token
    big = {"Content-Type": "application/json", "Content-Length": "5000"}
    assert post(server, "/sync", big, b"x" * 5000)[0] == 413  # unsigned: the small bound
    assert endpoints.syncs == 0
    assert post(server, "/sync", {"Authorization": f"Bearer {TOKEN}"})[0] == 202  # no body: a script
    assert endpoints.syncs == 1


def test_delivery_bodies_are_bounded(served: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = served
    headers, _ = github_push("refs/heads/main", HEAD).signed(SECRET)
    code, _, answer = post(server, "/sync", {**headers, "Content-Length": str(2**20 + 1)})
    assert code == 413 and "daemon.webhookMaxBodyBytes" in answer["error"]  # refused unread
    # a delivery that trickles in within the deadline is read whole
    delivery = github_push("refs/heads/main", HEAD)
    headers, body = delivery.signed(SECRET)
    with socket.create_connection(server.address, timeout=10) as raw:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        raw.sendall(f"POST /sync HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
        for start in range(0, len(body), 2048):
            raw.sendall(body[start : start + 2048])
            time.sleep(0.02)
        assert raw.recv(100).startswith(b"HTTP/1.0 202")
    assert endpoints.syncs == 1


def test_large_reads_at_once_are_bounded(served: tuple[DaemonServer, Endpoints]) -> None:
    server, endpoints = served
    headers, body = github_push("refs/heads/main", HEAD).signed(SECRET)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"POST /sync HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode()
    waiting = [socket.create_connection(server.address, timeout=10) for _ in range(MAX_LARGE_READS)]
    try:
        for connection in waiting:  # each holds a large read open, its body not sent yet
            connection.sendall(request + body[:100])
        # until the server reads them all (its own count: nothing outside tells a read open)
        wait_until(lambda: server._large_reads == MAX_LARGE_READS, 10, what="the large reads open")
        with socket.create_connection(server.address, timeout=10) as extra:
            extra.sendall(request + body)
            assert extra.recv(100).startswith(b"HTTP/1.0 503")
        for connection in waiting:
            connection.sendall(body[100:])
            assert connection.recv(100).startswith(b"HTTP/1.0 202")
    finally:
        for connection in waiting:
            connection.close()
    assert endpoints.syncs == MAX_LARGE_READS
    assert post(server, "/sync", *github_push("refs/heads/main", HEAD).signed(SECRET))[0] == 202


def test_known_paths_asked_with_another_method_are_405_with_allow(
    served: tuple[DaemonServer, Endpoints],
) -> None:
    server, endpoints = served
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, allowed in (
        ("GET", "/sync", "POST"),
        ("GET", "/sync?now=1", "POST"),
        ("PUT", "/sync", "POST"),
        ("DELETE", "/sync", "POST"),
        ("POST", "/jobs", "GET"),
        ("POST", "/healthz", "GET"),
        ("PATCH", "/metrics", "GET"),
        ("OPTIONS", "/", "GET"),
        ("POST", "/jobs/a/logs", "GET"),
        ("HEAD", "/healthz", "GET"),
    ):
        code, headers, answer = post(server, path, auth, method=method)
        assert (code, headers.get("allow")) == (405, allowed), (method, path)
        if method != "HEAD":
            assert answer["error"] == f"{path.split('?')[0]} answers {allowed}, not {method}"
    for method in ("GET", "POST", "DELETE"):
        code, headers, _ = post(server, "/nowhere", auth, method=method)
        assert code == 404 and "allow" not in headers, method
    assert endpoints.syncs == 0


def test_the_schema_and_the_config_carry_the_webhook_keys(tmp_path: Path) -> None:
    shown = json.loads(cli("schema", "config", cwd=tmp_path).stdout)["properties"]["daemon"]["properties"]
    for key in ("webhookSecretFile", "webhookSecretEnv", "webhookMaxBodyBytes"):
        assert shown[key]["description"], key
    text = "daemon:\n  webhookSecretFile: hook\n  webhookMaxBodyBytes: 4096\n"
    config, problems = registry.parse_config_file("c.yaml", text.encode(), "/cfg")
    assert problems == [] and config is not None
    assert config.daemon.webhook_secret_file == "/cfg/hook" and config.daemon.webhook_max_body_bytes == 4096
    config, _ = registry.parse_config_file("c.yaml", b"daemon: {webhookSecretEnv: HOOK}\n", "/cfg")
    assert config is not None and config.daemon.webhook_secret_env == "HOOK"
    assert config.daemon.webhook_max_body_bytes == 2**20  # the default
    bad = "daemon:\n  webhookSecretFile: hook\n  webhookSecretEnv: HOOK\n  webhookMaxBodyBytes: 10\n"
    _, problems = registry.parse_config_file("c.yaml", bad.encode(), "/cfg")
    shown = [p.format() for p in problems]
    assert any(
        "give one of webhookSecretFile and webhookSecretEnv" in s and "$.daemon" in s for s in shown
    ), shown
    assert any(s.startswith("c.yaml:4:") and "$.daemon.webhookMaxBodyBytes" in s for s in shown), shown
