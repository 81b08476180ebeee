"""Plain text as rich writes it when the output is not a terminal, without importing rich.

Importing rich and rendering through it took about a tenth of a cold ``fitplan explain`` or
``search``; piped or captured, rich draws no colour, so its output is text this module can write
itself. :class:`PlainConsole` prints what it can reproduce exactly — markup with the plain style
tags fitplan uses (``[bold]…[/]``), and :class:`Table` (rich's default heavy-head box, cells
that fit their column, the table within the width) — and hands anything else (a wrap, an emoji
code, an unknown tag, a rich renderable) to a real rich Console made on first need, writing to the
same stream. tests/cli/test_plain_text.py holds the output byte-identical to rich's.
"""

from __future__ import annotations

import re
import sys
from typing import Any

#: rich's markup tag (rich/markup.py RE_TAGS) and emoji code (rich/_emoji_replace.py)
_TAG = re.compile(r"((\\*)\[([a-z#/@][^[]*?)])")
_EMOJI = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")
#: the style words fitplan's markup uses; a tag of anything else goes to rich
_STYLES = frozenset({"bold", "dim", "italic", "red", "green", "yellow", "cyan", "blue", "magenta"})
#: characters one cell wide in rich's cell table (tests/cli/test_plain_text.py checks each)
NARROW = frozenset("×·—–−≥≤→←▶✗✓█░…±≈µ°′″’‘“”•")


class Unplain(Exception):
    """The text needs rich (a wrap, a tag, a wide character …)."""


def cells(text: str) -> int:
    """Width in terminal cells, for text of one-cell characters only."""
    for ch in text:
        if not (" " <= ch <= "~" or ch in NARROW):
            raise Unplain(ch)
    return len(text)


def strip_markup(text: str) -> str:
    """``text`` without its style tags, as rich renders it uncoloured."""
    if _EMOJI.search(text):
        raise Unplain("emoji code")
    out: list[str] = []
    open_tags: list[str] = []
    pos = 0
    for m in _TAG.finditer(text):
        escapes, tag = m.group(2), m.group(3)
        if escapes:
            raise Unplain("escaped tag")
        if tag.startswith("/"):
            name = tag[1:].strip()
            if not open_tags or (name and open_tags[-1] != name):
                raise Unplain("unbalanced tag")
            open_tags.pop()
        elif set(tag.split()) <= _STYLES:
            open_tags.append(tag)
        else:
            raise Unplain(tag)
        out.append(text[pos : m.start()])
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


_WORD = re.compile(r"\s*\S+\s*")


def wrap(line: str, width: int) -> list[str]:
    """``line`` broken before the words that do not fit, as rich's ``divide_line`` does (each
    piece keeps its trailing space); a word wider than the line is rich's to fold."""
    if cells(line) <= width:
        return [line]
    pieces, start, offset = [], 0, 0
    for m in _WORD.finditer(line):
        word = m.group(0)
        length = cells(word.rstrip())
        if width - offset >= length:
            offset += cells(word)
        elif length > width:
            raise Unplain("fold")
        elif offset and m.start():
            pieces.append(line[start : m.start()])
            start, offset = m.start(), cells(word)
    pieces.append(line[start:])
    return [_rstrip_end(p, width) for p in pieces]


def _rstrip_end(piece: str, width: int) -> str:
    """rich's ``Text.rstrip_end``: trailing space beyond ``width`` cropped, the rest kept."""
    excess = len(piece) - width
    if excess <= 0:
        return piece
    spaces = len(piece) - len(piece.rstrip())
    return piece[: len(piece) - min(spaces, excess)]


class Table:
    """The part of rich.table.Table fitplan uses, renderable plainly or by rich."""

    def __init__(self, title: str | None = None, title_justify: str = "center", **kw: Any):
        self.title, self.title_justify, self.kw = title, title_justify, kw
        self.columns: list[tuple[str, dict[str, Any]]] = []
        self.rows: list[list[str]] = []
        self.sections: set[int] = set()

    def add_column(self, header: str = "", **kw: Any) -> None:
        self.columns.append((header, kw))

    def add_row(self, *cells: str) -> None:
        self.rows.append(list(cells))

    def add_section(self) -> None:
        if self.rows:
            self.sections.add(len(self.rows) - 1)

    def __rich__(self) -> Any:
        """The same table as rich's (for a terminal, or what this module does not draw)."""
        from rich.table import Table as RichTable

        table = RichTable(title=self.title, title_justify=self.title_justify, **self.kw)  # type: ignore[arg-type]
        for header, kw in self.columns:
            table.add_column(header, **kw)
        for i, row in enumerate(self.rows):
            table.add_row(*row, end_section=i in self.sections)
        return table

    def lines(self, width: int) -> list[str]:
        """The table as rich draws it uncoloured (box.HEAVY_HEAD, padding 1), or Unplain.

        Too wide for ``width``, columns that may not wrap (``no_wrap``) give up one cell each in
        turn (rich's ``ratio_reduce``) and their cells end in "…"."""
        if self.kw or not self.rows:
            raise Unplain("table options")
        justify, no_wrap = [], []
        for _header, kw in self.columns:
            if set(kw) - {"justify", "no_wrap"} or kw.get("justify", "left") not in (
                "left",
                "right",
            ):
                raise Unplain("column options")
            justify.append(kw.get("justify", "left"))
            no_wrap.append(bool(kw.get("no_wrap")))
        head = [strip_markup(h) for h, _kw in self.columns]
        body = [[strip_markup(c) for c in row] for row in self.rows]
        for values in [head, *body]:
            if len(values) != len(head) or any("\n" in c or c != c.rstrip() for c in values):
                raise Unplain("cells")
        widths = [max(cells(c) for c in column) + 2 for column in zip(head, *body, strict=True)]
        room = width - len(widths) - 1  # less the borders
        if sum(widths) > room:
            # rich's Table._calculate_column_widths: the wrapping columns give up their width
            # first (_collapse_widths), then every column evenly
            widths = collapse_widths(widths, [not n for n in no_wrap], room)
            if sum(widths) > room:
                widths = ratio_reduce(sum(widths) - room, widths)
        inner = [w - 2 for w in widths]
        if min(inner) < 0:
            raise Unplain("too narrow")
        total = sum(widths) + len(widths) + 1

        def line(left: str, fill: str, mid: str, right: str) -> str:
            return left + mid.join(fill * w for w in widths) + right

        def cell_lines(v: str, w: int, nowrap: bool) -> list[str]:
            if len(v) <= w or w == 0:
                return [v if len(v) <= w else ""]  # a column reduced to its padding is blank
            return [v[: w - 1] + "…"] if nowrap else wrap(v, w)

        def row(values: list[str], bar: str) -> str:
            stacks = [cell_lines(v, w, n) for v, w, n in zip(values, inner, no_wrap, strict=True)]
            out = []
            for k in range(max(len(s) for s in stacks)):
                padded = [
                    (s[k] if k < len(s) else "").ljust(w)
                    if j == "left"
                    else (s[k] if k < len(s) else "").rjust(w)
                    for s, w, j in zip(stacks, inner, justify, strict=True)
                ]
                out.append(bar + bar.join(f" {p} " for p in padded) + bar)
            return "\n".join(out)

        out = []
        if self.title is not None:
            title = strip_markup(self.title)
            if cells(title) > total or self.title_justify != "left":
                raise Unplain("title")
            out.append(title.ljust(total))
        out += [line("┏", "━", "┳", "┓"), row(head, "┃"), line("┡", "━", "╇", "┩")]
        for i, values in enumerate(body):
            out.append(row(values, "│"))
            if i in self.sections and i < len(body) - 1:  # rich draws none after the last row
                out.append(line("├", "─", "┼", "┤"))
        out.append(line("└", "─", "┴", "┘"))
        return out


def collapse_widths(widths: list[int], wrapable: list[bool], room: int) -> list[int]:
    """rich's ``Table._collapse_widths``: the widest wrapping column gives up cells down to the
    next widest, in turn, until the table fits ``room`` or no wrapping column is left wider."""
    widths = list(widths)
    excess = sum(widths) - room
    while any(wrapable) and excess > 0:
        widest = max(w for w, a in zip(widths, wrapable, strict=True) if a)
        second = max(w if a and w != widest else 0 for w, a in zip(widths, wrapable, strict=True))
        if widest == second:
            break
        take = min(excess, widest - second)
        ratios = [1 if (w == widest and a) else 0 for w, a in zip(widths, wrapable, strict=True)]
        remaining, share = excess, ratios.count(1)
        for i, r in enumerate(ratios):
            if r:  # rich's _ratio.ratio_reduce with equal ratios, each at most ``take``
                cut = min(take, round(remaining / share))
                widths[i] -= cut
                remaining -= cut
                share -= 1
        excess = sum(widths) - room
    return widths


def ratio_reduce(excess: int, widths: list[int]) -> list[int]:
    """rich's ``_ratio.ratio_reduce(excess, [1] * n, widths, widths)``: ``excess`` cells taken
    from the columns as evenly as rounding allows, the first columns first."""
    remaining, share, out = excess, len(widths), []
    for w in widths:
        taken = min(w, round(remaining / share))
        out.append(w - taken)
        remaining -= taken
        share -= 1
    return out


class PlainConsole:
    """A console for output that is not a terminal: ``print`` as rich's (see the module
    docstring), rich itself for what it cannot draw."""

    is_terminal = False

    def __init__(self, stderr: bool = False, width: int = 100) -> None:
        self.stderr, self.width = stderr, width
        self._rich: Any = None

    @property
    def file(self) -> Any:
        return sys.stderr if self.stderr else sys.stdout

    def rich(self) -> Any:
        """The rich Console this one stands for (made on first need)."""
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(
                stderr=self.stderr, highlight=False, soft_wrap=False, width=self.width
            )
        return self._rich

    def print(self, *objects: Any, **kw: Any) -> None:
        try:
            text = self._plain(objects, kw)
        except Unplain:
            self.rich().print(*objects, **kw)
            return
        self.file.write(text)

    def _plain(self, objects: tuple[Any, ...], kw: dict[str, Any]) -> str:
        if kw or len(objects) > 1:
            raise Unplain("options")
        if not objects:
            return "\n"
        obj = objects[0]
        if isinstance(obj, Table):
            return "".join(f"{ln}\n" for ln in obj.lines(self.width))
        if not isinstance(obj, str) or "\t" in obj or "\r" in obj:
            raise Unplain("object")
        out = []
        for ln in strip_markup(obj).split("\n"):
            if ln != ln.rstrip(" "):
                raise Unplain("trailing space")
            out += wrap(ln, self.width)
        return "".join(f"{ln}\n" for ln in out)

    def __getattr__(self, name: str) -> Any:  # anything else rich's Console does
        return getattr(self.rich(), name)
