"""The step tracer's CUDA attention emulations take the dtypes the real call path gives them.

Golden dtypes from the framework code, not from the emulation: CUDA autocast casts every
floating argument of ``scaled_dot_product_attention`` to the autocast dtype (ATen
autocast_mode.cpp, ``KERNEL_CUDA(scaled_dot_product_attention, lower_precision_fp)``), and
transformers' ``flash_attention_forward`` casts fp32 q, k, v to the autocast dtype first
(integrations/flash_attention.py ``get_target_dtype``). Under autocast, a rotary model's q and k
are fp32 (the fp32 cos/sin of fp32 hidden states times the 16-bit projection); the kernel saves
the 16-bit copies, half the bytes the emulation saved before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.heavy

TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())


def _saved_dtypes(out: Any) -> list[Any]:
    node = out.grad_fn
    while not hasattr(node, "saved_tensors"):  # views (transpose) above the kernel's node
        node = node.next_functions[0][0]
    return [t.dtype for t in node.saved_tensors[:3]]


def _qkv(torch: Any) -> tuple[Any, Any, Any]:
    shape = (1, 4, 8, 16)
    return tuple(torch.zeros(shape, requires_grad=True) for _ in range(3))  # type: ignore[return-value]


def test_sdpa_under_autocast_saves_the_autocast_dtype() -> None:
    import torch
    import torch.nn.functional as F

    from searcher.truth.cuda_kernels import cuda_attention

    q, k, v = _qkv(torch)
    with cuda_attention(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    assert _saved_dtypes(out) == [torch.bfloat16] * 3


def test_sdpa_without_autocast_keeps_fp32() -> None:
    import torch
    import torch.nn.functional as F

    from searcher.truth.cuda_kernels import cuda_attention

    q, k, v = _qkv(torch)
    with cuda_attention():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert _saved_dtypes(out) == [torch.float32] * 3


def test_flash_casts_fp32_inputs_as_transformers_does() -> None:
    import torch
    from transformers import AttentionInterface
    from transformers.models.llama.modeling_llama import LlamaAttention

    from searcher.truth.cuda_kernels import FLASH_IMPL, cuda_attention
    from searcher.truth.hf_build import hf_config

    module = LlamaAttention(hf_config(TINY), layer_idx=0)  # fp32 weights, as under amp
    q, k, v = _qkv(torch)
    with cuda_attention(), torch.autocast("cpu", dtype=torch.float16):
        out, _ = AttentionInterface()[FLASH_IMPL](module, q, k, v, None)
    assert _saved_dtypes(out) == [torch.float16] * 3


def test_a_boolean_mask_is_kept_as_a_bias_in_the_query_dtype_per_call() -> None:
    """attention.cpp ``convert_boolean_attn_mask`` makes a new tensor of the query's dtype from
    a boolean mask each call, and ``preprocess_mask`` aligns its rows to 16 elements; the
    memory-efficient backward reads it, so the node keeps it (not the caller's boolean mask)."""
    import torch
    import torch.nn.functional as F

    from searcher.truth.cuda_kernels import cuda_attention

    q, k, v = (t.to(torch.bfloat16).detach().requires_grad_() for t in _qkv(torch))
    mask = torch.ones(1, 1, 8, 8, dtype=torch.bool).tril()
    with cuda_attention():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    node = out.grad_fn
    while not hasattr(node, "saved_tensors"):
        node = node.next_functions[0][0]
    bias = node.saved_tensors[-1]
    assert bias.dtype == torch.bfloat16 and bias.shape == (1, 1, 8, 8)
    assert bias.untyped_storage().nbytes() == 1 * 1 * 8 * 16 * 2  # rows padded to 16
    assert bias.untyped_storage().data_ptr() != mask.untyped_storage().data_ptr()
