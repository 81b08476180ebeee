"""Published A/B pairs as tests of the predicted speed ratios (issue 12).

Each pair changes one knob on the same hardware, so what fitplan gets wrong about the hardware
(clocks of a power-capped part, the network) cancels and the ratio tests the knob's own physics.
The measured numbers are the sources' (each named); the predictions are fitplan's. Tolerance: 5 %
of the ratio.
"""

from __future__ import annotations

from typing import Any

import pytest

from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.speed import speed_of

TOLERANCE = 0.05
TORCHTITAN = "pytorch/torchtitan docs/performance.md (torchtitan 9dec370, 2024-12)"
TORCHAO = "pytorch/ao docs/source/workflows/training.md (e2e training benchmarks)"

# Llama 3.1 8B, FSDP over 8 GPUs, local batch 2 × 8192 tokens, selective AC (torchtitan Table 1)
TT_8B: dict[str, Any] = {
    "micro_batch": 2,
    "seq_len": 8192,
    "zero": 3,
    "dp": 8,
    "recipe": "amp",
    "checkpointing": "selective",
    "model_code": "torchtitan",
}
# torchao's H100 / B200 tables: batch 1 × 8192, compile, FSDP2, per-op SAC, 8 GPUs
AO_8B: dict[str, Any] = {**TT_8B, "micro_batch": 1, "kernels": "compile"}
FP8 = {"compute_dtype": "fp8"}
TORCHTITAN_2024 = "pytorch/torchtitan docs/performance.md (2024 revision: 64 A100 tables)"
# Llama 2 13B on 64 A100 80GB, FSDP2, local batch 2 × 4096, eager (torchtitan 2024 tables)
TT_13B: dict[str, Any] = {
    "micro_batch": 2,
    "seq_len": 4096,
    "zero": 3,
    "dp": 64,
    "recipe": "amp",
    "backend": "fsdp2",
    # train_configs/llama2_13b.toml at 1ea476e9f (2024-04): norm_type = "fused_rmsnorm"
    "model_code": "torchtitan-fused-rmsnorm",
}

TITAN_EAGER_GAP = pytest.mark.xfail(
    strict=True,
    reason=(
        "known gap: predicted 1.27, measured 1.16. torchtitan's eager layer (9dec370: unfused RMSNorm "
        "as in HF, complex-multiply RoPE) traces to 10.3x the bytes it saves, timed at the bandwidth "
        "HF's RMSNorm reaches on an A100 (ETA_EAGER_BANDWIDTH); the eager row comes out 4.7 % slow "
        "and the compiled one 4.8 % fast (its K_ELEMENTWISE_FUSED = 4 is a floor, not a trace), while "
        "the A100 torchtune pair (1.23 vs 1.27) and the A100 torchtitan rows agree with the trace"
    ),
)

PAIRS = [
    # (source, gpu, model, config A, config B, measured tokens/s A, B)
    pytest.param(f"{TORCHTITAN} Table 1: compile vs eager", "h100-96gb-500w", "llama-3.1-8b",
     TT_8B, {**TT_8B, "kernels": "compile"}, 5762, 6667, marks=TITAN_EAGER_GAP),
    pytest.param(f"{TORCHTITAN} Table 3 (128 GPUs): compile vs eager", "h100-96gb-500w",
     "llama-3.1-8b", {**TT_8B, "dp": 128}, {**TT_8B, "dp": 128, "kernels": "compile"}, 5605, 6514,
     marks=TITAN_EAGER_GAP),
    (f"{TORCHTITAN} Table 1: Float8 vs bf16, compiled", "h100-96gb-500w", "llama-3.1-8b",
     {**TT_8B, "kernels": "compile"}, {**TT_8B, "kernels": "compile", **FP8}, 6667, 8532),
    (f"{TORCHAO} H100: tensorwise vs bf16", "h100-96gb-500w", "llama-3.1-8b",
     AO_8B, {**AO_8B, **FP8}, 6150, 7689.5),
    (f"{TORCHAO} H100: rowwise vs tensorwise", "h100-96gb-500w", "llama-3.1-8b",
     {**AO_8B, **FP8}, {**AO_8B, **FP8, "fp8_recipe": "rowwise"}, 7689.5, 6768),
    pytest.param(f"{TORCHAO} B200: tensorwise vs bf16", "b200", "llama-3.1-8b",
     AO_8B, {**AO_8B, **FP8}, 8307.5, 10417.0, marks=pytest.mark.xfail(strict=True, reason=(
         "known gap: predicted 1.33, measured 1.25 on power-limited B200s of unstated cap"))),
    pytest.param(f"{TORCHAO} B200: mxfp8 vs bf16", "b200", "llama-3.1-8b",
     AO_8B, {**AO_8B, **FP8, "fp8_recipe": "mxfp8"}, 8307.5, 9969.0,
     marks=pytest.mark.xfail(strict=True, reason=(
         "known gap: predicted 1.29, measured 1.20 (1.25 before the B200's measured matmul "
         "ceiling, MAMF 77.6 % of peak against the A100's 86.9 %, slowed its bf16 GEMMs: the "
         "step is more GEMM-bound, so fp8 gains more); like the tensorwise pair, fp8 on these "
         "power-limited B200s of unstated cap gains less than their full-power MAMF says"))),
    pytest.param(f"{TORCHAO} B200: rowwise vs bf16", "b200", "llama-3.1-8b",
     AO_8B, {**AO_8B, **FP8, "fp8_recipe": "rowwise"}, 8307.5, 8640.5,
     marks=pytest.mark.xfail(strict=True, reason=(
         "known gap: predicted 1.15, measured 1.04: FP8_ROWWISE_GEMM_SHARE is an H100 figure; "
         "rowwise scaled GEMMs on Blackwell are relatively slower"))),
    (f"{TORCHTITAN} Table 5: interleaved 1F1B vs 1F1B (405B, FSDP 8 TP 8 PP 8)",
     "h100-96gb-500w", "llama-3.1-405b",
     {"micro_batch": 4, "grad_accum": 8, "seq_len": 8192, "zero": 3, "dp": 8, "tp": 8, "pp": 8,
      "recipe": "amp", "checkpointing": "full", "kernels": "compile", "tp_comm_overlap": True,
      **FP8},
     {"micro_batch": 4, "grad_accum": 8, "seq_len": 8192, "zero": 3, "dp": 8, "tp": 8, "pp": 8,
      "recipe": "amp", "checkpointing": "full", "kernels": "compile", "tp_comm_overlap": True,
      "virtual_stages": 2, **FP8},
     100, 128),
    # per-op selective AC recomputes every other matmul (torchtitan activation_checkpoint.py)
    (f"{TORCHTITAN_2024} Llama 2 13B: selective op AC vs none", "a100-80gb", "llama-2-13b",
     TT_13B, {**TT_13B, "checkpointing": "selective"}, 2162, 1904),
]  # fmt: skip


def _ratio(gpu: str, model: str, a: dict[str, Any], b: dict[str, Any]) -> float:
    g, spec = resolve_gpu(gpu), catalog_model(model)
    ta = speed_of(spec, TrainConfig(**a), g).tokens_per_s
    tb = speed_of(spec, TrainConfig(**b), g).tokens_per_s
    return tb / ta


@pytest.mark.parametrize(("source", "gpu", "model", "a", "b", "measured_a", "measured_b"), PAIRS)
def test_published_pair_ratio(
    source: str,
    gpu: str,
    model: str,
    a: dict[str, Any],
    b: dict[str, Any],
    measured_a: float,
    measured_b: float,
) -> None:
    measured = measured_b / measured_a
    predicted = _ratio(gpu, model, a, b)
    assert predicted == pytest.approx(measured, rel=TOLERANCE), (source, predicted, measured)


def test_async_tp_pair_ratio() -> None:
    """PyTorch's async TP hides the forward's TP collectives only (torchtitan Table 4: +5.7 %)."""
    base = {
        "micro_batch": 16,
        "seq_len": 8192,
        "zero": 3,
        "dp": 32,
        "tp": 8,
        "recipe": "amp",
        "checkpointing": "full",
        "kernels": "compile",
        **FP8,
    }
    predicted = _ratio("h100-96gb-500w", "llama-3.1-70b", base, {**base, "tp_comm_overlap": True})
    assert predicted == pytest.approx(876 / 829, rel=TOLERANCE)


ASYNC_TP_2025 = "pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md"
TP_70B: dict[str, Any] = {
    "micro_batch": 16,
    "seq_len": 8192,
    "zero": 3,
    "dp": 32,
    "tp": 8,
    "recipe": "amp",
    "checkpointing": "full",
    "kernels": "compile",
}
TP_8B: dict[str, Any] = {**TP_70B, "micro_batch": 12, "dp": 8, "checkpointing": "selective"}


@pytest.mark.parametrize(
    ("model", "base", "vanilla", "async_tp"),
    [
        pytest.param("llama-3.1-70b", TP_70B, 597.3, 652.4, id="70b-bf16-full-ac"),
        pytest.param("llama-3.1-8b", TP_8B, 4378, 4809.4, id="8b-bf16-op-sac"),
        pytest.param("llama-3.1-8b", {**TP_8B, **FP8}, 5078.1, 5570.1, id="8b-fp8-op-sac"),
        pytest.param(
            "llama-3.1-70b",
            {**TP_70B, **FP8},
            809.8,
            942.4,
            id="70b-fp8-full-ac",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known gap: predicted 1.085, measured 1.16 (the torch of 2025-06 hides more "
                "under fp8 than the same pair measured 1.057 with the torch of 2024-12, Table 4)",
            ),
        ),
    ],
)
def test_async_tp_pairs_2025(
    model: str, base: dict[str, Any], vanilla: float, async_tp: float
) -> None:
    """FSDP + TP 8 on Grand Teton H100s, vanilla vs async TP (ASYNC_TP_2025)."""
    predicted = _ratio("h100-96gb-500w", model, base, {**base, "tp_comm_overlap": True})
    assert predicted == pytest.approx(async_tp / vanilla, rel=TOLERANCE)
