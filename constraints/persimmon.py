"""Persimmon (Adept's Persimmon-8B; Fuyu's text model) as transformers 5.25 builds it
(modeling_persimmon.py): its config.json read, its parameters tensor by tensor, and the tensors
its layer saves.

A layer: ``input_layernorm`` → ``self_attn.query_key_value`` (one fused projection with bias,
viewed per head as [q k v]) → with ``qk_layernorm`` a LayerNorm over each head of q and of k
(one weight and bias per head dimension, shared by the heads; it keeps the fused views and a
mean and rstd per head) → the rotary on ``partial_rotary_factor`` of each head, q and k
rebuilt by ``cat`` → attention → ``self_attn.dense``, added to the residual; then
``post_attention_layernorm`` → ``mlp.dense_h_to_4h`` → relu² → ``mlp.dense_4h_to_h``, dropout.
LayerNorms with bias, an untied head.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import probability
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.saved_tensors import Saved, _attention_core, pre_norm_block


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """PersimmonConfig's fields (configuration_persimmon.py defaults where a key is absent)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=4096), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=64), where
    )
    return ModelSpec(
        **common,
        family="persimmon",
        hidden=hidden,
        layers=_positive(
            "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=36), where
        ),
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "intermediate_size", where=where, default=16384),
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=262144), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=16384),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        gated_mlp=False,
        activation=str(cfg.get("hidden_act", "relu2")),
        fused_qkv=True,
        qk_norm="head" if cfg.get("qk_layernorm", True) else "none",
        hidden_dropout=probability(cfg, "hidden_dropout", 0.0),
        attention_dropout=probability(cfg, "attention_dropout", 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b, d = spec.hidden, spec.intermediate, "dense", spec.head_dim
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm/post_attention_layernorm", spec, h, b, per_block=2),
        *_linear(
            "self_attn.query_key_value",
            "query_key_value",
            h,
            3 * h,
            block=b,
            role="attention",
            bias=True,
        ),
        *_linear("self_attn.dense", "dense", h, h, block=b, role="attention", bias=True),
        *_linear("mlp.dense_h_to_4h", "dense_h_to_4h", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.dense_4h_to_h", "dense_4h_to_h", i, h, block=b, role="mlp", bias=True),
        *_norm("final_layernorm", spec, h, ""),
    ]
    if spec.qk_norm == "head":
        groups += _norm("self_attn.q_layernorm/k_layernorm", spec, d, b, per_block=2)
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h = spec.hidden
    attention = []
    if spec.qk_norm == "head":
        # F.layer_norm over each head of q and k: its input is a view of the fused output (kept
        # below with v), plus a mean and an rstd per head
        attention.append(Saved("q/k LayerNorm mean and rstd (per head)", 4 * spec.heads, "fp32"))
        attention.append(
            Saved(
                "fused q/k/v output: the q/k LayerNorms' inputs are views of it",
                3 * h,
                "compute",
                eager_only=True,  # SDPA's v view keeps it already (_attention_core)
            )
        )
    attention += _attention_core(spec, h, h, h, "self_attn.dense", v_view_of=3 * h)
    # PersimmonDecoderLayer adds the attention output to the residual without a dropout
    return pre_norm_block(
        spec,
        ("input_layernorm", "post_attention_layernorm"),
        ("self_attn.query_key_value", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
        attention,
        attention_dropout_residual=False,
    )
