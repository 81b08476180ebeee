"""The hand-written hostile corpus (tests/data/hostile/cases.jsonl): every command, every way an
argument or a file it reads can be wrong. Each case must be refused by the contract of issue 14
(see tests/conftest.py: exit 2, one short ``fitplan: error:`` line, no traceback, nothing on
stdout, no file changed, no hang), and the line must contain the case's ``needle``.

A case: ``{"id", "argv", "needle", "files": {relative path: {"text": …} | {"hex": …}}}``;
``{tmp}`` in argv is the case's own folder, where its files are written first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CASES_FILE = Path(__file__).resolve().parents[1] / "data" / "hostile" / "cases.jsonl"
CASES: list[dict[str, Any]] = [
    json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line
]


def materialise(case: dict[str, Any], tmp: Path) -> list[str]:
    for name, content in case.get("files", {}).items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if "hex" in content:
            path.write_bytes(bytes.fromhex(content["hex"]))
        else:
            path.write_bytes(content["text"].encode("utf-8"))
    return [a.replace("{tmp}", str(tmp)) for a in case["argv"]]


def test_the_corpus_is_large_and_covers_every_command() -> None:
    assert len(CASES) >= 400
    commands = {c["argv"][0] for c in CASES}
    for command in (
        "explain",
        "search",
        "fits",
        "fleet",
        "scenario",
        "launch",
        "accuracy",
        "measure",
        "autotune",
        "trace",
        "models",
        "gpus",
        "check",
        "serve",
        "max",
        "trace-step",
    ):
        assert command in commands, command


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_case_is_refused_cleanly(case: dict[str, Any], tmp_path: Path, refuse) -> None:
    argv = materialise(case, tmp_path)
    refuse(argv, folder=tmp_path, needle=case["needle"])
