"""The HTML page in a real headless browser: it loads with no console errors and fetches
nothing, the scatter has one point per front member, and clicking a point shows that member's
breakdown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from searcher.cli import main  # the function (import it before the parser module loads)

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
