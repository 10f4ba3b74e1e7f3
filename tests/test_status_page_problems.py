"""The status page's Problems section in a real headless browser (issue 31): a real daemon
with a running job and a file that cannot be applied, at a phone width and a wide one; the
section comes first, the header says how many problems stand (not ``ok``), the diagnostics
are shown as text, nothing scrolls sideways; once the file is fixed the section is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_daemon import Daemon, status, wait_until
from tests.test_status_page import browser, cwd, no_horizontal_scroll, talking_job, viewport

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["browser", "cwd"]  # fixtures

LONG = "experiments/vision-team/resnet50-mixed-precision/long-running-sweeps"


def test_the_problems_section_at_phone_and_wide_widths(browser: Any, cwd: Path) -> None:
    from selenium.webdriver.common.by import By

    (cwd / "specs" / "good.yaml").write_text(talking_job("good", 1))
    folder = cwd / "specs" / LONG
    folder.mkdir(parents=True)
    bad = talking_job("sweep", 1).replace(
        "count: 1", "count: 1, <b>unknownFieldWithAVeryLongNameIndeed</b>: 1"
    )
    (folder / "sweep.yaml").write_text(bad)
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5")
    try:
        wait_until(lambda: (status(cwd, "good") or {}).get("phase") == "Running")
        wait_until(lambda: len(daemon.get("/healthz")[1]["problems"]) == 1)
        for width, height, mobile in ((375, 800, True), (1440, 900, False)):
            viewport(browser, width, height, mobile)
            browser.get(daemon.url + "/?refresh=0")
            assert browser.execute_script("return window.innerWidth") == width
            assert browser.find_element(By.ID, "state").text == "1 problem"
            section = browser.find_element(By.ID, "problems")
            text = section.text
            assert f"specs/{LONG}/sweep.yaml" in text.replace("\n", "")
            assert "invalid-spec" in text and "holds back sweep" in text
            assert "<b>unknownFieldWithAVeryLongNameIndeed</b>" in text, "markup is shown as text"
            assert browser.find_elements(By.CSS_SELECTOR, "#problems b") == []
            card = browser.find_element(By.ID, "job-good")
            assert section.rect["y"] + section.rect["height"] <= card.rect["y"], "the problems come first"
            assert no_horizontal_scroll(browser), f"the page scrolls sideways at {width} px"

        (folder / "sweep.yaml").write_text(talking_job("sweep", 1))
        wait_until(lambda: daemon.get("/healthz")[1]["problems"] == [])
        browser.get(daemon.url + "/?refresh=0")
        assert browser.find_element(By.ID, "state").text == "ok"
        assert browser.find_elements(By.ID, "problems") == []
    finally:
        assert daemon.stop() == 0
