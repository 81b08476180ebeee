"""The HTML page in a real headless browser: it loads with no console errors and fetches
nothing, the scatter has one point per front member, and clicking a point shows that member's
breakdown. Debian's chromium driven by selenium; skipped without one, unless
FITPLAN_BROWSER_REQUIRED=1."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from searcher.cli import main  # the function (import it before the parser module loads)

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)


def _missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if not any(os.path.exists(p) for p in CHROMIUM) or not os.path.exists(CHROMEDRIVER):
        return "no chromium/chromedriver (apt-get install -y chromium chromium-driver)"
    return None


@pytest.fixture
def browser() -> Iterator[Any]:
    with _chromium() as driver:
        yield driver


@contextmanager
def _chromium() -> Iterator[Any]:
    why = _missing()
    if why:
        if os.environ.get("FITPLAN_BROWSER_REQUIRED") == "1":
            pytest.fail(f"FITPLAN_BROWSER_REQUIRED=1 but {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fitplan-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = next(p for p in CHROMIUM if os.path.exists(p))
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


ARGV = [
    "search",
    "--model",
    "llama-3.2-1b",
    "--gpu",
    "rtx-4090",
    "--target-batch",
    "8",
    "--seq-len",
    "1024",
]


@pytest.fixture(scope="module")
def search_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    pytest.importorskip("plotly")
    from searcher.cli.commands import run_cli_search
    from searcher.cli.parser import build_parser
    from searcher.report.page import write_page
    from searcher.report.search import search_page_data

    args = build_parser().parse_args(ARGV)
    result = run_cli_search(args)
    assert len(result.front) >= 2
    path = tmp_path_factory.mktemp("page") / "search.html"
    write_page(search_page_data(result, ARGV), str(path))
    return path, len(result.front)


def _errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_page_loads_without_console_errors_or_fetches(search_page, browser):
    path, _ = search_page
    driver = browser
    driver.get(path.as_uri())
    assert driver.execute_script("return typeof Plotly") == "object"
    assert _errors(driver) == []
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert fetched == []  # plotly is inlined: nothing is fetched at view time


def test_scatter_has_one_point_per_front_member(search_page, browser):
    path, n = search_page
    driver = browser
    driver.get(path.as_uri())
    points = driver.execute_script(
        "return document.getElementById('scatter').data.reduce((n, t) => n + t.x.length, 0)"
    )
    drawn = driver.find_elements("css selector", "#scatter .scatterlayer .points path")
    assert points == n
    assert len(drawn) == n


def test_clicking_a_point_shows_that_members_breakdown(search_page, browser):
    from selenium.webdriver.common.action_chains import ActionChains

    path, n = search_page
    driver = browser
    driver.get(path.as_uri())
    # the last point of the last trace: a member other than the first, selected at load
    target = driver.execute_script(
        "const d = document.getElementById('scatter').data; const t = d[d.length - 1];"
        "return t.customdata[t.customdata.length - 1]"
    )
    assert target != 0 or n == 1
    point = driver.find_elements("css selector", "#scatter .scatterlayer .trace")[-1]
    dots = point.find_elements("css selector", ".points path")
    ActionChains(driver).move_to_element(dots[-1]).pause(0.3).click().perform()
    shown = driver.find_element("css selector", "#breakdown table").get_attribute("data-member")
    title = driver.find_element("id", "sel-title").text
    label = driver.execute_script(f"return FITPLAN.members[{target}].label")
    command = driver.find_element("id", "command").text
    assert int(shown) == target
    assert title.endswith(label)
    assert f"--pick {target + 1}" in command
    assert "weights" in driver.find_element("id", "breakdown").text
    assert _errors(driver) == []
    shot = os.environ.get("FITPLAN_SCREENSHOT")
    if shot:
        driver.save_screenshot(shot)


def test_serve_page_click_shows_the_vllm_command(tmp_path: Path, browser) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    page = tmp_path / "serve.html"
    argv = ["serve", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192"]
    assert main([*argv, "--report", str(page)]) == 0
    browser.get(page.as_uri())
    assert _errors(browser) == []
    first = browser.find_element("id", "command").text
    assert "--tensor-parallel-size 1" in first  # the plan asked for: TP 1, selected at load
    dots = browser.find_elements("css selector", "#scatter .scatterlayer .points path")
    assert len(dots) == 4  # TP 1, 2, 4, 8
    ActionChains(browser).move_to_element(dots[-1]).pause(0.3).click().perform()
    shown = int(
        browser.find_element("css selector", "#breakdown table").get_attribute("data-member")
    )
    tp = browser.execute_script(f"return FITPLAN.members[{shown}].label")
    assert shown != 0 and f"--tensor-parallel-size {tp.split()[1].rstrip(':')}" in (
        browser.find_element("id", "command").text
    )
