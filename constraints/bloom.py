"""BLOOM (BLOOMZ, mT0's decoder cousins) as transformers 5.25 builds it (modeling_bloom.py): its
config.json read, its parameters tensor by tensor, and the tensors its layer saves.

A layer: ``input_layernorm`` → ``self_attention.query_key_value`` (one fused projection with
bias, viewed per head as [q k v]; each view made contiguous by the ``reshape`` to
(batch·heads, s, head_dim)) → ``alibi.baddbmm(q, kᵀ)`` (the ALiBi bias, a [batch·heads, 1, s]
tensor the model builds once, is the added input: nothing of it saved) plus the causal mask →
``softmax(dtype=float32)`` cast back → ``bmm`` with v → heads merged by a copying ``reshape`` →
``self_attention.dense`` (bias), dropout added to the residual; ``post_attention_layernorm`` →
``mlp.dense_h_to_4h`` → BloomGelu (an autograd Function saving its input) →
``mlp.dense_4h_to_h``. Eager attention only (``_supports_sdpa`` is not set). The embeddings pass
a LayerNorm (``word_embeddings_layernorm``); the head is tied by default.
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
    """BloomConfig's fields (configuration_bloom.py; ``attribute_map``: num_hidden_layers →
    n_layer, num_attention_heads → n_head), its defaults where a key is absent."""
    hidden = _positive(
        "hidden_size", _int(cfg, "hidden_size", "n_embed", where=where, default=64), where
    )
    heads = _positive(
        "n_head", _int(cfg, "n_head", "num_attention_heads", where=where, default=8), where
    )
    layers = _positive(
        "n_layer", _int(cfg, "n_layer", "num_hidden_layers", where=where, default=2), where
    )
    dropout = probability(cfg, "hidden_dropout", 0.0)
    return ModelSpec(
        **common,
        family="bloom",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=250880), where),
        max_position=None,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        gated_mlp=False,
        activation="bloom_gelu",
        fused_qkv=True,
        hidden_dropout=dropout,
        attention_dropout=probability(cfg, "attention_dropout", 0.0),
        sdpa_supported=False,
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("word_embeddings", "embedding", spec.vocab * h, role="embedding"),
        *_norm("word_embeddings_layernorm", spec, h, ""),
        *_norm("input_layernorm/post_attention_layernorm", spec, h, b, per_block=2),
        *_linear(
            "self_attention.query_key_value",
            "query_key_value",
            h,
            3 * h,
            block=b,
            role="attention",
            bias=True,
        ),
        *_linear("self_attention.dense", "dense", h, h, block=b, role="attention", bias=True),
        *_linear("mlp.dense_h_to_4h", "dense_h_to_4h", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.dense_4h_to_h", "dense_4h_to_h", i, h, block=b, role="mlp", bias=True),
        *_norm("ln_f", spec, h, ""),
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h = spec.hidden
    # q, k (baddbmm) and v (bmm) are the contiguous copies the reshapes make of the fused views
    attention = _attention_core(spec, h, h, h, "self_attention.dense")
    return pre_norm_block(
        spec,
        ("input_layernorm", "post_attention_layernorm"),
        ("self_attention.query_key_value", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"),
        attention,
    )
