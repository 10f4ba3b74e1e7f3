"""How ``apply`` shows an image pull (``cli/pulls.py``): plain lines off a terminal, one block
redrawn in place on one (the real pty is in ``test_image_pulls.py``)."""

from __future__ import annotations

import io

from tfdeclare.backends.progress import PullEvent, PullStep
from tfdeclare.cli.pulls import LivePulls, PlainPulls, size

IMAGE = "registry.example/tf:2"
LAYERS = [
    PullEvent(IMAGE, PullStep.STARTED, "gpt"),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "aaaaaaaaaaaa", "Already exists"),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "bbbbbbbbbbbbcafe", "Pulling fs layer"),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "bbbbbbbbbbbbcafe", "Downloading", 1_000, 2_500_000),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "bbbbbbbbbbbbcafe", "Downloading", 1_200_000, 2_500_000),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "bbbbbbbbbbbbcafe", "Extracting", 2_500_000, 2_500_000),
    PullEvent(IMAGE, PullStep.LAYER, "gpt", "bbbbbbbbbbbbcafe", "Pull complete"),
    PullEvent(IMAGE, PullStep.DONE, "gpt"),
]


def test_sizes_read_as_the_engines_client_shows_them() -> None:
    assert [size(n) for n in (None, 999, 1_000, 2_500_000, 7_300_000_000)] == [
        "?",
        "999 B",
        "1.0 kB",
        "2.5 MB",
        "7.3 GB",
    ]


def test_plain_lines_say_when_a_pull_starts_each_layer_and_the_end() -> None:
    lines: list[str] = []
    receiver = PlainPulls(lines.append)
    for event in LAYERS:
        receiver(event)
    receiver(PullEvent("other:1", PullStep.STARTED, "b"))
    receiver(PullEvent("other:1", PullStep.FAILED, "b", status="manifest unknown"))
    assert lines[:3] == [
        f"pulling {IMAGE} for job gpt",
        f"{IMAGE}: layer aaaaaaaaaaaa already present",
        f"{IMAGE}: layer bbbbbbbbbbbb pulled, 2.5 MB",
    ]
    assert lines[3].startswith(f"pulled {IMAGE}: 2 layer(s), 2.5 MB fetched in ")
    assert lines[4:] == ["pulling other:1 for job b", "cannot pull other:1: manifest unknown"]


def test_the_live_block_is_redrawn_in_place_with_each_layers_bytes() -> None:
    screen = io.StringIO()
    receiver = LivePulls(screen)
    for event in LAYERS:
        receiver(event)
    text = screen.getvalue()
    assert "  bbbbbbbbbbbb  Downloading        1.0 kB / 2.5 MB" in text  # each new state is drawn
    assert "  bbbbbbbbbbbb  Pull complete      2.5 MB" in text
    assert "\x1b[2F\x1b[2K" in text  # back up over the block drawn before
    last = text.rsplit("\x1b[3F", 1)[1]  # the last frame: the outcome above its layers
    assert last.split("\n")[0].startswith(f"\x1b[2Kpulled {IMAGE}: 2 layer(s)")
    # a later pull starts a new block under the finished one
    receiver(PullEvent("other:1", PullStep.STARTED, "b"))
    assert screen.getvalue().endswith("\x1b[2Kpulling other:1 for job b\n")
