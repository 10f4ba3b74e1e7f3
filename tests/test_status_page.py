"""The daemon's status page at ``/`` in a real headless browser (Debian's ``chromium`` through
its ``chromedriver``, driven by selenium): a real daemon with real jobs, loaded at a phone
width and a wide one, content and layout checked (no horizontal scrolling at 375 px), a log
link followed. Without the browser the test skips with one line, and fails under ``CI=true``.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.conftest import cli, kill_leftovers
from tests.test_daemon import CONFIG, Daemon, status, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
TALK = "import sys, time\nprint('step 1 loss=<0.5> & done', flush=True)\ntime.sleep(3600)\n"


def talking_job(name: str, count: int) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: {name}}}
        spec:
          command: [python, talk.py]
          replicas:
            worker: {{count: {count}, resources: {{cpus: 0.1, mem: 64}}}}
        """
    )


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        message = "status page test: no chromium/chromedriver (apt-get install chromium chromium-driver)"
        missing(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def cwd(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "project"
    (root / "specs").mkdir(parents=True)
    (root / "tfdeclare.yaml").write_text(CONFIG)
    (root / "specs" / "talk.py").write_text(TALK)
    yield root
    cli("delete", "--all", cwd=root)
    assert kill_leftovers(root) == [], "a task outlived its job"


def viewport(driver: Any, width: int, height: int, mobile: bool) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 2 if mobile else 1, "mobile": mobile},
    )


def no_horizontal_scroll(driver: Any) -> bool:
    return bool(driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth"))


def test_the_page_at_phone_and_wide_widths_and_a_log_link(browser: Any, cwd: Path) -> None:
    from selenium.webdriver.common.by import By

    # A file name with markup: the page must show it as text.
    (cwd / "specs" / "odd<b>name<i>.yaml").write_text(talking_job("trainer-with-a-long-name", 3))
    (cwd / "specs" / "small.yaml").write_text(talking_job("small", 1))
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5")
    try:
        wait_until(
            lambda: all(
                (status(cwd, n) or {}).get("phase") == "Running"
                for n in ("trainer-with-a-long-name", "small")
            )
        )
        browser.get(daemon.url + "/")
        viewport(browser, 375, 800, mobile=True)
        browser.get(daemon.url + "/")
        assert browser.execute_script("return window.innerWidth") == 375
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "trainer-with-a-long-name" in body and "small" in body
        assert "2 Running" in body
        assert "specs/odd<b>name<i>.yaml:1" in body, "markup from a file name is shown as text"
        assert browser.find_elements(By.CSS_SELECTOR, "main b, main i") == []
        assert "worker-2" in body and "running" in body
        assert "None → Pending" not in body and "Pending → Running" in body, "recent events listed"
        assert no_horizontal_scroll(browser), "the page scrolls sideways at 375 px"
        assert browser.find_elements(By.CSS_SELECTOR, "meta[name=viewport]")

        viewport(browser, 1440, 900, mobile=False)
        browser.get(daemon.url + "/?refresh=30")
        assert browser.execute_script("return window.innerWidth") == 1440
        cards = browser.find_elements(By.CSS_SELECTOR, "section.job")
        assert [c.get_attribute("id") for c in cards] == ["job-small", "job-trainer-with-a-long-name"]
        assert cards[0].rect["y"] == cards[1].rect["y"], "jobs side by side on a wide screen"
        assert no_horizontal_scroll(browser)
        assert (
            browser.find_element(By.CSS_SELECTOR, "meta[http-equiv=refresh]").get_attribute("content") == "30"
        )

        links = browser.find_elements(By.LINK_TEXT, "log")
        assert len(links) == 4
        target = next(a for a in links if a.get_attribute("href").endswith("/jobs/small/logs?task=worker-0"))
        target.click()
        wait_until(lambda: "/logs" in browser.current_url)
        assert browser.find_element(By.TAG_NAME, "body").text.strip() == "step 1 loss=<0.5> & done"
    finally:
        assert daemon.stop() == 0


LONG_FOLDER = "experiments/vision-team/resnet50-mixed-precision/long-running-sweeps"
BREAKS = """
const wraps = [], bad = [];
for (const el of document.querySelectorAll('.path')) {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let top = null, previous = null;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getClientRects()[0];
      if (!rect) continue;
      if (top !== null && rect.top > top + 1) {
        (previous === '/' ? wraps : bad).push(el.textContent + ' before ' + node.data.slice(i, i + 8));
      }
      top = rect.top;
      previous = node.data[i];
    }
  }
}
return [wraps, bad];
"""


def cards(driver: Any) -> dict[str, dict[str, Any]]:
    """Per job card: the count it states, its running task rows, its message."""
    return dict(
        driver.execute_script(
            """
            const out = {};
            for (const card of document.querySelectorAll('section.job')) {
              const rows = [...card.querySelectorAll('tr.task')];
              out[card.id] = {
                count: card.querySelector('.task-count').textContent,
                running: rows.filter(r => r.querySelector('td[data-label=state]').textContent.trim().startsWith('running')).length,
                rows: rows.length,
                text: card.innerText,
              };
            }
            return out;
            """
        )
    )


def test_cards_count_tasks_once_wrap_paths_at_slashes_and_refresh_until_told_not_to(
    browser: Any, cwd: Path
) -> None:
    """Issue 22 finding 8: one count of tasks (TensorBoard's among them), paths that wrap
    only after a "/" on a phone, ages, labels, requests and a log tail on each card, and an
    auto-refresh that a visitor turns off and the page remembers."""
    from selenium.webdriver.common.by import By

    folder = cwd / "specs" / LONG_FOLDER
    folder.mkdir(parents=True)
    (folder / "talk.py").write_text(TALK)
    board = (
        f"  tensorboard: {{logDir: /data/{LONG_FOLDER}/tensorboard-logs, command: [python, talk.py],"
        " resources: {cpus: 0.1, mem: 64}}\n"
    )
    labelled = talking_job("labelled-trainer", 3).replace(
        "metadata: {name: labelled-trainer}", "metadata: {name: labelled-trainer, labels: {team: vision}}"
    )
    (folder / "a-spec-with-a-long-name.yaml").write_text(labelled + board)
    daemon = Daemon(cwd, "--specs", "specs", "--interval", "5")
    try:
        wait_until(lambda: (status(cwd, "labelled-trainer") or {}).get("message") == "4 task(s) running", 90)
        viewport(browser, 375, 800, mobile=True)
        browser.get(daemon.url + "/")
        assert browser.execute_script("return window.innerWidth") == 375
        card = cards(browser)["job-labelled-trainer"]
        assert card["rows"] == 4 and card["running"] == 4  # 3 workers and TensorBoard
        assert card["count"] == "4 of 4 tasks running" and "4 task(s) running" in card["text"]
        assert "team=vision" in card["text"], "labels"
        for role in ("worker 3", "tensorboard 1"):
            assert f"{role} \u00d7 0.1 CPU, 64 MiB" in card["text"], "requested resources"
        assert "in all: 0.4 CPU, 256 MiB" in card["text"]
        assert re.search(r"started \d+ (s|min) ago", card["text"]), "the job's age"
        ages = browser.find_elements(By.CSS_SELECTOR, "#job-labelled-trainer td[data-label=started] time")
        assert len(ages) == 4 and all(re.fullmatch(r"\d+ (s|min) ago", a.text) for a in ages), "task ages"
        tail = browser.find_element(By.CSS_SELECTOR, "#job-labelled-trainer .tail pre")
        assert tail.text == "step 1 loss=<0.5> & done", "the log tail, as text"
        wraps, bad = browser.execute_script(BREAKS)
        assert bad == [], f"paths broken mid-word at 375 px: {bad}"
        assert wraps, "the long paths did wrap (after a /)"
        assert no_horizontal_scroll(browser)

        # Reloads by default; "stop reloading" is remembered for the next visit.
        refresh = browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
        assert [m.get_attribute("content") for m in refresh] == ["10"]
        browser.find_element(By.LINK_TEXT, "stop reloading").click()
        wait_until(lambda: browser.current_url.endswith("/?refresh=0"))
        assert browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]") == []
        browser.get(daemon.url + "/")
        assert browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]") == []
        assert "not reloading" in browser.find_element(By.ID, "refresh").text
        browser.find_element(By.LINK_TEXT, "30 s").click()
        wait_until(lambda: browser.current_url.endswith("/?refresh=30"))
        browser.get(daemon.url + "/")
        meta = browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")
        assert [m.get_attribute("content") for m in meta] == ["30"]
    finally:
        assert daemon.stop() == 0
