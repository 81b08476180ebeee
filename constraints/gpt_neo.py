"""GPT-Neo (``model_type`` gpt_neo: GPT-Neo 125M / 1.3B / 2.7B) as transformers 5.25 builds it
(modeling_gpt_neo.py): the config read, the parameters tensor by tensor, the tensors a layer saves.

GPT-2's block — ``ln_1``, attention, ``ln_2``, ``mlp.c_fc`` → GELU (tanh, python ops) →
``mlp.c_proj``, LayerNorms with bias, learned positions, a tied head — with separate
``attn.attention.q_proj`` / ``k_proj`` / ``v_proj`` without bias and ``out_proj`` with one, no
rotary and no score scaling, every other layer attending to a local window (a mask: the same
tensors). transformers has no SDPA for it: eager attention, whose scores come from fp32 copies of
q and k (``_attn``: ``query.to(torch.float32)``), kept by its matmul.
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
    fp32_scores_qk,
    norm_output_read_by,
)
from constraints.saved_tensors import _norm as _saved_norm

ATTENTION = ("attn.attention.q_proj", "attn.attention.k_proj", "attn.attention.v_proj")


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """GPTNeoConfig's fields (configuration_gpt_neo.py defaults, GPT-Neo 1.3B's shapes)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=2048), where)
    heads = _positive("num_heads", _int(cfg, "num_heads", where=where, default=16), where)
    inner = cfg.get("intermediate_size")
    positions = _int(cfg, "max_position_embeddings", where=where, default=2048)
    return ModelSpec(
        **common,
        family="gpt_neo",
        hidden=hidden,
        layers=_positive("num_layers", _int(cfg, "num_layers", where=where, default=24), where),
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "intermediate_size", where=where) if inner else 4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=50257), where),
        max_position=positions,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        learned_positions=positions,
        o_bias=True,
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=2,
        gated_mlp=False,
        activation=str(cfg.get("activation_function", "gelu_new")),
        sdpa_supported=False,
        hidden_dropout=float(cfg.get("resid_dropout", 0.0) or 0.0),
        embedding_dropout=float(cfg.get("embed_dropout", 0.0) or 0.0),
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    a = "attn.attention"
    groups = [
        ParamGroup("wte", "embedding", spec.vocab * h, role="embedding"),
        ParamGroup("wpe", "position", spec.learned_positions * h, role="embedding"),
        *_norm("ln_1/ln_2", spec, h, b, per_block=2),
        *_linear(f"{a}.q_proj", "q_proj", h, h, block=b, role="attention"),
        *_linear(f"{a}.k_proj", "k_proj", h, h, block=b, role="attention"),
        *_linear(f"{a}.v_proj", "v_proj", h, h, block=b, role="attention"),
        *_linear(f"{a}.out_proj", "out_proj", h, h, block=b, role="attention", bias=True),
        *_linear("mlp.c_fc", "c_fc", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.c_proj", "c_proj", i, h, block=b, role="mlp", bias=True),
        *_norm("ln_f", spec, h, ""),
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    drop = spec.hidden_dropout > 0
    s = _saved_norm(spec, "ln_1", h)
    s.append(Saved("q/k/v input (ln_1 output)", h, "compute", inputs_of=ATTENTION, tp_split=False))
    s += _attention_core(spec, h, h, h, "attn.attention.out_proj")
    s.append(fp32_scores_qk(h, h))
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += _saved_norm(spec, "ln_2", h)
    s.append(norm_output_read_by("mlp.c_fc", "ln_2", h))
    s += _plain_mlp(spec, "mlp.c_fc", "mlp.c_proj", i)
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s
