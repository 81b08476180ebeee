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


class Unbuilt:
    """What argparse holds for a command this process does not run, in place of its parser:
    argparse reads only the chosen command's parser, and the others' names and help are kept
    apart from it (``_ChoicesPseudoAction``). An ArgumentParser costs ~0.2 ms to make, most of
    it gettext looking for translations of its three built-in strings on disk; 16 of them were
    a third of building explain's parser."""

    def __init__(self, **_kw: Any) -> None:
        pass


class OnlyCommand:
    """The subcommands action, building in full only the parser of ``command`` (None: all):
    every other command is registered with its name and help (so ``fitplan --help`` and an
    unknown command's message list them all), neither its arguments nor its parser."""

    def __init__(self, sub: argparse._SubParsersAction, command: str | None) -> None:
        self.sub, self.command = sub, command

    def add_parser(self, name: str, **kw: Any) -> Any:
        if self.command in (None, name):
            return self.sub.add_parser(name, **kw)
        parser_class = self.sub._parser_class
        self.sub._parser_class = Unbuilt
        try:
            self.sub.add_parser(name, **kw)  # argparse's own bookkeeping: name, help, aliases
        finally:
            self.sub._parser_class = parser_class
        return Absorb()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sub, name)
