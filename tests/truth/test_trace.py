"""fitplan's activation lists against the real Hugging Face models, traced on the meta device.

The traced numbers come from PyTorch autograd running the transformers implementation (the bytes
of every storage saved for backward, parameters excluded), not from fitplan's lists, so they are an
independent check. Flash attention is emulated as the CUDA kernel saves it (see searcher/truth/cuda_emulation.py).
The per-layer per-token coefficients do not depend on the layer count, so two layers are traced
at the models' real widths (meta tensors cost no memory).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from searcher.cli import main
from searcher.truth.trace import MODES, trace

pytestmark = pytest.mark.heavy

#: per layer per token, trace vs fitplan: the lists omit only routing bookkeeping of MoE layers
#: (top-k indices and weights, < 0.2 %) and a few bytes of constants; 0.5 % bounds both
TOLERANCE = 0.005

FAMILIES = [
    "llama-3.1-8b",
    "qwen2.5-0.5b",
    "gemma-2-2b",
    "mistral-7b-v0.1",
    "mixtral-8x7b",
    "gpt2",
    "phi-3-mini-4k",
]


@pytest.mark.parametrize("model", FAMILIES)
def test_activation_lists_agree_with_the_trace(model: str) -> None:
    r = trace(model, layers=2, batch=2, seq_len=128)
    assert r.params_traced == r.params_inventory  # exact parameter count, full-size model
    assert [(m.attention, m.checkpointing) for m in r.modes] == list(MODES)
    for m in r.modes:
        assert m.layer_bytes, (model, m.attention, m.checkpointing, m.note)
        for block, traced in m.layer_bytes.items():
            assert m.analytic_bytes[block] == pytest.approx(traced, rel=TOLERANCE), (
                model,
                m.attention,
                m.checkpointing,
                block,
            )


def test_llama_layer_by_hand() -> None:
    """Llama-3.1-8B, bf16, flash: per token per layer, worked by hand from the HF code:
    2 RMSNorms × (4h fp32 upcast + 4 rsqrt + 2h normalised) + 2 × 2h matmul inputs
    + q 2·4096 + k, v 2·1024 each + output 2·4096 + lse 4·32 + SwiGLU 4 × 2·14336."""
    h, i = 4096, 14336
    by_hand = (
        2 * (4 * h + 4 + 2 * h) + 2 * 2 * h + 2 * (4096 + 2 * 1024 + 4096) + 4 * 32 + 4 * 2 * i
    )
    r = trace("llama-3.1-8b", modes=(("flash", "none"),), layers=2)
    assert r.modes[0].layer_bytes["dense"] == by_hand


def test_flash_emulation_removes_the_s2_scores() -> None:
    """Eager attention saves the scores (grows with s); the emulated flash kernel does not."""
    short = trace("gpt2", modes=(("flash", "none"), ("eager", "none")), layers=1, seq_len=64)
    long = trace("gpt2", modes=(("flash", "none"), ("eager", "none")), layers=1, seq_len=256)
    assert short.modes[0].layer_bytes == long.modes[0].layer_bytes
    assert long.modes[1].layer_bytes["dense"] > short.modes[1].layer_bytes["dense"]


def test_trace_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "qwen2.5-0.5b", "--attention", "flash", "--checkpointing", "none"]) == 0
    out = capsys.readouterr().out
    assert "494,032,768" in out and "+0.0" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["trace", "no-such-model"], "unknown model"),
        (["trace", "gpt2", "--layers", "0"], "--layers: 0 must be positive"),
        (
            ["trace", "gpt2", "--attention", "flash", "--checkpointing", "selective"],
            "no traced mode",
        ),
    ],
)
def test_trace_bad_input(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


#: one model of every other family in the catalog; a mode may be skipped only for these reasons
OTHER_FAMILIES = [
    "qwen3-0.6b",
    "qwen3-30b-a3b",
    "deepseek-v3",
    "falcon-7b",
    "opt-1.3b",
    "olmo-7b",
    "olmo-2-7b",
    "flan-t5-base",
    "bert-base-uncased",
]
SKIPS = {
    ("flan-t5-base", "flash", "none"): "FlashAttention cannot take",
    ("flan-t5-base", "flash", "full"): "FlashAttention cannot take",
}


@pytest.mark.parametrize("model", OTHER_FAMILIES)
def test_every_other_catalog_family_agrees(model: str) -> None:
    r = trace(model, layers=2, batch=2, seq_len=128)
    assert r.params_traced == r.params_inventory
    for m in r.modes:
        skip = SKIPS.get((model, m.attention, m.checkpointing))
        if skip is not None:
            assert not m.layer_bytes and skip in m.note
            continue
        for block, traced in m.layer_bytes.items():
            assert m.analytic_bytes[block] == pytest.approx(traced, rel=TOLERANCE), (
                model,
                m.attention,
                m.checkpointing,
                block,
            )
