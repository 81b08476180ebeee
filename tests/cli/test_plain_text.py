"""The plain console (searcher/plain_text.py) writes what rich writes, byte for byte.

Rich is the reference: every command's text below is printed once through the plain console and
once through rich (``TTY_COMPATIBLE=0`` makes ``console()`` hand out rich's, uncoloured), and
random tables and long lines are drawn by both.
"""

from __future__ import annotations

import io
import random
import re
import sys

import pytest

rich_console = pytest.importorskip("rich.console")

from searcher.cli import main  # noqa: E402
from searcher.plain_text import NARROW, PlainConsole, Table, cells, wrap  # noqa: E402
from searcher.terminal import console  # noqa: E402

#: the searches plan for a fixed stack: what is importable differs between the dev venv and a
#: fresh ``pip install ".[test]"`` (there the 70B table's "needs" column is too wide to draw plainly)
STACK = ["--stack", "bitsandbytes,deepspeed"]

COMMANDS = [
    ["explain", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--method", "lora",
     "--micro-batch", "4", "--seq-len", "4096", "--checkpointing", "full"],
    ["explain", "--model", "qwen2.5-7b", "--gpu", "h100-sxm", "--method", "qlora", "--quant",
     "nf4", "--detail"],
    ["explain", "--model", "llama-3.1-70b", "--gpu", "rtx-4090"],
    ["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8", *STACK],
    ["search", "--model", "gpt2", "--gpu", "rtx-4090", "--tokens", "1e9", "--top", "30", *STACK],
    ["search", "--model", "llama-3.1-70b", "--gpu", "rtx-4090", *STACK],
    ["fits", "--gpu", "rtx-4090", "--models", "gpt2,llama-3.2-1b"],
    ["serve", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--context", "2048"],
    ["gpus"],
]  # fmt: skip

#: the seconds a search took (they differ run to run)
SECONDS = re.compile(r"\d+\.\d\d s\b")


def rich_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "0")


def rich_for(plain: PlainConsole) -> object:
    return rich_console.Console(
        stderr=plain.stderr, highlight=False, soft_wrap=False, width=plain.width
    )


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:3]) for a in COMMANDS])
def test_a_command_prints_what_rich_prints(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    assert isinstance(console(), PlainConsole)
    handed = []
    monkeypatch.setattr(PlainConsole, "rich", lambda self: handed.append(1) or rich_for(self))
    code = main(argv)
    if argv[0] in ("explain", "search"):
        assert not handed, "explain and search print without rich"
    monkeypatch.undo()
    monkeypatch.setenv("COLUMNS", "200")  # undo() took conftest's width too
    plain = capsys.readouterr()
    rich_reference(monkeypatch)
    assert not isinstance(console(), PlainConsole)
    assert main(argv) == code
    drawn = capsys.readouterr()
    assert SECONDS.sub("", plain.out) == SECONDS.sub("", drawn.out)
    assert plain.err == drawn.err


def rich_text(obj: object, width: int = 180) -> str:
    out = io.StringIO()
    c = rich_console.Console(file=out, highlight=False, soft_wrap=False, width=width)
    c.print(obj.__rich__() if isinstance(obj, Table) else obj)
    return out.getvalue()


def plain_text(obj: object, drawn_plainly: bool = False, width: int = 180) -> str:
    """What the plain console prints; ``drawn_plainly``: and it did so without rich."""
    c = PlainConsole(width=width)
    old, sys.stdout = sys.stdout, io.StringIO()
    try:
        c.print(obj)
        assert not drawn_plainly or c._rich is None, "handed to rich"
        return sys.stdout.getvalue()
    finally:
        sys.stdout = old


ALPHABET = "abcdefghij ABC 0123456789 .,;()-+=/%$" + "".join(sorted(NARROW))


def test_every_narrow_character_is_one_cell_for_rich() -> None:
    from rich.cells import cell_len

    assert all(cell_len(ch) == 1 for ch in NARROW)
    assert cells("a×b") == 3


@pytest.mark.parametrize("seed", range(60))
def test_random_tables_and_lines_match_rich(seed: int) -> None:
    rnd = random.Random(seed)

    def word(n: int) -> str:
        return "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, n))).strip() or "x"

    table = Table(
        title=word(rnd.choice([3, 40])) if rnd.random() < 0.7 else None, title_justify="left"
    )
    ncols = rnd.randint(1, 12)
    no_wrap = rnd.random() < 0.5  # too wide, such columns shrink (as the search's table)
    for _ in range(ncols):
        table.add_column(word(12), justify=rnd.choice(["left", "right"]), no_wrap=no_wrap)
    for _ in range(rnd.randint(1, 12)):
        row = [word(rnd.choice([8, 25, 40]) if ncols > 5 else 25) for _ in range(ncols)]
        if rnd.random() < 0.3:
            row[0] = f"[bold]{row[0]}[/]"
        table.add_row(*row)
        if rnd.random() < 0.2:
            table.add_section()
    # ≤ 5 columns of ≤ 40 cells fit in 180; a title of ≤ 3 cells fits any table
    plainly = ncols <= 5 and len(table.title or "") <= 3
    assert plain_text(table, drawn_plainly=plainly) == rich_text(table)
    # narrower: wrapping columns give up their width first, their cells wrap (as rich's)
    for width in (60, 80, 100):
        assert plain_text(table, width=width) == rich_text(table, width=width), width

    words = [word(rnd.choice([3, 10, 30])) for _ in range(rnd.randint(1, 80))]
    line = " ".join(f"[dim]{w}[/]" if rnd.random() < 0.1 else w for w in words)
    assert plain_text(line, drawn_plainly=True) == rich_text(line)


def test_a_long_line_breaks_where_rich_breaks() -> None:
    line = " ".join(["word"] * 60) + " " + "x" * 170
    assert wrap(line, 180) == [p for p in rich_text(line).split("\n") if p]


def test_what_it_cannot_draw_goes_to_rich() -> None:
    for text in (
        "[link=x]y[/]",
        "a :smile: b",
        "\\[bold]",
        "tab\there",
        "wide 漢字",
        "[bold red]a[/bold red] b",
    ):
        assert plain_text(text) == rich_text(text), text
    from rich.errors import MarkupError

    with pytest.raises(MarkupError):  # rich's own error for a tag that closes nothing
        plain_text("[/]")
