"""``BackendError``, alone in a module so the CLI can catch it without importing a backend."""


class BackendError(Exception):
    """The backend cannot do what was asked (unreachable cluster, refused launch, ...)."""
