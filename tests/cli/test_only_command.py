"""``build_parser(command)`` builds that command as the full parser does, and the rest as names."""

from __future__ import annotations

import argparse

import pytest

from searcher.cli.only_command import Unbuilt
from searcher.cli.parser import build_parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def shape(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """Every argument's strings, destination, default, choices and help, nested commands too."""
    out: list[tuple[object, ...]] = []
    for a in parser._actions:
        out.append((tuple(a.option_strings), a.dest, repr(a.default), repr(a.choices), a.help))
        if isinstance(a, argparse._SubParsersAction):
            out += [(name, *shape(p)) for name, p in a.choices.items()]
    return out


FULL = subcommands(build_parser())


@pytest.mark.parametrize("command", sorted(FULL))
def test_the_running_command_is_built_in_full(command: str) -> None:
    only = build_parser(command)
    built = subcommands(only)
    assert list(built) == list(FULL)  # every command still listed
    assert shape(built[command]) == shape(FULL[command])
    others = [p for name, p in built.items() if name != command]
    assert all(isinstance(p, Unbuilt) for p in others)  # not built: neither parser nor arguments
    assert only.format_help() == build_parser().format_help()


@pytest.mark.parametrize("argv", [["explian"], ["explain", "--modle", "x"], ["serve", "-h"]])
def test_messages_as_the_full_parser(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown command, an unknown option, a command's help: the same text either way."""
    said = []
    for parser in (build_parser(argv[0]), build_parser()):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        said.append(capsys.readouterr())
    assert said[0] == said[1]
