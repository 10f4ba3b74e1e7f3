"""The master's HTTP endpoints and the scheduler-call pipeline of reference §1.4.

Owns ``POST /api/v1/scheduler`` and the order in which the real master answers:
401 (Basic auth, realm ``mesos-master-scheduler``) -> 307/503 when not the leader ->
503 while recovering -> 405 -> 400 (missing Content-Type, bad JSON, not a ``Call``) ->
415 -> 400 (``Failed to validate scheduler::Call: ...``) -> 406 -> 400 (SUBSCRIBE with
``Mesos-Stream-Id``) -> 200 stream for SUBSCRIBE; for other calls 400 (unknown
framework) -> 400 (principal) -> 403 (not subscribed) -> 400 (stream id) -> 202/200/501.
Also ``/version``, ``/health``, ``/redirect``, a debugging ``/state``, and of the operator
API (``POST /api/v1``) the call schedulers use to learn what the agents have,
``GET_AGENTS``, and the drain and maintenance calls (``maintenance.py``); the others answer 501.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING, Any

from . import jsonenc
from .model import Subscription
from .status import new_uuid_string
from .validation import validate_call
from .wire import EventStream, Request, Response, StreamStarter

if TYPE_CHECKING:
    from .emulator import Cluster

APPLICATION_JSON = "application/json"
APPLICATION_PROTOBUF = "application/x-protobuf"
SCHEDULER_PATHS = ("/api/v1/scheduler", "/master/api/v1/scheduler")
OPERATOR_PATHS = ("/api/v1", "/master/api/v1")


def _accepts(header: str | None, media: str) -> bool:
    """``Request::acceptsMediaType``: absent header accepts all; honours q=0."""
    if header is None:
        return True
    kind, _, sub = media.partition("/")
    for item in header.split(","):
        parts = [p.strip() for p in item.split(";")]
        if not parts[0]:
            continue
        quality = 1.0
        for param in parts[1:]:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        candidate, _, candidate_sub = parts[0].partition("/")
        if quality <= 0:
            continue
        if candidate == "*" and candidate_sub == "*":
            return True
        if candidate == kind and candidate_sub in ("*", sub):
            return True
    return False


class MasterEndpoints:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def handle(self, request: Request, start_stream: StreamStarter) -> Response | EventStream:
        path = request.path
        if path in SCHEDULER_PATHS:
            return self.scheduler(request, start_stream)
        if path in OPERATOR_PATHS and self.cluster.config.operator_api:
            return self.operator(request)
        if path in ("/version", "/version/"):
            body = {"version": self.cluster.config.version, "build_user": "mesos-emulator"}
            return Response.json(200, json.dumps(body).encode())
        if path in ("/health", "/master/health"):
            return Response(200)
        if path in ("/redirect", "/master/redirect"):
            return self._redirect(request, base_only=True)
        if path in ("/state", "/state.json", "/master/state", "/master/state.json"):
            return Response.json(200, json.dumps(self.cluster.master_state()).encode())
        return Response.text(404)

    def _redirect(self, request: Request, base_only: bool) -> Response:
        cluster = self.cluster
        location = cluster.leader_location
        if cluster.leader:
            location = f"{cluster.config.host}:{cluster.master_port}"
        if location is None:
            return Response.text(503, "No leader elected")
        base = f"//{location}"
        return Response(307, headers=[("Location", base if base_only else base + request.target)])

    def _authenticate(
        self, request: Request, realm: str = "mesos-master-scheduler"
    ) -> tuple[Response | None, str | None]:
        credentials = self.cluster.config.credentials
        if credentials is None:
            return None, None
        unauthorized = Response(401, headers=[("WWW-Authenticate", f'Basic realm="{realm}"')])
        header = request.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return unauthorized, None
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return unauthorized, None
        principal, sep, secret = decoded.partition(":")
        if not sep or credentials.get(principal) != secret:
            return unauthorized, None
        return None, principal

    def operator(self, request: Request) -> Response:
        """The operator API, as far as schedulers use it: ``GET_AGENTS`` (JSON)."""
        cluster = self.cluster
        denied, _ = self._authenticate(request, realm="mesos-master-readonly")
        if denied is not None:
            return denied
        if not cluster.leader:
            return self._redirect(request, base_only=False)
        master = cluster.master
        if master is None or not master.recovered_registry:
            return Response.text(503, "Master has not finished recovery")
        if request.method != "POST":
            body = f"405 Method Not Allowed. Expecting one of {{ 'POST' }}, but received '{request.method}'"
            return Response.text(405, body, Allow="POST")
        if request.headers.get("Content-Type") != APPLICATION_JSON:
            return Response.text(415, f"Expecting 'Content-Type' of {APPLICATION_JSON}")
        try:
            call = json.loads(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            return Response.text(400, f"Failed to parse body into JSON: {exc}")
        kind = call.get("type") if isinstance(call, dict) else None
        if kind == "GET_AGENTS":
            body = {"type": "GET_AGENTS", "get_agents": {"agents": master.agents_listing()}}
            return Response.json(200, json.dumps(body).encode())
        if kind in MAINTENANCE_CALLS:
            assert isinstance(call, dict)
            return maintenance_call(master, call)
        return Response.text(
            501, "mesos-emulator answers only GET_AGENTS and the drain and maintenance calls"
        )

    def scheduler(self, request: Request, start_stream: StreamStarter) -> Response | EventStream:
        response, call = self._pipeline(request, start_stream)
        self.cluster.record_call(request, call, response)
        return response

    def _pipeline(  # noqa: C901 - the master's request pipeline, one check after another in its order
        self, request: Request, start_stream: StreamStarter
    ) -> tuple[Response | EventStream, dict[str, Any] | None]:
        cluster = self.cluster
        denied, principal = self._authenticate(request)
        if denied is not None:
            return denied, None
        if not cluster.leader:
            return self._redirect(request, base_only=False), None
        master = cluster.master
        if master is None or not master.recovered_registry:
            return Response.text(503, "Master has not finished recovery"), None
        if request.method != "POST":
            body = f"405 Method Not Allowed. Expecting one of {{ 'POST' }}, but received '{request.method}'"
            return Response.text(405, body, Allow="POST"), None
        content_type = request.headers.get("Content-Type")
        if content_type is None:
            return Response.text(400, "Expecting 'Content-Type' to be present"), None
        if content_type == APPLICATION_PROTOBUF:
            return Response.text(
                400, "Failed to parse body into Call protobuf (mesos-emulator speaks JSON only)"
            ), None
        if content_type != APPLICATION_JSON:
            return Response.text(
                415, f"Expecting 'Content-Type' of {APPLICATION_JSON} or {APPLICATION_PROTOBUF}"
            ), None
        try:
            value = json.loads(request.body)
        except (ValueError, UnicodeDecodeError) as exc:
            return Response.text(400, f"Failed to parse body into JSON: {exc}"), None
        old_master = cluster.config.older_than(1, 9)
        if old_master and isinstance(value, dict) and value.get("type") == "UPDATE_FRAMEWORK":
            # UPDATE_FRAMEWORK came with Mesos 1.9. An older master's JSON parse (stout, 1.8)
            # drops an enum value it does not know from the optional `type` (and ignores the
            # unknown `update_framework`), so the call fails validation for having no type.
            return Response.text(
                400, "Failed to validate scheduler::Call: Expecting 'type' to be present"
            ), None
        try:
            call = jsonenc.parse("Call", value)
        except jsonenc.ParseError as exc:
            return Response.text(400, f"Failed to convert JSON into Call protobuf: {exc}"), None
        error = validate_call(call, principal)
        if error is not None:
            return Response.text(400, f"Failed to validate scheduler::Call: {error}"), call
        kind = call["type"]
        if kind in ("SUBSCRIBE", "RECONCILE_OPERATIONS") and not _accepts(
            request.headers.get("Accept"), APPLICATION_JSON
        ):
            return Response.text(
                406,
                f"Expecting 'Accept' to allow '{APPLICATION_PROTOBUF}' or '{APPLICATION_JSON}'",
            ), call
        if kind == "SUBSCRIBE":
            if "Mesos-Stream-Id" in request.headers:
                return Response.text(
                    400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
                ), call
            stream_id = new_uuid_string()
            stream = start_stream([("Content-Type", APPLICATION_JSON), ("Mesos-Stream-Id", stream_id)])
            cluster.note_stream(stream_id)
            master.subscribe(Subscription(stream_id, stream), call["subscribe"], principal)
            return stream, call
        framework = master.frameworks.get(call["framework_id"]["value"])
        if framework is None:
            return Response.text(400, "Framework cannot be found"), call
        framework_principal = framework.info.get("principal", "")
        if principal is not None and principal != framework_principal:
            return Response.text(
                400,
                f"Authenticated principal '{principal}' does not match principal "
                f"'{framework_principal}' set in `FrameworkInfo`",
            ), call
        if not framework.connected or framework.subscription is None:
            return Response.text(403, "Framework is not subscribed"), call
        header_id = request.headers.get("Mesos-Stream-Id")
        if header_id is None:
            return Response.text(
                400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header"
            ), call
        if header_id != framework.subscription.stream_id:
            return Response.text(
                400,
                f"The stream ID '{header_id}' included in this request didn't match the stream "
                f"ID currently associated with framework ID {framework.id}",
            ), call
        status, body = master.handle_call(framework, call)
        return Response.text(status, body), call


MAINTENANCE_CALLS = frozenset(
    {
        "DRAIN_AGENT",
        "REACTIVATE_AGENT",
        "UPDATE_MAINTENANCE_SCHEDULE",
        "GET_MAINTENANCE_SCHEDULE",
        "GET_MAINTENANCE_STATUS",
    }
)


def maintenance_call(master: Any, call: dict[str, Any]) -> Response:
    """The operator API's drain and maintenance calls (``maintenance.py``)."""
    kind = call["type"]
    maintenance = master.maintenance
    if kind == "GET_MAINTENANCE_SCHEDULE":
        body = {"type": kind, "get_maintenance_schedule": {"schedule": maintenance.schedule()}}
        return Response.json(200, json.dumps(body).encode())
    if kind == "GET_MAINTENANCE_STATUS":
        body = {"type": kind, "get_maintenance_status": {"status": maintenance.status()}}
        return Response.json(200, json.dumps(body).encode())
    field = kind.lower()
    inner = call.get(field)
    if not isinstance(inner, dict):
        return Response.text(400, f"Failed to validate master::Call: Expecting '{field}' to be present")
    if kind == "UPDATE_MAINTENANCE_SCHEDULE":
        error = maintenance.update_schedule(inner.get("schedule") or {})
    else:
        agent_id = (inner.get("agent_id") or {}).get("value")
        if not isinstance(agent_id, str):
            return Response.text(400, f"Failed to validate master::Call: Expecting '{field}.agent_id'")
        if kind == "DRAIN_AGENT":
            config = {k: inner[k] for k in ("max_grace_period", "mark_gone") if k in inner}
            error = maintenance.drain_agent(agent_id, config)
        else:
            error = maintenance.reactivate_agent(agent_id)
    if error is not None:
        return Response.text(400, error)
    return Response.text(200, "")
