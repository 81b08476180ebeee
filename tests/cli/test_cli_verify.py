"""``fitplan search --verify K``: bad input and a missing extra refused before the search; the
traced figure beside the analytic one (heavy)."""

from __future__ import annotations

import json
import sys

import pytest

from searcher.cli import main

ARGS = ["search", "--model", "qwen2.5-0.5b", "--gpu", "a100-80gb", "--gpus", "1"]
ARGS += ["--target-batch", "4", "--seq-len", "512", "--loss", "standard"]


def test_without_torch_one_line_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert main([*ARGS, "--verify", "2"]) == 2
    out, err = capsys.readouterr()
    assert "fitplan[measure]" in err and err.strip().count("\n") == 0
    assert "Traceback" not in err
    assert out == ""  # refused before the search printed anything


@pytest.mark.parametrize("value", ["0", "-1", "two", "1e3"])
def test_bad_count_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--verify", value]) == 2
    out, err = capsys.readouterr()
    assert "--verify" in err and "Traceback" not in err and out == ""


def test_raw_params_cannot_be_traced(capsys: pytest.CaptureFixture[str]) -> None:
    raw = ["search", "--params", "1e9", "--gpu", "a100-80gb", "--target-batch", "4"]
    assert main([*raw, "--seq-len", "512", "--verify", "1"]) == 2
    err = capsys.readouterr().err
    assert "--params" in err and "Traceback" not in err


@pytest.mark.heavy
def test_verified_member_agrees_with_its_trace(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    pins = ["--method", "lora", "--recipe", "bf16-torch", "--attention", "sdpa"]
    assert main([*ARGS, *pins, "--verify", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["verified"]
    assert row["rank"] == 1 and row["not_traced"] is None
    # the trace is the independent figure; the goal holds every sampled row within 5 %
    assert row["traced_peak_allocated_bytes"] > 0
    assert abs(row["error"]) <= 0.05, row
