"""The released versions each launch format is written for (data/versions.json, with its source).

Its own module so that the pip hint under a search or an explanation (searcher/cli/stack.py)
reads the pins without importing the emitters."""

from __future__ import annotations

import json
from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parent / "data" / "versions.json"


def released_versions(group: str) -> dict[str, str]:
    pins: dict[str, str] = json.loads(VERSIONS_FILE.read_text(encoding="utf-8"))[group]
    return pins
