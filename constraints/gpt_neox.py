"""GPT-NeoX (Pythia, GPT-NeoX-20B) as transformers 5.25 builds it (modeling_gpt_neox.py): its
config.json read, its parameters tensor by tensor, and the tensors its layer saves.

A layer: ``input_layernorm`` → ``attention.query_key_value`` (one fused projection, viewed per head
as [q k v] and split into views; q and k rotated on ``rotary_pct`` of each head into new tensors,
v left a view) → SDPA → ``attention.dense``, dropout (``hidden_dropout``); the MLP
``mlp.dense_h_to_4h`` → GELU → ``mlp.dense_4h_to_h``, dropout, reading ``post_attention_layernorm``
of the layer's input (``use_parallel_residual``, the default: x + attn(ln1(x)) + mlp(ln2(x))) or
of the attention's output added (x + attn, then + mlp(ln2(·))). LayerNorms with bias, every
linear with a bias (attention's on ``attention_bias``), embeddings ``embed_in`` and an untied
``lm_head`` unless the config ties them.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.saved_tensors import (
    Saved,
    _attention_core,
    _plain_mlp,
    in_parallel_branch,
    norm_output_read_by,
)
from constraints.saved_tensors import _norm as _saved_norm


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """GPTNeoXConfig's fields (configuration_gpt_neox.py defaults where a key is absent)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=6144), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=64), where
    )
    bias = bool(cfg.get("attention_bias", True))
    dropout = float(cfg.get("hidden_dropout", 0.0) or 0.0)
    return ModelSpec(
        **common,
        family="gpt_neox",
        hidden=hidden,
        layers=_positive(
            "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=44), where
        ),
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "intermediate_size", where=where, default=24576),
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=50432), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bias,
        o_bias=bias,
        mlp_bias=True,
        norm="layernorm",
        gated_mlp=False,
        activation=str(cfg.get("hidden_act", "gelu")),
        parallel_attn=bool(cfg.get("use_parallel_residual", True)),
        fused_qkv=True,
        hidden_dropout=dropout,
        embedding_dropout=dropout,
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("embed_in", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm/post_attention_layernorm", spec, h, b, per_block=2),
        *_linear(
            "attention.query_key_value",
            "query_key_value",
            h,
            3 * h,
            block=b,
            role="attention",
            bias=spec.qkv_bias,
        ),
        *_linear("attention.dense", "dense", h, h, block=b, role="attention", bias=spec.o_bias),
        *_linear("mlp.dense_h_to_4h", "dense_h_to_4h", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.dense_4h_to_h", "dense_4h_to_h", i, h, block=b, role="mlp", bias=True),
        *_norm("final_layer_norm", spec, h, ""),
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    drop = spec.hidden_dropout > 0
    s = _saved_norm(spec, "input_layernorm", h)
    s.append(norm_output_read_by("attention.query_key_value", "input_layernorm", h))
    s += _attention_core(spec, h, h, h, "attention.dense", v_view_of=3 * h)
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    post = _saved_norm(spec, "post_attention_layernorm", h)
    # parallel: both norms read the layer's input, one storage that input_layernorm saved already
    s += [x for x in post if "input" not in x.what] if spec.parallel_attn else post
    s.append(norm_output_read_by("mlp.dense_h_to_4h", "post_attention_layernorm", h))
    mlp = _plain_mlp(spec, "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", i)
    s += in_parallel_branch(mlp, "mlp.dense_h_to_4h") if spec.parallel_attn else mlp
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s
