"""Every command's screen fits the terminal: drawn at 80, 100 and 200 columns, piped and in a
terminal, no line is wider than the width and no cell is cut ("…"); ``search --wide`` is the one
screen that may be wider, and it too cuts nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from searcher.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: a terminal's style codes (bold, dim) take no columns
ANSI = re.compile(r"\x1b\[[0-9;]*m")

COMMANDS = [
    ["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8"],
    ["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8", "--top", "60"],
    ["search", "--model", "gpt2", "--gpu", "rtx-4090", "--tokens", "1e9", "--top", "30"],
    ["search", "--model", "qwen2.5-7b", "--gpu", "t4", "--method", "qlora", "--stack", "none"],
    ["fits", "--gpu", "rtx-4090", "--models", "gpt2", "llama-3.2-1b", "qwen2.5-7b"],
    ["explain", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--detail"],
    ["explain", "--model", "llama-3.1-70b", "--gpu", "rtx-4090"],
    ["serve", "--model", "llama-2-7b", "--gpu", "a100-80gb", "--context", "2048"],
    ["gpus"],
    ["models"],
    ["fleet", "scenarios/fleet-example.yaml"],
    ["scenario", "run", "scenarios/24gb-card.yaml"],
]


def _screen(argv, width, terminal, capsys, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", str(width))
    for var in ("TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    if terminal:
        monkeypatch.setenv("TTY_COMPATIBLE", "1")
        monkeypatch.setenv("NO_COLOR", "1")
    main(argv)
    return ANSI.sub("", capsys.readouterr().out)


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
@pytest.mark.parametrize("width", [80, 100, 200])
@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a[:4]) for a in COMMANDS])
def test_the_screen_fits_and_cuts_nothing(argv, width, terminal, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    out = _screen(argv, width, terminal, capsys, monkeypatch)
    lines = out.splitlines()
    assert lines
    assert max(len(ln) for ln in lines) <= width
    cut = [ln for ln in lines if "…" in ln]
    assert not cut, cut[:3]


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_wide_search_cuts_nothing(terminal, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    argv = [*COMMANDS[0], "--wide"]
    out = _screen(argv, 100, terminal, capsys, monkeypatch)
    assert "…" not in out
    assert "recipe · optimizer" in out and "tier" in out  # every knob in its own column
