"""The terminal: the rich console every command prints to, and the progress bar of long runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console


def console(stderr: bool = False) -> Console:
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
