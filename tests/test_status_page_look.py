"""The status page reads at a glance (issue 32), in a real headless browser: a real daemon
with a running, a succeeded, a failed and a stalled job (one that can never fit), at a wide
and a phone width. Problems come first; colours follow meaning (a Succeeded job's ``Ready
False`` is not red, ``Stalled True`` is); done and running badges differ; a message's
`code` spans are code, not backticks; no timestamp breaks across lines; nothing scrolls
sideways."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.test_daemon import Daemon, status, wait_until
from tests.test_status_page import browser, cwd, no_horizontal_scroll, talking_job, viewport

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["browser", "cwd"]  # fixtures

RED, GREEN = "rgb(185, 28, 28)", "rgb(21, 128, 61)"  # --bad, --ok


def exiting_job(name: str, code: int, extra: str = "") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: {name}}}
        spec:
          command: [python, -c, "import sys; sys.exit({code})"]
          restartPolicy: Never
          replicas:
            worker: {{count: 1, resources: {{cpus: 0.1, mem: 64{extra}}}}}
        """
    )


def colour(driver: Any, selector: str, prop: str = "color") -> str:
    return str(
        driver.execute_script(
            f"return getComputedStyle(document.querySelector(arguments[0])).{prop}", selector
        )
    )


def test_the_page_reads_at_a_glance(browser: Any, cwd: Path) -> None:
    from selenium.webdriver.common.by import By

    (cwd / "specs" / "a.yaml").write_text(talking_job("a-running", 1))
    (cwd / "specs" / "b.yaml").write_text(exiting_job("b-done", 0))
    (cwd / "specs" / "c.yaml").write_text(exiting_job("c-stuck", 0, ", gpus: 4"))  # config: 0 GPUs
    (cwd / "specs" / "d.yaml").write_text(exiting_job("d-failed", 3))
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "2")
    phases = {"a-running": "Running", "b-done": "Succeeded", "c-stuck": "Pending", "d-failed": "Failed"}
    try:
        wait_until(lambda: all((status(cwd, n) or {}).get("phase") == p for n, p in phases.items()))
        wait_until(lambda: "Unschedulable" in str(status(cwd, "c-stuck")))
        for width, mobile in ((1440, False), (375, True)):
            viewport(browser, width, 900, mobile)
            browser.get(daemon.url + "/?refresh=0")
            assert browser.execute_script("return window.innerWidth") == width
            cards = [c.get_attribute("id") for c in browser.find_elements(By.CSS_SELECTOR, "section.job")]
            assert cards == ["job-d-failed", "job-c-stuck", "job-a-running", "job-b-done"], "problems first"
            # colours by meaning, not by True/False
            assert colour(browser, "#job-a-running dd.condition .tone-good") == GREEN  # Ready True
            done_ready = browser.find_element(By.CSS_SELECTOR, "#job-b-done dd.condition span")
            assert done_ready.text == "False"  # Ready False of a finished job ...
            assert colour(browser, "#job-b-done dd.condition span") not in (RED, GREEN)  # ... is done
            stalled = [
                d
                for d in browser.find_elements(By.CSS_SELECTOR, "#job-c-stuck dd.condition")
                if "Unschedulable" in d.text and d.find_element(By.TAG_NAME, "span").text == "True"
            ]
            assert stalled, "the stalled job shows Stalled True"
            shown = stalled[-1].find_element(By.TAG_NAME, "span")
            assert browser.execute_script("return getComputedStyle(arguments[0]).color", shown) == RED
            assert colour(browser, "#job-d-failed .phase") == "rgb(255, 255, 255)"  # filled red
            assert colour(browser, "#job-d-failed .phase", "backgroundColor") == RED
            # done and running: distinct badges
            running = colour(browser, "#job-a-running .phase", "backgroundColor")
            done = colour(browser, "#job-b-done .phase", "backgroundColor")
            assert running != done and colour(browser, "#job-a-running .phase") == GREEN
            # `local` in the Unschedulable message is code, with no backtick shown
            message = browser.find_element(By.CSS_SELECTOR, "#job-c-stuck p.message")
            assert [c.text for c in message.find_elements(By.TAG_NAME, "code")] == ["local"]
            assert "`" not in browser.find_element(By.ID, "job-c-stuck").text
            # no time breaks across lines
            times = browser.find_elements(By.CSS_SELECTOR, "time")
            assert len(times) > 8
            broken = browser.execute_script(
                "return [...document.querySelectorAll('time')]"
                ".filter(t => t.getClientRects().length > 1).map(t => t.textContent)"
            )
            assert broken == [], f"timestamps broken across lines at {width} px"
            assert no_horizontal_scroll(browser), f"the page scrolls sideways at {width} px"
    finally:
        assert daemon.stop() == 0
