"""Kernel stacks: what the elementwise work, the kernel launches and attention cost under each.

A stack is the set of kernels a framework runs between the GEMMs. Each fuses a different share of
the norms, activations, residual adds, rotary embeddings and casts, so each moves a different
multiple of the activation bytes (``elementwise_factor``), launches a different number of kernels
per layer, and lets the host's launches overlap the GPU's work or not. The factors that are not
fitted are read off the fusion each stack performs (constraints/throughput_constants.py).
"""

from __future__ import annotations

import numpy as np

from constraints.attention_kernels import (
    attention_curve,
    fa2_fraction_of_peak,
    fa2_over_fa1,
    sequence_shape,
)
from constraints.config import CODE, KERNELS
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.throughput_constants import (
    FA2_HOPPER_SHARE,
    FA3_HOPPER_SHARE,
    K_ELEMENTWISE,
    K_ELEMENTWISE_FUSED,
    K_ELEMENTWISE_LIGER,
    OPS_PER_LAYER_FORWARD,
    OPS_PER_LAYER_FUSED,
    OPS_PER_LAYER_LIGER,
)

__all__ = [
    "KERNEL_STACKS",
    "KernelStack",
    "attention_efficiency_scale",
    "attention_generation_scale",
    "attention_share",
    "stack_column",
]


@frozen
class KernelStack:
    """One kernel stack's traffic and launch model."""

    name: str
    #: elementwise traffic per step / activation bytes the forward writes
    elementwise_factor: float
    #: kernels launched per transformer layer per forward pass
    ops_per_layer_forward: float
    #: the loss's fp32 logits are materialised (Liger's fused linear cross-entropy never does)
    logits_materialised: bool
    #: attention on Hopper runs FA3 / cuDNN fused attention (TE) rather than FlashAttention-2
    hopper_fused_attention: bool


KERNEL_STACKS: dict[str, KernelStack] = {
    # PyTorch eager (HF transformers, llm-foundry/Composer, torchtitan without compile)
    "eager": KernelStack("eager", K_ELEMENTWISE, OPS_PER_LAYER_FORWARD, True, False),
    # torch.compile (inductor): each chain of pointwise/reduction ops between GEMMs is one kernel
    "compile": KernelStack("compile", K_ELEMENTWISE_FUSED, OPS_PER_LAYER_FUSED, True, False),
    # Transformer Engine modules (Megatron-LM, NeMo): LayerNormLinear, fused bias-GeLU/SwiGLU,
    # fused RoPE, bias-dropout-add fusion, cuDNN fused attention
    "te": KernelStack("te", K_ELEMENTWISE_FUSED, OPS_PER_LAYER_FUSED, True, True),
    # Liger kernels on HF eager: RMSNorm, RoPE, SwiGLU and linear+cross-entropy fused; the
    # residual adds, casts and dropout stay eager
    "liger": KernelStack("liger", K_ELEMENTWISE_LIGER, OPS_PER_LAYER_LIGER, False, False),
}
assert tuple(KERNEL_STACKS) == KERNELS


def stack_column(codes: np.ndarray, attr: str) -> np.ndarray:
    """A stack attribute for every row of a batch (``codes`` = ConfigBatch.kernels)."""
    values = np.array([float(getattr(KERNEL_STACKS[k], attr)) for k in KERNELS])
    return values[codes]


def attention_share(gpu: GpuSpec, codes: np.ndarray) -> np.ndarray:
    """Share of ETA_ATTENTION (an Ampere FlashAttention-2 figure) a flash kernel reaches on this
    GPU under each stack: FlashAttention-2 on Hopper reaches about 0.56 of its Ampere share; FA3
    and cuDNN fused attention bring Hopper back to about the Ampere share."""
    hopper = gpu.sm is not None and 9.0 <= gpu.sm < 10.0
    if not hopper:
        return np.ones(codes.shape)
    fused = stack_column(codes, "hopper_fused_attention") > 0
    return np.where(fused, FA3_HOPPER_SHARE, FA2_HOPPER_SHARE)


def attention_efficiency_scale(
    gpu: GpuSpec,
    codes: np.ndarray,
    attention: np.ndarray,
    seq_len: np.ndarray,
    head_dim: float,
    causal: bool,
) -> np.ndarray:
    """The factor on ETA_ATTENTION for each row: the GPU's and stack's share
    (``attention_share``) times the published curve's shape at the row's sequence length and
    head dim (constraints/attention_kernels.py). Eager attention (``attention`` = the eager
    code: batched matmuls and a softmax, not a flash kernel) keeps the share alone."""
    share = attention_share(gpu, codes)
    hopper = gpu.sm is not None and 9.0 <= gpu.sm < 10.0
    seq = np.asarray(seq_len, dtype=np.float64)
    shape = sequence_shape(attention_curve(hopper, False), causal, head_dim, seq)
    if hopper:
        fused = stack_column(codes, "hopper_fused_attention") > 0
        shape = np.where(
            fused, sequence_shape(attention_curve(hopper, True), causal, head_dim, seq), shape
        )
    flash = attention != CODE["attention"]["eager"]
    return share * np.where(flash, shape, 1.0)


def attention_generation_scale(
    gpu: GpuSpec,
    codes: np.ndarray,
    attention: np.ndarray,
    generation: np.ndarray,
    seq_len: np.ndarray,
    head_dim: float,
    causal: bool,
    eta_attention: float,
) -> np.ndarray:
    """The factor on ``eta_attention x attention_share`` for each row's flash-attention generation
    (``generation`` = ConfigBatch.attention_kernel).

    ETA_ATTENTION was fitted to FlashAttention-1 rows (llm-foundry's benchmarks pinned
    flash-attn==1.0.9), so fa1 rows keep 1. An fa2 row runs FA1's level times the published
    FA2/FA1 ratio at its sequence length and head dim, capped at FA2's published share of peak
    (constraints/attention_kernels.py, FlashAttention-2 Fig. 4); the cap binds at every published
    point (0.325 x 2.3 is above FA2's 0.61 of the A100's peak), so an fa2 row runs at the published
    FA2 curve. Eager attention and Transformer Engine's fused attention keep 1.

    Only sm 8.x (Ampere, Ada) takes the A100 curve: flash-attn 2 has no Volta kernel, and it is
    written with Ampere's mma.sync, which cannot use Hopper's wgmma or Blackwell's tcgen05, so its
    share of those peaks is not the A100 one (B200 mxfp8/bf16 pair: 1.29 with the A100 share, 1.20
    measured). Hopper keeps ETA_ATTENTION x FA2_HOPPER_SHARE (0.18 of peak, the H100 curve says
    0.27-0.33): the Hopper rows are already predicted fast (MPT H100 up to +37 %), and the H100
    curve moves the torchtitan H100 rows +5 % -> +14 % (docs/steptime.md)."""
    ampere = gpu.sm is not None and 8.0 <= gpu.sm < 9.0
    if not ampere:
        return np.ones(np.shape(codes))
    seq = np.asarray(seq_len, dtype=np.float64)
    level = eta_attention * attention_share(gpu, codes)
    ratio = fa2_over_fa1(False, causal, head_dim, seq)
    cap = fa2_fraction_of_peak(False, causal, head_dim, seq) / level
    fa2 = generation == CODE["attention_kernel"]["fa2"]
    flash = attention != CODE["attention"]["eager"]
    te = stack_column(codes, "hopper_fused_attention") > 0
    return np.where(fa2 & flash & ~te, np.minimum(ratio, cap), 1.0)
