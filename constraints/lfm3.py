"""LFM3 (Liquid AI) as transformers 5.25 builds it (modeling_lfm3.py): its config.json read, its
parameters tensor by tensor, and what each kind of layer saves.

LFM2's layer (constraints/lfm2.py: ``operator_norm`` → a mixer, ``ffn_norm`` → the SwiGLU
``feed_forward``) with: attention layers global or sliding-window (``layer_types``), per-head
q/k norms (``q_norm`` / ``k_norm``), an output projection ``o_proj``, and with
``use_attention_gate`` a sigmoid gate per head (``g_proj``: hidden → heads) on the attention
output; with ``use_sandwich_norm`` a norm after the mixer and after the MLP; an MLP
``intermediate_size`` wide as given. The short convolution is LFM2's. Llama's RMSNorm.
"""

from __future__ import annotations

import dataclasses as dc
from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive_field
from constraints.lfm2 import MLP_NAMES, short_conv_groups, short_conv_saved
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _linear,
    _norm,
    attention_projections,
    untied_head,
)
from constraints.param_mlp import gated_mlp
from constraints.saved_tensors import Saved, _attention_core, _gated_mlp, linear_input
from constraints.saved_tensors import _norm as _norm_saved

CONV, SLIDING, GLOBAL = "conv", "sliding_attention", "full_attention"
#: Lfm3Config's defaults (configuration_lfm3.py)
DEFAULTS = {
    "hidden_size": 2048,
    "intermediate_size": 7680,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 128000,
    "conv_L_cache": 7,
    "sliding_window": 256,
}


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def _layer_types(cfg: dict[str, Any], layers: int, where: str) -> list[str]:
    """``layer_types``, or Lfm3Config's pattern: global attention at 2 mod 4, sliding at 0 mod
    4 (but the first layer), the short convolution elsewhere."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = [
            GLOBAL if i % 4 == 2 else SLIDING if i % 4 == 0 and i > 0 else CONV
            for i in range(layers)
        ]
    if (
        not isinstance(kinds, list)
        or len(kinds) != layers
        or not set(kinds) <= {CONV, SLIDING, GLOBAL}
    ):
        raise FitplanError(
            f"{where}: layer_types must list '{CONV}', '{SLIDING}' or '{GLOBAL}' for each of "
            f"the {layers} layers, got {excerpt(kinds)}"
        )
    return kinds


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Lfm3Config's fields (its defaults where a key is absent)."""
    heads = _field(cfg, "num_attention_heads", where)
    kv_heads = _field(cfg, "num_key_value_heads", where)
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    layers = _field(cfg, "num_hidden_layers", where)
    kinds = _layer_types(cfg, layers, where)
    window = cfg.get("sliding_window", DEFAULTS["sliding_window"])
    sandwich = bool(cfg.get("use_sandwich_norm", True))
    return ModelSpec(
        **common,
        family=model_type,
        hidden=_field(cfg, "hidden_size", where),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_field(cfg, "head_dim", where),
        intermediate=_field(cfg, "intermediate_size", where),
        vocab=_field(cfg, "vocab_size", where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=128000),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=bool(cfg.get("attention_bias", False)),
        o_bias=bool(cfg.get("attention_bias", False)),
        qk_norm="head",
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
        layer_mixers="".join("c" if k == CONV else "a" for k in kinds),
        sliding_window=int(window) if isinstance(window, int) and window > 0 else None,
        sliding_layers=kinds.count(SLIDING),
        linear_conv_kernel=_field(cfg, "conv_L_cache", where),
        mixer_bias=bool(cfg.get("conv_bias", False)),
        head_gate=bool(cfg.get("use_attention_gate", True)),
        post_norm=sandwich,
        norms_per_layer=4 if sandwich else 2,
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, d = spec.hidden, spec.head_dim
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks = {b: kinds.count(b) for b in dict.fromkeys(kinds)}
    norms = spec.norms_per_layer
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("operator_norm/ffn_norm (and the sandwich norms)", spec, h, b, norms)
        groups += gated_mlp(spec, "feed_forward", spec.intermediate, b, "mlp", names=MLP_NAMES)
        if b.startswith("conv"):
            groups += short_conv_groups(spec, b)
            continue
        groups += [
            *attention_projections(spec, "self_attn", b),
            *_norm("self_attn.q_norm/k_norm", spec, d, b, per_block=2),
        ]
        if spec.head_gate:
            groups += _linear(
                "self_attn.g_proj", "g_proj", h, spec.heads, block=b, role="attention"
            )
    groups += _norm("embedding_norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What a layer of ``block`` saves: the short convolution ('conv-dense') or attention
    ('dense'), the sandwich norm after it, then the MLP and its sandwich norm."""
    h = spec.hidden
    s = _norm_saved(spec, "operator_norm", h)
    s += short_conv_saved(spec) if block.startswith("conv") else _attention_saved(spec)
    if spec.post_norm:
        s += _norm_saved(spec, "post_operator_norm", h)
    s += _norm_saved(spec, "ffn_norm", h)
    s.append(linear_input("w1/w3 input (normed hidden)", h, "feed_forward.w1", "feed_forward.w3"))
    s += _gated_mlp(spec, "feed_forward", spec.intermediate, down_name="w2")
    if spec.post_norm:
        s += _norm_saved(spec, "post_ffn_norm", h)
    return s


def _attention_saved(spec: ModelSpec) -> list[Saved]:
    """q/k/v (and the gate's ``g_proj``) read the normed hidden; per-head q/k norms; the core;
    with the gate, ``attn · sigmoid(g)`` keeps the attention output and the sigmoid's, and
    o_proj reads the product."""
    q, kv, a = spec.q_width, spec.kv_width, "self_attn."
    readers = (
        ("q_proj", "k_proj", "v_proj", "g_proj")
        if spec.head_gate
        else ("q_proj", "k_proj", "v_proj")
    )
    s = [
        linear_input(
            "q/k/v projection input (normed hidden)", spec.hidden, *(a + r for r in readers)
        ),
        *_norm_saved(spec, "q_norm", q, spec.heads),
        *_norm_saved(spec, "k_norm", kv, spec.kv_heads),
    ]
    core = _attention_core(spec, q, kv, kv, a + "o_proj")
    if not spec.head_gate:
        return s + core
    # the gate's multiply keeps the attention output whether o_proj trains or not
    s += [dc.replace(x, inputs_of=()) if x.inputs_of else x for x in core]
    return [
        *s,
        Saved("attention gate: sigmoid output per head", spec.heads, "compute", tp_split=False),
        linear_input("attention × gate (o_proj input)", q, a + "o_proj"),
    ]
