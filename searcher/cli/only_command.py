"""Build only the running command's arguments: a cold start need not build every subcommand."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


class Absorb:
    """Stands for the parser of a command this process does not run: it takes every
    add_argument / add_argument_group / set_defaults … call and keeps nothing."""

    def __getattr__(self, _name: str) -> Callable[..., Absorb]:
        return lambda *_args, **_kw: self


class OnlyCommand:
    """The subcommands action, building in full only the parser of ``command`` (None: all):
    every other command is registered with its name and help (so ``fitplan --help`` and an
    unknown command's message list them all), its arguments not."""

    def __init__(self, sub: argparse._SubParsersAction, command: str | None) -> None:
        self.sub, self.command = sub, command

    def add_parser(self, name: str, **kw: Any) -> Any:
        parser = self.sub.add_parser(name, **kw)
        return parser if self.command in (None, name) else Absorb()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sub, name)
