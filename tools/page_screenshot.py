"""Screenshot a fitplan HTML page in headless chromium (the README's docs/page-search.png).

python tools/page_screenshot.py page.html docs/page-search.png [member-index]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def main(page: str, png: str, member: int | None = None) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1300,1150",
        f"--user-data-dir={tempfile.mkdtemp(prefix='fitplan-shot-')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(Path(page).resolve().as_uri())
        if member is not None:
            driver.execute_script(f"window.fitplanSelect({member})")
        driver.save_screenshot(png)
    finally:
        driver.quit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
