"""``daemon.fetcher.Fetcher``: a fetch beside the passes, real threads. One at a time; one asked
for while one runs is run once more after it; its end only asks for a pass; the outcome is
taken once; a bug in a fetch is an error, not a dead thread."""

from __future__ import annotations

import threading

from tests.waiting import wait_until
from tfdeclare.daemon.fetcher import Fetcher
from tfdeclare.daemon.sources import SourceError


def test_one_fetch_at_a_time_and_once_more_when_asked_meanwhile() -> None:
    release = threading.Semaphore(0)
    calls: list[int] = []
    done: list[int] = []
    outcomes = iter([None, SourceError("git fetch http://h/x.git: timed out after 4 s")])

    def fetch() -> None:
        calls.append(len(calls))
        release.acquire()
        error = next(outcomes)
        if error is not None:
            raise error

    fetcher = Fetcher(fetch, lambda: done.append(1), clock=lambda: 100.0)
    assert fetcher.take() is None and fetcher.since is None
    fetcher.start()
    wait_until(lambda: calls == [0])
    assert fetcher.since == 100.0
    fetcher.start()
    fetcher.start()  # both join the one to run after this
    release.release()
    wait_until(lambda: calls == [0, 1] and done == [1])
    first = fetcher.take()
    assert first is not None and first.error is None
    assert fetcher.take() is None, "taken once"
    release.release()
    wait_until(lambda: done == [1, 1] and fetcher.since is None)
    second = fetcher.take()
    assert second is not None and str(second.error) == "git fetch http://h/x.git: timed out after 4 s"
    assert calls == [0, 1], "the two requests made while it ran made one more fetch"


def test_a_bug_in_a_fetch_is_an_error_and_the_next_fetch_runs() -> None:
    calls: list[int] = []

    def fetch() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("bug")

    fetcher = Fetcher(fetch, lambda: None, clock=lambda: 0.0)
    fetcher.start()
    wait_until(lambda: fetcher.since is None and len(calls) == 1)
    outcome = fetcher.take()
    assert outcome is not None and str(outcome.error) == "internal error in a fetch: KeyError"
    fetcher.start()
    fetcher.join(5)
    wait_until(lambda: fetcher.since is None and len(calls) == 2)
    again = fetcher.take()
    assert again is not None and again.error is None
