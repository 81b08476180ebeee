"""Attention and dropout as a CUDA kernel runs them, for the meta-device trace (``fitplan trace``).

On the CPU or the meta device PyTorch takes other paths than on a GPU, and saves other tensors;
these emulations make the trace save what the CUDA kernels save:

- ``flash``: a registered attention function (transformers' ``AttentionInterface``; for models
  without it, ``F.scaled_dot_product_attention`` is patched) calls a custom autograd Function that
  saves exactly what FlashAttention-2 / PyTorch's CUDA flash SDPA save: q, k, v (not expanded to
  all heads), the output (in the kernel's (b, s, h, d) layout, which the output projection then
  reads as a view) and the fp32 log-sum-exp (b, h, s). The CPU math path would save the s² scores.
- ``eager`` + ``selective``: the eager attention core under a re-entrant checkpoint, i.e.
  Korthikanti's selective recomputation: only its inputs (q, k, v) stay.
- dropout: the fused kernel's 1-byte mask (:func:`cuda_dropout`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from constraints.errors import FitplanError

TRACE_ATTN = "fitplan_trace"
TRACE_SELECTIVE = "fitplan_trace_selective"


def flash_function() -> Any:
    import torch

    class FlashEmulation(torch.autograd.Function):
        """Forward shapes of flash attention; saves (q, k, v, out, lse) as the CUDA kernel does."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> Any:  # q: (b, h, s, d)
            b, h, s, _ = q.shape
            out = torch.empty(b, s, h, v.shape[-1], dtype=q.dtype, device=q.device)
            lse = torch.empty(b, h, s, dtype=torch.float32, device=q.device)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - never run
            raise RuntimeError("fitplan's flash emulation only traces the forward pass")

    return FlashEmulation


def register_attention() -> None:
    import torch
    from transformers import AttentionInterface

    flash = flash_function()

    def flash_attention(module: Any, query: Any, key: Any, value: Any, *args: Any, **kw: Any):
        return flash.apply(query, key, value), None  # (b, s, h, d): HF's expected layout

    def selective_attention(module: Any, query: Any, key: Any, value: Any, mask: Any, **kw: Any):
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise FitplanError(f"{type(module).__name__} has no eager attention to checkpoint")

        def core(q: Any, k: Any, v: Any) -> Any:
            return eager(module, q, k, v, mask, **kw)[0]

        out = torch.utils.checkpoint.checkpoint(core, query, key, value, use_reentrant=True)
        return out, None

    AttentionInterface.register(TRACE_ATTN, flash_attention)
    AttentionInterface.register(TRACE_SELECTIVE, selective_attention)


@contextmanager
def patched_sdpa() -> Iterator[None]:
    """F.scaled_dot_product_attention → the flash emulation (models without the interface)."""
    import torch.nn.functional as F

    flash = flash_function()
    original = F.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *args: Any, **kw: Any) -> Any:
        return flash.apply(q, k, v).transpose(1, 2)  # (b, h, s, d) view of (b, s, h, d)

    setattr(F, "scaled_dot_product_attention", sdpa)  # noqa: B010
    try:
        yield
    finally:
        setattr(F, "scaled_dot_product_attention", original)  # noqa: B010


@contextmanager
def cuda_dropout() -> Iterator[None]:
    """Dropout as CUDA runs it: the fused kernel saves a 1-byte bool mask. Off CUDA, PyTorch's
    composite dropout multiplies by a noise tensor in the input's dtype and saves that instead
    (2 or 4 bytes per element), so the trace routes dropout through ``torch.native_dropout``."""
    import torch
    import torch.nn.functional as F

    original = F.dropout

    def dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or p == 0.0:
            return x
        return torch.native_dropout(x, p, True)[0]

    setattr(F, "dropout", dropout)  # noqa: B010
    try:
        yield
    finally:
        setattr(F, "dropout", original)  # noqa: B010


@contextmanager
def meta_safe_masks() -> Iterator[None]:
    """transformers looks for packed sequences in position_ids with a data-dependent check
    (``.all()``), which meta tensors cannot answer; a trace has no packing, so say so."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda *a, **k: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original
