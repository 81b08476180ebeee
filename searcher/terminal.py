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


def console(stderr: bool = False) -> Console:
    """The console commands print to: rich's on a terminal; otherwise (piped, captured) the
    same text drawn without importing rich (searcher/plain_text.py), width 180."""
    if plain_output(stderr):
        from searcher.plain_text import PlainConsole

        return PlainConsole(stderr=stderr, width=180)  # type: ignore[return-value]
    from rich.console import Console

    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=180)
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
