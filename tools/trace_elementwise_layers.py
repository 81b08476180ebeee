"""Decoder layers of torchtune and torchtitan, built from their own source for the eager trace.

``tools/trace_elementwise.py`` traces Hugging Face layers from the installed transformers; these
builders load the Llama layer of a torchtune or torchtitan checkout (``--torchtune-src``,
``--torchtitan-src``: a directory holding the ``torchtune`` / ``torchtitan`` package, e.g. a
``git archive`` of the commit the calibration rows ran) without importing the rest of either
package (torchtune's ``__init__`` needs torchao, torchtitan's norms need triton). Each builder
returns ``(layer, call)``: the module and a function running its forward on an input.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


def _stub_package(name: str, path: str | None = None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [path] if path else []  # type: ignore[attr-defined]
    sys.modules[name] = module
    return module


def _rms_norm_torch25(
    x: Any, normalized_shape: Any, weight: Any = None, eps: float | None = None
) -> Any:
    """F.rms_norm as torch 2.5 ran it on CUDA (aten/src/ATen/native/layer_norm.cpp
    rms_norm_symint, CompositeImplicit: upcast, pow, mean, add, rsqrt, mul, cast, weight mul);
    newer torch dispatches a fused kernel, which the 2024 runs did not have."""
    import torch

    dims = tuple(range(-len(normalized_shape), 0))
    upcast = x.to(torch.float32) if x.dtype != torch.float32 else x
    eps = torch.finfo(upcast.dtype).eps if eps is None else eps
    rsqrt = torch.rsqrt(upcast.pow(2).mean(dims, keepdim=True).add(eps))
    result = upcast.mul(rsqrt).type_as(x)
    return result.mul(weight) if weight is not None else result


def torchtune_llama(src: str, shape: dict[str, int], seq: int) -> tuple[Any, Any]:
    """torchtune's Llama 3 layer (TransformerSelfAttentionLayer: RMSNorm, MultiHeadAttention
    with RotaryPositionalEmbeddings, FeedForward SwiGLU), as torchtune.models.llama3_2's builder
    wires it."""
    import torch
    from torch import nn

    root = f"{src}/torchtune"
    _stub_package("torchtune", root)
    _stub_package("torchtune.modules", f"{root}/modules")
    _stub_package("torchtune.utils", f"{root}/utils")
    mods = {
        n: importlib.import_module(f"torchtune.modules.{n}")
        for n in ("rms_norm", "position_embeddings", "feed_forward", "kv_cache")
    }
    attention = importlib.import_module("torchtune.modules.attention")
    pkg = sys.modules["torchtune.modules"]
    pkg.MultiHeadAttention = attention.MultiHeadAttention  # type: ignore[attr-defined]
    transformer = importlib.import_module("torchtune.modules.transformer")
    h, hd = shape["hidden"], shape["head_dim"]
    heads, kv = shape["heads"], shape["kv_heads"]
    rope = mods["position_embeddings"].RotaryPositionalEmbeddings(
        dim=hd, max_seq_len=seq, base=500_000
    )
    attn = attention.MultiHeadAttention(
        embed_dim=h,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=hd,
        q_proj=nn.Linear(h, heads * hd, bias=False),
        k_proj=nn.Linear(h, kv * hd, bias=False),
        v_proj=nn.Linear(h, kv * hd, bias=False),
        output_proj=nn.Linear(heads * hd, h, bias=False),
        pos_embeddings=rope,
        max_seq_len=seq,
        attn_dropout=0.0,
    )
    f = shape["intermediate"]
    mlp = mods["feed_forward"].FeedForward(
        gate_proj=nn.Linear(h, f, bias=False),
        down_proj=nn.Linear(f, h, bias=False),
        up_proj=nn.Linear(h, f, bias=False),
    )
    norm = mods["rms_norm"].RMSNorm
    layer = transformer.TransformerSelfAttentionLayer(
        attn=attn, mlp=mlp, sa_norm=norm(dim=h, eps=1e-5), mlp_norm=norm(dim=h, eps=1e-5)
    )
    torch.nn.functional.rms_norm = _rms_norm_torch25  # type: ignore[assignment]
    return layer, lambda x: layer(x)


class _FusedRMSNormStandIn:
    """torchtitan's Triton fused RMSNorm (norms.py FusedRMSNorm, after Tri Dao's layer_norm.py):
    forward reads x and the weight and writes y (and one fp32 rstd per row); backward reads dy and
    x and writes dx. Stood in by one aten op each way with the same traffic: ``x * w`` forward,
    ``addcmul(dy, dy, x)`` backward."""

    @staticmethod
    def function() -> Any:
        import torch

        class Fused(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any, w: Any) -> Any:
                ctx.save_for_backward(x, w)
                return x * w

            @staticmethod
            def backward(ctx: Any, dy: Any) -> Any:
                x, _ = ctx.saved_tensors
                return torch.addcmul(dy, dy, x), None

        return Fused


def torchtitan_llama(
    src: str, shape: dict[str, int], seq: int, norm_type: str = "rmsnorm"
) -> tuple[Any, Any]:
    """torchtitan's Llama TransformerBlock (models/llama/model.py) with ``norm_type`` rmsnorm (its
    own RMSNorm class, unfused) or fused_rmsnorm (Triton; stood in, see _FusedRMSNormStandIn)."""
    import torch

    root = f"{src}/torchtitan"
    _stub_package("torchtitan", root)
    _stub_package("torchtitan.models", f"{root}/models")
    norms = types.ModuleType("torchtitan.models.norms")
    with open(f"{root}/models/norms.py") as fh:
        code = fh.read()
    # the RMSNorm class only: norms.py's Triton kernels need triton, which the trace stands in for
    start = code.index("class RMSNorm(nn.Module):")
    end = code.index("# FusedRMSNorm in Triton")
    exec("import torch\nimport torch.nn as nn\n" + code[start:end], norms.__dict__)
    fused = _FusedRMSNormStandIn.function()

    class FusedRMSNorm(torch.nn.Module):
        def __init__(self, dim: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(dim))

        def forward(self, x: Any) -> Any:
            return fused.apply(x, self.weight)

    def build_norm(kind: str, dim: int, eps: float = 1e-6) -> Any:
        return FusedRMSNorm(dim, eps) if kind == "fused_rmsnorm" else norms.RMSNorm(dim, eps)

    norms.build_norm = build_norm  # type: ignore[attr-defined]
    sys.modules["torchtitan.models.norms"] = norms
    sys.modules.pop("torchtitan.models.llama.model", None)
    _stub_package("torchtitan.models.llama", f"{root}/models/llama")
    model = importlib.import_module("torchtitan.models.llama.model")
    args = model.ModelArgs(
        dim=shape["hidden"],
        n_layers=1,
        n_heads=shape["heads"],
        n_kv_heads=shape["kv_heads"],
        norm_type=norm_type,
        max_seq_len=seq,
        rope_theta=500_000,
    )
    layer = model.TransformerBlock(0, args)
    # its FeedForward sizes the hidden layer from multiple_of / ffn_dim_multiplier; set it exactly
    h, f = shape["hidden"], shape["intermediate"]
    ff = layer.feed_forward
    ff.w1 = torch.nn.Linear(h, f, bias=False)
    ff.w2 = torch.nn.Linear(f, h, bias=False)
    ff.w3 = torch.nn.Linear(h, f, bias=False)
    freqs = model.precompute_freqs_cis(shape["head_dim"], seq, 500_000)
    return layer, lambda x: layer(x, freqs)
