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


@pytest.mark.parametrize(
    ("method", "expected"), [(["--method", "lora"], "fp32"), (["--method", "qlora"], "fp32")]
)
def test_exact_traces_the_adapter_dtype_the_analytic_model_counted(
    method: list[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # unpinned, fitplan counts PEFT's fp32 adapters (autocast_adapter_dtype=True) and, for QLoRA,
    # PEFT's recipe; the trace is pinned to what was counted, whatever the tracer's defaults
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import searcher.truth.step_trace as step_trace
    from constraints.errors import FitplanError

    seen = []

    def fake_trace(spec, cfg, **_kw):  # type: ignore[no-untyped-def]
        seen.append(cfg)
        raise FitplanError("traced")

    monkeypatch.setattr(step_trace, "trace_step", fake_trace)
    args = ["--model", "llama-3.2-1b", *method, "--recipe", "bf16-torch", "--seq-len", "512"]
    assert main(["explain", "--exact", *args]) == 2
    assert [c.adapter_dtype for c in seen] == [expected]
