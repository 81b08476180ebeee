"""Cohere and Cohere 2 (Command R / R7B / A, Aya; ``model_type`` cohere, cohere2) as transformers
5.25 builds them (modeling_cohere.py, modeling_cohere2.py): the config read, the parameters tensor
by tensor, and the tensors a layer saves.

A layer: one ``input_layernorm`` (CohereLayerNorm: a LayerNorm without bias computed in fp32,
``weight.float() · x̂`` then cast) whose output feeds both the attention (``self_attn.q_proj`` /
``k_proj`` / ``v_proj``, optional LayerNorms over each head of q and k with a weight per head
(``use_qk_norm``, Cohere only), interleaved rotary in fp32, SDPA, ``self_attn.o_proj``) and the
gated MLP (``mlp.gate_proj``, ``up_proj``, SiLU, ``down_proj``); both added to the layer's input.
Attention projections carry a bias on ``attention_bias``; the head is tied by default and its
logits are multiplied by ``logit_scale`` (a scalar multiply that keeps nothing: the traced loss
peak is Llama's). Cohere 2 alternates sliding-window and global layers
(``layer_types``), the global ones without rotary.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import kv_heads as _kv_heads
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import sliding_layers
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.saved_tensors import Saved, _attention_core, _gated_mlp, in_parallel_branch

SHARED_READERS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """CohereConfig / Cohere2Config fields (their class defaults, Command R's shapes, where a key
    is absent)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=8192), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=64), where
    )
    kv_heads = _kv_heads(cfg, heads, where)
    bias = bool(cfg.get("attention_bias", False))
    sliding = model_type == "cohere2" and cfg.get("sliding_window", 4096)
    layers = _positive(
        "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=40), where
    )
    return ModelSpec(
        **common,
        family=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        # CohereAttention: getattr(config, "head_dim", hidden // heads); Cohere2Config stores it
        head_dim=(
            _positive("head_dim", _int(cfg, "head_dim", where=where), where)
            if cfg.get("head_dim") is not None
            else _per_head(hidden, heads, where)
        ),
        intermediate=_int(cfg, "intermediate_size", where=where, default=22528),
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=256000), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=8192),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=bias,
        o_bias=bias,
        # CohereLayerNorm has a weight and no bias (as many parameters as an RMSNorm) and keeps
        # what Gemma's fp32-weight RMSNorm keeps: its fp32 centred input, one rstd per row, and
        # the fp32 normalised value for the weight's gradient
        norm="rmsnorm",
        norm_weight_fp32=True,
        norms_per_layer=1,
        # the per-head norms hold a weight per head: (heads, head_dim), as a whole-width norm
        qk_norm="full" if model_type == "cohere" and cfg.get("use_qk_norm") else "none",
        activation=str(cfg.get("hidden_act", "silu")),
        parallel_attn=True,
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
        sliding_window=int(sliding) if sliding else None,
        sliding_layers=sliding_layers(cfg, model_type, layers, where) if sliding else 0,
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b, q, kv = spec.hidden, spec.intermediate, "dense", spec.q_width, spec.kv_width
    bias = spec.qkv_bias
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm", spec, h, b),
        *_linear("self_attn.q_proj", "q_proj", h, q, block=b, role="attention", bias=bias),
        *_linear("self_attn.k_proj", "k_proj", h, kv, block=b, role="attention", bias=bias),
        *_linear("self_attn.v_proj", "v_proj", h, kv, block=b, role="attention", bias=bias),
        *_linear("self_attn.o_proj", "o_proj", q, h, block=b, role="attention", bias=spec.o_bias),
        *_linear("mlp.gate_proj", "gate_proj", h, i, block=b, role="mlp"),
        *_linear("mlp.up_proj", "up_proj", h, i, block=b, role="mlp"),
        *_linear("mlp.down_proj", "down_proj", i, h, block=b, role="mlp"),
        *_norm("norm", spec, h, ""),
    ]
    if spec.qk_norm == "full":
        groups += _norm("self_attn.q_norm", spec, q, b) + _norm("self_attn.k_norm", spec, kv, b)
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def norm_saved(spec: ModelSpec, name: str, width: int, rows: int = 1) -> list[Saved]:
    """CohereLayerNorm: ``x.float()``, then ``x - mean`` computed twice (once squared for the
    variance, once scaled by the rstd), each kept by its op; the rstd per row; ``weight.float()
    · x̂`` keeps the fp32 normalised value when the weight trains (traced)."""
    return [
        Saved(f"{name}: fp32 centred input (for the variance)", width, "fp32", tp_split=False),
        Saved(f"{name}: fp32 centred input (for the scaling)", width, "fp32", tp_split=False),
        Saved(f"{name}: rstd per row (fp32)", rows, "fp32", tp_split=False),
        Saved(
            f"{name}: normalised (fp32), for the weight grad",
            width,
            "fp32",
            norm_weight=True,
            tp_split=False,
        ),
    ]


def layer(spec: ModelSpec) -> list[Saved]:
    h, i, q, kv = spec.hidden, spec.intermediate, spec.q_width, spec.kv_width
    s = norm_saved(spec, "input_layernorm", h)
    s.append(
        Saved(
            "q/k/v and gate/up input (input_layernorm output, shared)",
            h,
            "compute",
            inputs_of=SHARED_READERS,
            tp_split=False,
        )
    )
    if spec.qk_norm == "full":
        s += norm_saved(spec, "q_norm", q, rows=spec.heads)
        s += norm_saved(spec, "k_norm", kv, rows=spec.kv_heads)
    s += _attention_core(spec, q, kv, kv, "self_attn.o_proj")
    s += in_parallel_branch(_gated_mlp(spec, "mlp", i), "mlp.gate_proj")
    return s
