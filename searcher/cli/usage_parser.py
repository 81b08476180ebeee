"""The parser class every ``fitplan`` command is parsed with (kept out of cli/parser.py)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn


class FitplanParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line with a hint, exit code 2; and adding an argument
    does not import shutil.

    ``add_argument`` makes a help formatter only to check the metavar against ``nargs``
    (argparse.py ``_get_formatter()._format_args``), and a formatter made without a width asks
    ``shutil.get_terminal_size`` for one: importing shutil (bz2, lzma) was ~5 ms of every cold
    command. That check never reads the width, so it gets a fixed one; help, usage and error
    text are formatted as before, at the terminal's width."""

    _checking_metavar = False

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        self._checking_metavar = True
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._checking_metavar = False

    def _get_formatter(self) -> argparse.HelpFormatter:
        if self._checking_metavar:
            return self.formatter_class(prog=self.prog, width=80)  # type: ignore[call-arg]
        return super()._get_formatter()

    def error(self, message: str) -> NoReturn:
        from searcher.validate import one_line

        message = _LONG_QUOTE.sub(lambda m: m.group(0)[:60] + "…'", message)
        sys.stderr.write(f"fitplan: error: {one_line(message)} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


#: a quoted value longer than an excerpt, in argparse's own messages ("invalid choice: '…'")
_LONG_QUOTE = re.compile(r"'[^']{60,}'")
