"""Single-GPU A/B pairs from one published table each, as tests of predicted speed ratios.

Both rows of a pair ran on the same card with the same recipe, so the hardware mapping (peak,
clocks) cancels and the ratio tests the knob's physics. Measured tokens/s are the torchtune
README's (pytorch/torchtune README.md, "Memory and training speed" and "Optimization flags"
tables, 2024-09 onward: rows 337-354 of constraints/data/calibration/measured_throughput.csv);
the configurations are those rows' as fitplan maps them. Tolerance: 5 % of the ratio.
"""

from __future__ import annotations

from functools import cache

import pytest

from constraints.speed import speed_of
from searcher.truth.cases import ThroughputCase
from searcher.truth.throughput_rows import load_throughput_cases

TOLERANCE = 0.05


@cache
def _cases() -> dict[str, ThroughputCase]:
    return {c.row_id: c for c in load_throughput_cases()}


def _ratios(a: str, b: str) -> tuple[float, float]:
    """(predicted, measured) tokens/s of row b over row a."""
    ca, cb = _cases()[a], _cases()[b]
    assert ca.spec and ca.config and ca.gpu and cb.spec and cb.config and cb.gpu
    pa = speed_of(ca.spec, ca.config, ca.gpu).tokens_per_s_per_gpu
    pb = speed_of(cb.spec, cb.config, cb.gpu).tokens_per_s_per_gpu
    ma, mb = ca.measured_tokens_per_s_per_gpu, cb.measured_tokens_per_s_per_gpu
    assert ma and mb
    return pb / pa, mb / ma


def test_full_activation_checkpointing_vs_none_compiled_a100() -> None:
    """Llama 3.2 3B full fine-tune, packed 2 × 4096, compiled, chunked CE: + activation
    checkpointing 9174 → 7210 tokens/s (one recomputed forward)."""
    predicted, measured = _ratios("tp-348", "tp-349")
    assert predicted == pytest.approx(measured, rel=TOLERANCE)


def test_compile_vs_eager_a100() -> None:
    """Llama 3.2 3B full fine-tune, packed 2 × 4096: + compile 7075 → 8998 tokens/s (1.27).
    torchtune's eager layer, traced (tools/trace_elementwise.py), moves 14.1× the bytes it saves
    (fp32 RMSNorm chain, fp32 RoPE, SwiGLU); with the fitted K_ELEMENTWISE of MPT's one-kernel
    LayerNorm the pair read 1.08."""
    predicted, measured = _ratios("tp-346", "tp-347")
    assert predicted == pytest.approx(measured, rel=TOLERANCE)


@pytest.mark.xfail(
    strict=True,
    reason="known gap: predicted 0.93, measured 0.78. torchtune's QLoRA base is torchao's NF4Tensor "
    "(dequantised by get_original_weight in torch ops), not bitsandbytes' fused kernel that "
    "fitplan models for nf4-dq; the same README's A100 3B pair (8210 → 8035, 0.98) implies a far "
    "smaller per-weight cost, so no one per-weight figure fits both tables",
)
def test_qlora_vs_lora_rtx4090() -> None:
    """Llama 3.1 8B, 2 × 2048 packed, compiled: LoRA 3083 → QLoRA 2413 tokens/s."""
    predicted, measured = _ratios("tp-339", "tp-341")
    assert predicted == pytest.approx(measured, rel=TOLERANCE)


@pytest.mark.xfail(
    strict=True,
    reason="known gap: predicted 1.35, measured 1.87 (LoRA over full fine-tune). At the measured "
    "LoRA rate the 4090 would run its GEMMs at ≥ 0.8 of the 165.2 TFLOPS dense peak while the full "
    "row runs at 0.6: the full row (paged 8-bit AdamW stepped in backward on a 24 GB card) pays "
    "more than fitplan's paging term charges",
)
def test_lora_vs_full_rtx4090() -> None:
    """Llama 3.1 8B, 2 × 2048 packed, compiled: full 1650 → LoRA 3083 tokens/s."""
    predicted, measured = _ratios("tp-337", "tp-339")
    assert predicted == pytest.approx(measured, rel=TOLERANCE)
