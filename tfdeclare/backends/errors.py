"""``BackendError``, alone in a module so the CLI can catch it without importing a backend."""


class BackendError(Exception):
    """The backend cannot do what was asked (unreachable cluster, refused launch, ...)."""


class LogOffsetError(ValueError):
    """``read_log`` was asked for an offset past the end of the log as it is now (a client's
    mistake, not the backend's: the daemon answers 400)."""

    def __init__(self, offset: int, size: int) -> None:
        super().__init__(f"offset {offset} is beyond the end of the log ({size} bytes so far)")
        self.offset = offset
        self.size = size
