"""Typed errors of the Mesos v1 scheduler client.

This module owns the exception hierarchy and the mapping from HTTP status codes of the
``/api/v1/scheduler`` endpoint to exception types. Messages carry the call type, the status
code and the master's response text; they never carry request headers or credentials.
"""

from __future__ import annotations

MAX_BODY_TEXT = 2000


class MesosError(Exception):
    """Base class of every error raised by the Mesos client."""


class ConfigError(MesosError):
    """The client or FrameworkInfo configuration is invalid."""


class RecordIOError(MesosError):
    """The event stream is not valid RecordIO (bad length prefix, oversized or truncated record)."""


class ProtocolError(MesosError):
    """The master answered something the v1 protocol does not allow (e.g. no ``Mesos-Stream-Id``)."""


class MesosConnectionError(MesosError):
    """The master could not be reached or the connection failed (including TLS verification)."""


class NotSubscribedError(MesosError):
    """A call was made while the client holds no subscribed stream (not yet, or between streams)."""


class SubscribeTimeoutError(MesosError):
    """``wait_subscribed`` ran out of time; ``last_error`` is the latest subscribe failure, if any."""

    def __init__(self, message: str, last_error: MesosError | None = None) -> None:
        super().__init__(message)
        self.last_error = last_error


class MasterErrorEvent(MesosError):
    """The master sent an ERROR event on the stream (the stream closes after it)."""


class TerminalError(MesosError):
    """The subscription can never succeed again; the client has stopped for good."""


class FrameworkRemovedError(TerminalError):
    """The master answered ``ERROR "Framework has been removed"``: the framework id is dead.

    Only a new framework (no id) can subscribe again; its previous tasks are gone.
    """


class FrameworkFailedOverError(TerminalError):
    """Another scheduler instance subscribed with the same framework id and took over."""


class ClientStoppedError(TerminalError):
    """The client was stopped (``stop()`` or ``teardown()``)."""


class SubscribeRefusedError(TerminalError):
    """SUBSCRIBE was answered 401 (the credentials were refused) or 403 (the principal may not
    register, its ACLs): asking again changes nothing until an operator changes the secret or
    the master's ACLs, so the client stops at once instead of retrying until the subscribe
    timeout. ``cause`` is the typed HTTP error (status, the master's text)."""

    def __init__(self, cause: MesosHTTPError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class MesosHTTPError(MesosError):
    """The master answered a request with an unexpected HTTP status."""

    def __init__(self, status: int, text: str, call_type: str) -> None:
        self.status = status
        self.text = text[:MAX_BODY_TEXT]
        self.call_type = call_type
        detail = f": {self.text}" if self.text else ""
        super().__init__(f"{call_type}: HTTP {status}{detail}")


class BadRequestError(MesosHTTPError):
    """400: malformed or invalid call, unknown framework, wrong ``Mesos-Stream-Id``."""


class AuthenticationError(MesosHTTPError):
    """401: HTTP authentication is required or the credentials were refused."""


class ForbiddenError(MesosHTTPError):
    """403: not authorized, or the framework is not subscribed (disconnected)."""


class NotFoundError(MesosHTTPError):
    """404: no scheduler endpoint at this URL."""


class MethodNotAllowedError(MesosHTTPError):
    """405: the endpoint only accepts POST."""


class NotAcceptableError(MesosHTTPError):
    """406: the master cannot produce a response in the accepted media type."""


class UnsupportedMediaTypeError(MesosHTTPError):
    """415: the request's Content-Type is not supported."""


class ServerError(MesosHTTPError):
    """5xx: master error; 503 means no leader elected or recovery not finished."""


class TooManyRedirectsError(MesosHTTPError):
    """The masters kept answering 307 without reaching a leader."""


_BY_STATUS: dict[int, type[MesosHTTPError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    406: NotAcceptableError,
    415: UnsupportedMediaTypeError,
}


def error_for_status(status: int, text: str, call_type: str) -> MesosHTTPError:
    """The typed error for an HTTP status the client did not expect."""
    if status >= 500:
        return ServerError(status, text, call_type)
    return _BY_STATUS.get(status, MesosHTTPError)(status, text, call_type)
