"""What a command leaves to the end of the process instead of freeing it object by object.

A plan of 10,000 files keeps about 300,000 objects (every job's canonical form, its plan);
freeing them one by one when the command returns, and the collector's last pass at exit,
cost 0.2-0.25 s of CPU, about a tenth of the whole command (docs/benchmarks.md). ``outlive``
puts what a command kept in a reference cycle, which only the cyclic collector can free, and
``exiting`` (``main`` run as the program, after the command) freezes the collector's
generations (``gc.freeze``), so that nothing frees them: the process's memory goes back to
the system whole when it ends. Called in-process with its arguments (the tests), ``main``
does not freeze, and the collector frees them as it frees any cycle.
"""

from __future__ import annotations

import gc

_outliving = False


def outlive(*objects: object) -> None:
    """Leaves ``objects`` (and what only they hold) to the end of the process."""
    global _outliving
    kept: list[object] = [*objects]
    kept.append(kept)  # a cycle: no count of references frees it when the caller returns
    _outliving = True


def exiting() -> None:
    """The program ends now: what ``outlive`` was given is never freed (nor looked at again)."""
    if _outliving:
        gc.freeze()
