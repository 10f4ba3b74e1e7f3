"""What the preemption tests read back from a training run, and the verdict they share.

The training scripts (specs/preemptible_train.py, tests/tf_pss_preemptible.py) append one line
``STEP ATTEMPT`` to ``steps.log`` per step they complete. A preempted job that loses no work
has every step exactly once, in order, over two attempts: the first stopped mid-run (at its
checkpoint), the second resumed from there.
"""

from __future__ import annotations


def parse_steps(text: str) -> list[tuple[int, int]]:
    """(step, attempt) per line of a ``steps.log``, in the order written."""
    return [(int(a), int(b)) for a, b in (line.split() for line in text.splitlines() if line)]


def stopped_once_mid_run(done: list[tuple[int, int]], steps: int, earliest: int, who: str) -> int:
    """The last step of the first attempt, once ``done`` holds steps 1 to ``steps`` exactly
    once, in order, over exactly two attempts, the first stopped at step ``earliest`` or later
    and before the end (AssertionError naming ``who`` otherwise)."""
    assert [s for s, _ in done] == list(range(1, steps + 1)), f"{who}: a step done twice or skipped"
    attempts = sorted({a for _, a in done})
    assert len(attempts) == 2, f"{who} was not stopped mid-run: attempts {attempts}"
    stopped_at = max(s for s, a in done if a == attempts[0])
    assert earliest <= stopped_at < steps, f"{who} stopped at step {stopped_at}"
    return stopped_at
