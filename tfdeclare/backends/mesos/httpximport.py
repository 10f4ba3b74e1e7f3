"""httpx, imported without what a synchronous client never runs (issue 33: the framework's
own CPU; docs/benchmarks.md).

``import httpx`` also imports httpx's command line (click, rich and pygments, when they are
installed) and, through httpcore (imported with the first client), trio (to tell trio from
asyncio in async code): about a fifth of a short ``tfdeclare apply``'s CPU in a Python
environment that has them. The backend
runs httpx's synchronous client only, so both are hidden from that one import: their names
are held at None in ``sys.modules`` while httpcore and httpx load (httpx then keeps its stub ``main``;
httpcore its ``trio = None``), and released afterwards, so a later ``import trio`` anywhere
in the process works as usual. When httpx (or trio) is already imported, nothing changes.
Every module of the backend imports httpx from here.
"""

from __future__ import annotations

import sys

_HIDDEN = ("httpx._main", "trio")  # httpx's CLI; httpcore's async-library detection


def _load() -> None:
    if "httpx" in sys.modules:
        return
    hidden = [name for name in _HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # "import name" raises ImportError
    try:
        import httpcore  # noqa: F401  (httpx imports it on its first client, after the release)
        import httpx  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


_load()

import httpx  # noqa: E402  (after _load, which imported it)

__all__ = ["httpx"]
