"""Launch configs from a plan: one emitter per format, each a module of ``searcher.emitters.formats``.

Adding a format = adding ``formats/<name>.py`` with an ``EMITTER`` (see ``base.Emitter``); the name
of the module is the name of the format. Listing the formats imports nothing heavy.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from searcher.emitters.base import Emitter

FORMATS_DIR = Path(__file__).resolve().parent / "formats"


def format_names() -> list[str]:
    import pkgutil  # here: explain reads searcher.emitters.versions, never the format list

    return sorted(
        m.name for m in pkgutil.iter_modules([str(FORMATS_DIR)]) if not m.name.startswith("_")
    )


def get_emitter(name: str) -> Emitter:
    from constraints.errors import unknown_name

    key = name.strip().lower()
    names = format_names()
    if key not in names:
        raise unknown_name("launch format", name, names, "fitplan launch --help")
    emitter: Emitter = importlib.import_module(f"searcher.emitters.formats.{key}").EMITTER
    return emitter
