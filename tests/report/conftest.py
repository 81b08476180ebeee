"""A headless Debian chromium driven by selenium, for the page tests (skipped without one,
unless FITPLAN_BROWSER_REQUIRED=1)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

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
