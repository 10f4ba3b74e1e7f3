"""``BackendError``, alone in a module so the CLI can catch it without importing a backend."""

from __future__ import annotations

from collections.abc import Sequence

from tfdeclare.core.errors import ErrorCode, RuntimeProblem


class BackendError(Exception):
    """The backend cannot do what was asked (unreachable cluster, refused launch, ...). Its
    ``code`` says which kind of error it is and whether it is terminal (``core.errors``); every
    raise in this package names one (a test checks), a backend plugin may leave it out. Its
    ``str()`` is the message alone."""

    def __init__(self, message: str, *, code: ErrorCode = ErrorCode.BACKEND_FAILED) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def joined(cls, errors: Sequence[BackendError], fallback: ErrorCode) -> BackendError:
        """Several errors as one (their messages joined by "; "): their code when they share
        one, else ``fallback``."""
        codes = {err.code for err in errors}
        code = codes.pop() if len(codes) == 1 else fallback
        return cls("; ".join(str(err) for err in errors), code=code)

    @property
    def terminal(self) -> bool:
        return self.code.terminal

    def problem(self, job: str | None = None, *, prefix: str = "") -> RuntimeProblem:
        """This error as a pass reports it (for ``job``; ``prefix``: where, e.g. a backend)."""
        return RuntimeProblem(self.code, f"{prefix}{self}", job)


class LogOffsetError(ValueError):
    """``read_log`` was asked for an offset past the end of the log as it is now (a client's
    mistake, not the backend's: the daemon answers 400)."""

    def __init__(self, offset: int, size: int) -> None:
        super().__init__(f"offset {offset} is beyond the end of the log ({size} bytes so far)")
        self.offset = offset
        self.size = size
