"""Flash attention's speed against sequence length and head dimension, from published benchmarks.

A flash kernel's throughput rises with the sequence length (more query blocks to spread over the
SMs, the per-block prologue and epilogue amortised over more key blocks) and with the head
dimension (more FLOPs per byte of Q, K, V), and levels off at long sequences. The published
curves (constraints/data/attention_kernels.csv, one row per kernel, GPU, head dim, causal, pass,
sequence length; each with its figure) are interpolated in log2(sequence length) and
log2(head dim), clamped at the published ends (512 and 16k tokens; 64 and 128 or 256).

The step time uses the curves in two ways. ``sequence_shape`` (``TFLOPS(s, d) /
TFLOPS(ANCHOR_SEQ_LEN, ANCHOR_HEAD_DIM)``) is available through kernels.attention_efficiency_scale
but not wired in (measured: the shape alone on the fitted level worsens the single-GPU rows).
``fa2_over_fa1`` and ``fa2_fraction_of_peak`` set an FA2 row's attention on Ampere/Ada
(kernels.attention_generation_scale): ETA_ATTENTION is FA1's level (the fitted llm-foundry rows
pinned flash-attn==1.0.9), and an FA2 row runs it times the published FA2/FA1 ratio, capped at
FA2's published share of peak; docs/steptime.md ("Attention against sequence length") has the
measurements.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

import numpy as np

__all__ = [
    "ANCHOR_HEAD_DIM",
    "ANCHOR_SEQ_LEN",
    "attention_curve",
    "fa2_fraction_of_peak",
    "fa2_over_fa1",
    "published_tflops",
    "sequence_shape",
]

_DATA = Path(__file__).with_name("data") / "attention_kernels.csv"

#: The sequence length a curve's shape is normalised at: the longest published point, where
#: every curve has levelled off (FA2 on A100, causal, head dim 128: 182 TFLOPS at 8k, 189 at 16k).
ANCHOR_SEQ_LEN = 16384
#: The head dimension of the shape's anchor: the calibration rows' (MPT 760M-70B, Llama, Qwen).
ANCHOR_HEAD_DIM = 128

#: The curve each GPU generation and kernel runs (kernel, GPU, pass in the data file). GPUs with
#: no published curve of their own take the nearest: Ampere-style (sm 8.x: A100, A10, L4, L40S,
#: RTX 3090/4090), Volta and Blackwell take FA2's A100 curve; Hopper FA2 its H100 curve; Hopper
#: cuDNN fused attention (Transformer Engine) and FA3 only have forward curves published
#: (FlashAttention-3, Fig. 5), so their shape is the forward one.
CURVES = {
    "ampere_fa2": ("flash_attn_2", "a100-80gb-sxm4", "fwd_bwd"),
    "hopper_fa2": ("flash_attn_2", "h100-80gb-sxm5", "fwd_bwd"),
    "hopper_cudnn": ("cudnn", "h100-80gb-sxm5", "fwd"),
}


@cache
def _curves() -> dict[tuple[str, str, str, bool], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """(kernel, gpu, pass, causal) → head dim → (log2 seq_len, TFLOPS), seq_len ascending."""
    points: dict[tuple[str, str, str, bool], dict[int, list[tuple[int, float]]]] = {}
    with _DATA.open(newline="") as fh:
        for row in csv.DictReader(fh):
            key = (row["kernel"], row["gpu"], row["pass"], row["causal"] == "1")
            by_dim = points.setdefault(key, {})
            by_dim.setdefault(int(row["head_dim"]), []).append(
                (int(row["seq_len"]), float(row["tflops"]))
            )
    out: dict[tuple[str, str, str, bool], dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    for key, by_dim in points.items():
        out[key] = {}
        for dim, pts in by_dim.items():
            pts.sort()
            out[key][dim] = (
                np.log2(np.array([p[0] for p in pts], dtype=np.float64)),
                np.array([p[1] for p in pts], dtype=np.float64),
            )
    return out


def published_tflops(
    kernel: str, gpu: str, pass_: str, causal: bool, head_dim: float, seq_len: np.ndarray
) -> np.ndarray:
    """TFLOPS the published curve gives at each sequence length (interpolated in log2 s, then
    between the two nearest published head dims in log2 d; clamped at the published ends)."""
    by_dim = _curves()[(kernel, gpu, pass_, causal)]
    log_s = np.log2(np.maximum(np.asarray(seq_len, dtype=np.float64), 1.0))
    dims = sorted(by_dim)
    at = {d: np.interp(log_s, *by_dim[d]) for d in dims}
    if head_dim <= dims[0]:
        return at[dims[0]]
    if head_dim >= dims[-1]:
        return at[dims[-1]]
    hi = next(d for d in dims if d >= head_dim)
    lo = max(d for d in dims if d <= head_dim)
    if hi == lo:
        return at[lo]
    w = (np.log2(head_dim) - np.log2(lo)) / (np.log2(hi) - np.log2(lo))
    return (1.0 - w) * at[lo] + w * at[hi]


def attention_curve(hopper: bool, fused: bool) -> tuple[str, str, str]:
    """The published curve a flash kernel follows: (kernel, gpu, pass) in the data file."""
    if not hopper:
        return CURVES["ampere_fa2"]
    return CURVES["hopper_cudnn"] if fused else CURVES["hopper_fa2"]


def sequence_shape(
    curve: tuple[str, str, str], causal: bool, head_dim: float, seq_len: np.ndarray
) -> np.ndarray:
    """The curve's TFLOPS at (seq_len, head_dim) over its TFLOPS at (ANCHOR_SEQ_LEN,
    ANCHOR_HEAD_DIM): 1.0 on the plateau at head dim 128, below 1 for short sequences."""
    kernel, gpu, pass_ = curve
    anchor = published_tflops(
        kernel, gpu, pass_, causal, ANCHOR_HEAD_DIM, np.array([ANCHOR_SEQ_LEN])
    )
    return published_tflops(kernel, gpu, pass_, causal, head_dim, seq_len) / anchor[0]


#: dense bf16 tensor-core peaks of the GPUs the curves were measured on, TFLOPS: A100 SXM4 312
#: (NVIDIA A100 datasheet), H100 SXM5 989 (NVIDIA H100 datasheet, without sparsity).
CURVE_GPU_PEAK_TFLOPS = {"a100-80gb-sxm4": 312.0, "h100-80gb-sxm5": 989.0}
#: FA1 and FA2 fwd+bwd curves of one GPU generation (FlashAttention-2 paper, Figs. 4 and 7).
_FA_GPU = {False: "a100-80gb-sxm4", True: "h100-80gb-sxm5"}


def fa2_over_fa1(hopper: bool, causal: bool, head_dim: float, seq_len: np.ndarray) -> np.ndarray:
    """FlashAttention-2's fwd+bwd TFLOPS over FlashAttention-1's at (seq_len, head_dim), same
    figure and mask (A100: Fig. 4; Hopper: H100 Fig. 7): 1.8 at 512 tokens, 2.3 at 16k (A100)."""
    gpu = _FA_GPU[hopper]
    fa2 = published_tflops("flash_attn_2", gpu, "fwd_bwd", causal, head_dim, seq_len)
    fa1 = published_tflops("flash_attn_1", gpu, "fwd_bwd", causal, head_dim, seq_len)
    return fa2 / fa1


def fa2_fraction_of_peak(
    hopper: bool, causal: bool, head_dim: float, seq_len: np.ndarray
) -> np.ndarray:
    """FlashAttention-2's published fwd+bwd TFLOPS over the measuring GPU's dense peak. The
    papers count a causal mask's FLOPs as half the full ones, as fitplan does (CAUSAL_SCORE_SHARE),
    and fwd+bwd as 3.5x the forward (fitplan: 1 + ATTENTION_BACKWARD_PER_FORWARD = 3.5), so this
    is the largest share of peak fitplan's attention FLOPs may run at under FA2."""
    gpu = _FA_GPU[hopper]
    tflops = published_tflops("flash_attn_2", gpu, "fwd_bwd", causal, head_dim, seq_len)
    return tflops / CURVE_GPU_PEAK_TFLOPS[gpu]
