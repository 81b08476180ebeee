"""The terminal: the rich console every command prints to, and the progress bar of long runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def plain_output(stderr: bool = False) -> bool:
    """Whether rich would draw to this stream without colour (not a terminal, as its
    ``Console.is_terminal`` decides: no TTY_COMPATIBLE / FORCE_COLOR, no IDLE, no Jupyter)."""
    if {"TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"} & set(os.environ):
        return False
    if getattr(sys.stdin, "__module__", "").startswith("idlelib") or "IPython" in sys.modules:
        return False
    isatty = getattr(sys.stderr if stderr else sys.stdout, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:
        return True


#: the width of output that goes to no terminal (piped, captured) when COLUMNS is not set
PIPED_WIDTH = 100


def output_width() -> int | None:
    """COLUMNS when it is a sensible width (20 to 1000 cells), else None (the terminal's own)."""
    raw = os.environ.get("COLUMNS", "").strip()
    return int(raw) if raw.isdigit() and 20 <= int(raw) <= 1000 else None


def console(stderr: bool = False) -> Console:
    """The console commands print to: rich's on a terminal (its width, or COLUMNS); otherwise
    (piped, captured) the same text drawn without importing rich (searcher/plain_text.py), at
    COLUMNS or :data:`PIPED_WIDTH` cells."""
    width = output_width()
    if plain_output(stderr):
        from searcher.plain_text import PlainConsole

        return PlainConsole(stderr=stderr, width=width or PIPED_WIDTH)  # type: ignore[return-value]
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=width or PIPED_WIDTH)
    return c


@contextmanager
def progress_reporter(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback that shows a bar on stderr once a run has taken more than a second."""
    import time

    start = time.perf_counter()
    state: dict[str, Any] = {}

    def report(done: int, total: int) -> None:
        if "bar" not in state:
            if time.perf_counter() - start < 1.0 or not console(stderr=True).is_terminal:
                return
            from rich.progress import Progress

            bar = Progress(console=console(stderr=True), transient=True)
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(label, total=total)
        state["bar"].update(state["task"], completed=done, total=total)

    try:
        yield report
    finally:
        if "bar" in state:
            state["bar"].stop()
