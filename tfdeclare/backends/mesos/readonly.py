"""The master's operator API (``POST /api/v1``, JSON) as the scheduler client and ``plan`` call it.

This module owns how an operator answer is read (``operator_answer``, ``agents_of``,
``quota_of``), and one operator call made without a subscription (``ask``): ``plan`` asks the
master for its agents (``GET_AGENTS``, served by the real master on ``/api/v1`` and, behind the
``mesos.master`` path prefix, on ``/master/api/v1``) without registering a framework. The master
is found as the scheduler client finds it: each master of a list in turn, the leader of a 307
redirect, or the leader ZooKeeper names (``leader.py``); with the same credentials (HTTP Basic,
which masters with ``--authenticate_http_readonly`` ask for here) and TLS settings (``tls.py``:
CA, client certificate); everything within one time bound, so an unreachable cluster costs
``plan`` a bounded wait, never a long one.

``ask`` speaks HTTP through the standard library's ``http.client`` (``plainhttp``: bounded in
all, not only each read), not httpx (which the subscribed client uses): it is one request and
its answer, and ``plan`` imports nothing of httpx for it. Measured in the development
environment, where httpx and httpcore also import trio, click, rich and pygments: ``plan`` of
3,000 files took 0.94 s of CPU with httpx and 0.78 s without (docs/benchmarks.md, issue 33
item 3); in a plain install httpx with httpcore costs about 0.05 s. The same trust store is
used for ``https://`` (``tls.ssl_context``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Protocol

from tfdeclare.backends.mesos.auth import Credentials
from tfdeclare.backends.mesos.errors import (
    MesosConnectionError,
    ProtocolError,
    TooManyRedirectsError,
    error_for_status,
)
from tfdeclare.backends.mesos.leader import SCHEDULER_PATH, parse_master, resolve_location, zookeeper_leader
from tfdeclare.backends.mesos.plainhttp import Failure, request
from tfdeclare.backends.mesos.tls import ClientCertificate, tls_verify

__all__ = ["agents_of", "ask", "operator_answer", "operator_url", "quota_of", "tls_verify"]

JSON = dict[str, Any]


class _Answer(Protocol):
    """What ``operator_answer`` reads of an HTTP answer (httpx's ``Response`` has it too)."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...

    def json(self) -> Any: ...


def operator_answer(resp: _Answer, call_type: str) -> JSON:
    """The body of an operator call's answer; raises ``MesosError`` for any other status."""
    if resp.status_code != 200:
        raise error_for_status(resp.status_code, resp.text, call_type)
    try:
        body = resp.json()
    except ValueError as exc:
        raise ProtocolError(f"{call_type}: an answer that is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"{call_type}: an answer that is not a JSON object")
    return body


def agents_of(body: JSON) -> list[JSON]:
    """The agents of a ``GET_AGENTS`` answer, each with ``agent_info`` and ``total_resources``."""
    try:
        agents = body["get_agents"].get("agents", [])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"GET_AGENTS: an answer that is not a list of agents ({exc})") from None
    return [a for a in agents if isinstance(a, dict)]


def quota_of(body: JSON) -> dict[str, dict[str, float]]:
    """Each role's quota limits in a ``GET_QUOTA`` answer: role -> {resource: limit}. Masters
    of 1.9 and later list ``configs`` with ``limits`` (``UPDATE_QUOTA``); before, a quota was a
    guarantee that was also its role's limit (``infos``' ``guarantee``)."""
    try:
        status = body["get_quota"].get("status") or {}
        out: dict[str, dict[str, float]] = {}
        for config in status.get("configs") or []:
            limits = config.get("limits") or {}
            out[str(config["role"])] = {str(k): float(v["value"]) for k, v in limits.items()}
        for info in status.get("infos") or []:
            if str(info["role"]) in out or not info.get("guarantee"):
                continue
            scalars = [r for r in info["guarantee"] if r.get("type") == "SCALAR"]
            out[str(info["role"])] = {str(r["name"]): float(r["scalar"]["value"]) for r in scalars}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ProtocolError(f"GET_QUOTA: an answer that is not a quota status ({exc})") from None
    return out


def operator_url(scheduler_endpoint: str) -> str:
    """``.../api/v1/scheduler`` -> ``.../api/v1``."""
    return scheduler_endpoint.removesuffix(SCHEDULER_PATH) + "/api/v1"


def ask(
    master: str,
    call_type: str,
    *,
    timeout_s: float,
    credentials: Credentials | None = None,
    ca_file: str | None = None,
    insecure_skip_tls_verify: bool = False,
    client_certificate: ClientCertificate | None = None,
    max_redirects: int = 5,
    zk_scheme: str = "http",
) -> JSON:
    """One operator call (``{"type": call_type}``) to the leading master of ``master`` (as
    ``mesos.master`` names it), all of it within ``timeout_s`` seconds; its answer's body.
    A master that does not answer, or is not the leader and names none (503), gives way to
    the next of the list. Raises ``MesosError`` (``ConfigError`` for unusable settings)."""
    deadline = time.monotonic() + timeout_s
    spec = parse_master(master)
    endpoints = list(spec.endpoints)
    if spec.zookeeper is not None:
        leader = zookeeper_leader(spec.zookeeper, zk_scheme, timeout_s)
        if leader is None:
            raise MesosConnectionError(f"ZooKeeper at {master} names no leading Mesos master")
        endpoints = [leader]
    verify = tls_verify(ca_file, insecure_skip_tls_verify, client_certificate)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if credentials is not None:
        headers["Authorization"] = credentials.basic_header()
    content = json.dumps({"type": call_type}).encode()
    failures: list[str] = []
    for endpoint in endpoints:
        url = operator_url(endpoint)
        for _ in range(max_redirects + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                failures.append(f"no answer within {timeout_s:g} s")
                raise MesosConnectionError(f"{call_type}: {'; '.join(failures)}")
            try:
                resp = request("POST", url, timeout_s=left, verify=verify, headers=headers, body=content)
            except Failure as exc:
                failures.append(f"{url}: {type(exc).__name__}: {exc}".rstrip(": "))
                break
            if resp.status_code == 307:  # to the leader: ``//host:port`` and this path
                url = resolve_location(url, resp.location)
                continue
            if resp.status_code == 503:
                failures.append(f"{url}: 503 {resp.text.strip()}".rstrip())
                break
            return operator_answer(resp, call_type)
        else:
            raise TooManyRedirectsError(307, "too many redirects", call_type)
    raise MesosConnectionError(f"{call_type}: {'; '.join(failures)}")
