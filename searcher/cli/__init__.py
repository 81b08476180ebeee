"""The user surface: the ``fitplan`` parser, the command handlers and what they print."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fitplan`` entry point (imports the parser only when called, so startup stays fast).

    fitplan uses no pydantic plugins: without this, building the first model reads the entry
    points of every installed distribution (pydantic/plugin/_loader.py ``get_plugins``), about
    a tenth of a cold ``explain`` in a venv with torch and transformers. An explicit setting of
    ``PYDANTIC_DISABLE_PLUGINS`` by the user is kept."""
    import os

    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from searcher.cli.parser import main as run

    return run(argv)
