"""``fitplan trace-step`` / ``explain --exact``: bad input and a missing extra, before any work."""

from __future__ import annotations

import sys

import pytest

from searcher.cli import main

ARGS = ["--model", "llama-3.2-1b", "--method", "lora", "--seq-len", "512"]


@pytest.mark.parametrize("command", [["explain", "--exact"], ["trace-step"]])
def test_without_torch_one_line_names_the_extra(
    command: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert main([*command, *ARGS]) == 2
    err = capsys.readouterr().err.strip()
    assert "fitplan[measure]" in err
    assert "Traceback" not in err


def test_unsupported_configuration_is_refused_before_tracing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("torch")
    assert main(["trace-step", *ARGS, "--checkpointing", "selective"]) == 2
    err = capsys.readouterr().err
    assert "selective checkpointing" in err and "Traceback" not in err
