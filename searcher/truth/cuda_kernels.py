"""CUDA kernels as they allocate, for a step traced with fake CPU tensors.

On the CPU, ``F.scaled_dot_product_attention`` picks CPU kernels and dropout takes a composite
path; neither allocates what the CUDA kernels a user runs allocate. While a step is traced, these
context managers put storage-exact emulations in their place (values are irrelevant: the tensors
are fake):

- **flash attention** (FlashAttention-2 ``flash_attn_func``; PyTorch's CUDA flash SDPA backend,
  which SDPA picks for 16-bit inputs without a mask): forward returns the output in the kernel's
  (b, s, h, d) layout and saves q, k, v as given (grouped K/V not expanded), the output, the fp32
  log-sum-exp (b, h, s) and the RNG state (philox seed and offset, two int64). Backward allocates
  dq, dk, dv (dk, dv first at all query heads when grouped, then summed to the K/V heads), the fp32
  ``softmax_d`` (b, h, s rounded to 128) and the fp32 ``dq_accum`` (b, s rounded to 128, h,
  d rounded to 32) — flash_attn/csrc mha_bwd (``seqlen_q_rounded``, ``head_size_rounded``).
- **memory-efficient attention** (SDPA's choice for fp32 inputs or with a mask): the same saved
  tensors, the log-sum-exp padded to a multiple of 32 queries (PyTorch
  ``_efficient_attention_forward``, ``kAlignLSE = 32``), and a mask as the bias it converts it
  to (the query's dtype, rows aligned to 16), one per call; backward allocates dq, dk, dv.
- **dropout**: the fused CUDA kernel saves a 1-byte mask (``torch.native_dropout``); the CPU
  composite path would save a noise tensor in the input's dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: flash_attn mha_bwd rounds the query length to 128 for softmax_d and dq_accum
FLASH_SEQ_ROUND = 128
#: and the head dimension to a multiple of 32 (head_size <= 192) for dq_accum
FLASH_HEAD_ROUND = 32
#: PyTorch's memory-efficient kernel pads the log-sum-exp to 32 queries (kAlignLSE)
MEM_EFFICIENT_LSE_ALIGN = 32
#: and aligns a mask's rows to 16 elements (attention.cpp ``preprocess_mask``)
MEM_EFFICIENT_MASK_ALIGN = 16
#: name under which the flash emulation is registered in transformers' AttentionInterface
FLASH_IMPL = "fitplan_flash_step"


def _round_up(x: int, k: int) -> int:
    return -(-x // k) * k


def attention_function() -> Any:
    """The autograd Function emulating a fused CUDA attention kernel (flash or mem-efficient)."""
    import torch

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any, kernel: str, mask: Any) -> Any:
            b, h, s, _ = q.shape
            out = torch.empty(b, s, h, v.shape[-1], dtype=q.dtype, device=q.device)
            lse_len = s if kernel == "flash" else _round_up(s, MEM_EFFICIENT_LSE_ALIGN)
            lse = torch.empty(b, h, lse_len, dtype=torch.float32, device=q.device)
            seed = torch.empty(2, dtype=torch.int64, device=q.device)
            saved = (q, k, v, out, lse, seed) + ((mask,) if mask is not None else ())
            ctx.save_for_backward(*saved)
            ctx.kernel = kernel
            return out

        @staticmethod
        def backward(ctx: Any, grad_out: Any) -> Any:
            q, k, v, _out, _lse, _seed = ctx.saved_tensors[:6]
            b, h, s, d = q.shape
            dq = torch.empty_like(q)
            if ctx.kernel == "flash":
                s_r = _round_up(s, FLASH_SEQ_ROUND)
                d_r = _round_up(d, FLASH_HEAD_ROUND)
                softmax_d = torch.empty(b, h, s_r, dtype=torch.float32, device=q.device)
                dq_accum = torch.empty(b, s_r, h, d_r, dtype=torch.float32, device=q.device)
                del softmax_d, dq_accum
            if k.shape[1] != h:  # grouped K/V: gradients at all query heads, then summed
                dk_all = torch.empty(b, h, k.shape[2], k.shape[3], dtype=k.dtype, device=k.device)
                dv_all = torch.empty(b, h, v.shape[2], v.shape[3], dtype=v.dtype, device=v.device)
                groups = h // k.shape[1]
                dk = dk_all.view(b, k.shape[1], groups, k.shape[2], k.shape[3]).sum(2)
                dv = dv_all.view(b, v.shape[1], groups, v.shape[2], v.shape[3]).sum(2)
                del dk_all, dv_all
            else:
                dk, dv = torch.empty_like(k), torch.empty_like(v)
            return dq, dk, dv, None, None

    return FusedAttention


def _register_flash() -> None:
    from transformers import AttentionInterface

    fused = attention_function()

    def flash_attention(module: Any, query: Any, key: Any, value: Any, *args: Any, **kw: Any):
        # transformers' flash_attention_forward casts fp32 inputs (rotary under autocast, PEFT's
        # fp32 layer norms) to the autocast / loaded / weight dtype before the kernel, which then
        # saves those 16-bit copies (integrations/flash_attention.py get_target_dtype,
        # modeling_flash_attention_utils.py fa_peft_integration_check)
        from transformers.integrations.flash_attention import get_target_dtype
        from transformers.modeling_flash_attention_utils import fa_peft_integration_check

        target = get_target_dtype(query, module)
        query, key, value = fa_peft_integration_check(query, key, value, target)
        return fused.apply(query, key, value, "flash", None), None  # (b, s, h, d), as HF expects

    AttentionInterface.register(FLASH_IMPL, flash_attention)


def _autocast_lower(*tensors: Any) -> tuple[Any, ...]:
    """What CUDA autocast does to ``scaled_dot_product_attention``'s arguments (ATen
    autocast_mode.cpp: ``KERNEL_CUDA(scaled_dot_product_attention, lower_precision_fp)``): every
    floating tensor not in the autocast dtype (fp64 excepted) cast to it. The emulation replaces
    the Python function, so the dispatcher's autocast never sees the call; the tracer's autocast
    runs on the CPU device."""
    import torch

    if not torch.is_autocast_enabled("cpu"):
        return tensors
    low = torch.get_autocast_dtype("cpu")
    return tuple(
        t.to(low)
        if t is not None and t.is_floating_point() and t.dtype not in (low, torch.float64)
        else t
        for t in tensors
    )


def mem_efficient_bias(mask: Any, dtype: Any) -> Any:
    """The bias the memory-efficient kernel keeps for a mask: a boolean mask converted to the
    query's dtype (attention.cpp ``convert_boolean_attn_mask``: ``where(logical_not(mask), -inf,
    0)``, a new tensor each call), its rows padded to 16 elements (``preprocess_mask``,
    ``pad_bias<mem_eff_alignment = 16>``) and viewed back to the sequence length."""
    import torch

    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    last = mask.shape[-1]
    if mask.stride(-2) % MEM_EFFICIENT_MASK_ALIGN:
        padded = torch.zeros(
            (*mask.shape[:-1], _round_up(last, MEM_EFFICIENT_MASK_ALIGN)),
            dtype=mask.dtype,
            device=mask.device,
        )
        mask = padded[..., :last]
    return mask


@contextmanager
def cuda_attention() -> Iterator[None]:
    """F.scaled_dot_product_attention → the CUDA backend SDPA would pick; flash registered."""
    import torch
    import torch.nn.functional as F

    _register_flash()
    fused = attention_function()
    original = F.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, attn_mask: Any = None, *args: Any, **kw: Any) -> Any:
        q, k, v, attn_mask = _autocast_lower(q, k, v, attn_mask)
        kernel = "flash" if attn_mask is None and q.dtype != torch.float32 else "mem_efficient"
        if attn_mask is not None:
            attn_mask = mem_efficient_bias(attn_mask, q.dtype)
        return fused.apply(q, k, v, kernel, attn_mask).transpose(1, 2)  # (b, h, s, d) view

    setattr(F, "scaled_dot_product_attention", sdpa)  # noqa: B010
    try:
        yield
    finally:
        setattr(F, "scaled_dot_product_attention", original)  # noqa: B010
