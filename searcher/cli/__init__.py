"""The user surface: the ``fitplan`` parser, the command handlers and what they print."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fitplan`` entry point (imports the parser only when called, so startup stays fast)."""
    from searcher.cli.parser import main as run

    return run(argv)
