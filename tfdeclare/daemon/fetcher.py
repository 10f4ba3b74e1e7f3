"""``Fetcher``: a source's slow part (a git fetch over the network) run beside the daemon's
passes, so that a remote that is slow or hangs never holds them up: the passes go on
reconciling with the last snapshot (a task that died is restarted on time), and ``/healthz``
answers. Level-triggered: the end of a fetch only says "look again" (``done``); the next pass
takes its outcome (``take``) and makes the fetched head current itself. One fetch at a time:
one asked for while one runs is run once more after it (a push it may have missed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from tfdeclare.daemon.sources import SourceError

log = logging.getLogger("tfdeclare.daemon")


@dataclass(frozen=True, slots=True)
class Fetched:
    """The outcome of the last fetch: None when it succeeded, else why not."""

    error: SourceError | None


class Fetcher:
    def __init__(
        self, fetch: Callable[[], None], done: Callable[[], None], clock: Callable[[], float]
    ) -> None:
        self._fetch = fetch
        self._done = done
        self._clock = clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self._outcome: Fetched | None = None
        self.since: float | None = None  # when the fetch running now started (None: none runs)

    def start(self) -> None:
        """Fetch now, or once more after the fetch running now."""
        with self._lock:
            if self._thread is not None:
                self._again = True
                return
            self.since = self._clock()
            self._thread = threading.Thread(target=self._run, name="tfdeclare-fetch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self._fetch()
                outcome = Fetched(None)
            except SourceError as err:
                outcome = Fetched(err)
            except Exception as err:  # a bug: said, and the source counts as unreadable
                log.exception("internal error in a fetch (a bug; please report it)")
                outcome = Fetched(SourceError(f"internal error in a fetch: {type(err).__name__}"))
            with self._lock:
                self._outcome = outcome
                again, self._again = self._again, False
                if again:
                    self.since = self._clock()
                else:
                    self._thread, self.since = None, None
            self._done()
            if not again:
                return

    def take(self) -> Fetched | None:
        """The outcome of the fetch that ended since the last ``take`` (None: none ended)."""
        with self._lock:
            outcome, self._outcome = self._outcome, None
        return outcome

    def join(self, timeout: float) -> None:
        """Wait for the fetch running now (the daemon's stop, after killing its git)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
