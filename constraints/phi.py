"""Phi-1 / Phi-1.5 / Phi-2 (``model_type`` phi) as transformers 5.25 builds it (modeling_phi.py):
its config.json read, its parameters tensor by tensor, and the tensors its layer saves.

A layer: one ``input_layernorm`` whose output feeds both the attention (``self_attn.q_proj`` /
``k_proj`` / ``v_proj``, rotary on ``partial_rotary_factor`` of each head, SDPA,
``self_attn.dense``) and the MLP (``mlp.fc1`` → GELU (tanh, in python ops) → ``mlp.fc2``), each
branch through ``resid_dropout``, both added to the layer's input. Every linear has a bias, the
head too (``lm_head`` bias=True); optional per-head LayerNorms on q and k (``qk_layernorm``);
dropout on the embeddings (``embd_pdrop``); an untied head unless the config ties it.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import kv_heads as _kv_heads
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.saved_tensors import Saved, _attention_core, _plain_mlp, in_parallel_branch
from constraints.saved_tensors import _norm as _saved_norm

ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """PhiConfig's fields (configuration_phi.py defaults where a key is absent: Phi-2's shapes)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=2048), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=32), where
    )
    kv_heads = _kv_heads(cfg, heads, where)
    return ModelSpec(
        **common,
        family="phi",
        hidden=hidden,
        layers=_positive(
            "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=24), where
        ),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "intermediate_size", where=where, default=8192),
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=51200), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=1,
        qk_norm="head" if cfg.get("qk_layernorm") else "none",
        gated_mlp=False,
        activation=str(cfg.get("hidden_act", "gelu_new")),
        parallel_attn=True,
        hidden_dropout=float(cfg.get("resid_pdrop", 0.0) or 0.0),
        embedding_dropout=float(cfg.get("embd_pdrop", 0.0) or 0.0),
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b, q, kv = spec.hidden, spec.intermediate, "dense", spec.q_width, spec.kv_width
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm", spec, h, b),
        *_linear("self_attn.q_proj", "q_proj", h, q, block=b, role="attention", bias=True),
        *_linear("self_attn.k_proj", "k_proj", h, kv, block=b, role="attention", bias=True),
        *_linear("self_attn.v_proj", "v_proj", h, kv, block=b, role="attention", bias=True),
        *_linear("self_attn.dense", "dense", q, h, block=b, role="attention", bias=True),
        *_linear("mlp.fc1", "fc1", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.fc2", "fc2", i, h, block=b, role="mlp", bias=True),
        *_norm("final_layernorm", spec, h, ""),
    ]
    if spec.qk_norm == "head":
        groups += _norm("self_attn.q_layernorm/k_layernorm", spec, spec.head_dim, b, per_block=2)
    groups += untied_head(spec)
    groups.append(ParamGroup("lm_head.bias", "bias", spec.vocab, 1, "", "lm_head", "head"))
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h, i, q, kv = spec.hidden, spec.intermediate, spec.q_width, spec.kv_width
    drop = spec.hidden_dropout > 0
    s = _saved_norm(spec, "input_layernorm", h)
    s.append(
        Saved(
            "q/k/v and fc1 input (input_layernorm output, shared)",
            h,
            "compute",
            inputs_of=(*ATTENTION, "mlp.fc1"),
            tp_split=False,
        )
    )
    if spec.qk_norm == "head":
        s += _saved_norm(spec, "q_layernorm", q) + _saved_norm(spec, "k_layernorm", kv)
    s += _attention_core(spec, q, kv, kv, "self_attn.dense")
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += in_parallel_branch(_plain_mlp(spec, "mlp.fc1", "mlp.fc2", i), "mlp.fc1")
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s
