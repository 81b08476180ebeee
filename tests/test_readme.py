"""The README tells the truth: its commands run, and the output it quotes is what they print.

Each ``fitplan`` line of the README's bash blocks runs (files it names are the user's own and
stand in as placeholders: those lines are skipped); the quoted outputs are compared line by line
with a fresh run at 100 columns (table rows and verdicts; the ``assumed:`` paragraph names the
versions installed, so it may differ)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from searcher.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)
#: a line names a file of the user's (or a folder an earlier line would write): not runnable here
PLACEHOLDERS = ("axolotl.yaml", "sft.yaml", "run/", "qlora/", "acc/", "…", "check ", "launch ")


def _commands() -> list[str]:
    out = []
    for lang, body in BLOCKS[1:]:  # the first block is the install line
        if lang != "bash":
            continue
        for line in body.splitlines():
            cmd = line.split("  #")[0].strip()
            if cmd.startswith("fitplan ") and not any(p in cmd for p in PLACEHOLDERS):
                out.append(cmd)
    return out


def _run(cmd: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "100")
    code = main(shlex.split(cmd)[1:])
    out = capsys.readouterr()
    assert code in (0, 1), (cmd, out.err)
    return out.out


@pytest.mark.parametrize("cmd", _commands())
def test_every_readme_command_runs(cmd: str, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert _run(cmd, capsys, monkeypatch)


def _quoted_after(command: str) -> list[str]:
    """The quoted lines (tables, verdicts, levers) of the text block after ``command``."""
    start = README.index(command)
    body = next(b for lang, b in BLOCKS if lang == "text" and README.index(b) > start)
    keep = ("│", "┃", "┏", "┗", "└", "room on", "does not fit", "fits:", "lever:", "config:")
    return [ln.rstrip() for ln in body.splitlines() if ln.startswith(keep) or "lever:" in ln]


@pytest.mark.parametrize(
    "command",
    [
        "fitplan explain --model llama-3.2-1b --gpu t4 --method lora --micro-batch 4 --seq-len 1024",
        "fitplan search --model llama-3.1-8b --gpu a100-80gb --gpus 8 --stack none",
    ],
)
def test_the_quoted_output_is_what_the_command_prints(command: str, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The search is quoted as a fresh install prints it (no optional package: --stack none)."""
    anchor = command.replace(" --stack none", "") if "search" in command else command
    quoted = _quoted_after(anchor if anchor in README else command)
    assert len(quoted) >= 5
    printed = {ln.rstrip() for ln in _run(command, capsys, monkeypatch).splitlines()}
    missing = [ln for ln in quoted if ln not in printed]
    assert not missing, missing
