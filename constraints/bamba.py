"""Bamba (IBM's Bamba-9B) as transformers 5.25 builds it (modeling_bamba.py): its config.json
read, its parameters tensor by tensor, and the tensors each kind of layer saves.

A layer: ``input_layernorm`` → a Mamba-2 mixer (``mamba``: constraints/mamba2.py) or, at
``attn_layer_indices``, Llama's attention (``self_attn``, partial rotary) → added to the
residual; ``pre_ff_layernorm`` → ``feed_forward`` (SwiGLU gate/up/down) → added. Llama's
RMSNorm (the weight after the cast), ``final_layernorm``, an untied head by default.
"""

from __future__ import annotations

from typing import Any

from constraints import mamba2
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _norm,
    attention_projections,
    untied_head,
)
from constraints.param_mlp import gated_mlp
from constraints.saved_tensors import (
    Saved,
    _gated_mlp,
    linear_input,
    projected_attention,
)
from constraints.saved_tensors import _norm as _norm_saved


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """BambaConfig's fields (configuration_bamba.py defaults where a key is absent)."""
    hidden = _positive("hidden_size", _int(cfg, "hidden_size", where=where, default=4096), where)
    heads = _positive(
        "num_attention_heads", _int(cfg, "num_attention_heads", where=where, default=32), where
    )
    # BambaConfig: num_key_value_heads None means one per attention head (its __post_init__)
    kv_heads = (
        heads
        if "num_key_value_heads" in cfg and cfg["num_key_value_heads"] is None
        else _positive(
            "num_key_value_heads",
            _int(cfg, "num_key_value_heads", where=where, default=8),
            where,
        )
    )
    if heads % kv_heads or hidden % heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} must divide hidden_size {hidden} and be a "
            f"multiple of num_key_value_heads {kv_heads}"
        )
    layers = _positive(
        "num_hidden_layers", _int(cfg, "num_hidden_layers", where=where, default=32), where
    )
    attention = cfg.get("attn_layer_indices") or []
    if not isinstance(attention, list) or not all(isinstance(i, int) for i in attention):
        raise FitplanError(
            f"{where}: attn_layer_indices must list layer indices, got {excerpt(attention)}"
        )
    return ModelSpec(
        **common,
        **mamba2.read(cfg, hidden, where),
        family="bamba",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=_int(cfg, "intermediate_size", where=where, default=14336),
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=128000), where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=262144),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", False)),
        o_bias=bool(cfg.get("attention_bias", False)),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        layer_mixers="".join("a" if i in attention else "m" for i in range(layers)),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    blocks = {"dense": spec.attention_layers, "mamba-dense": spec.layers - spec.attention_layers}
    blocks = {b: n for b, n in blocks.items() if n}
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("input_layernorm/pre_ff_layernorm", spec, h, b, per_block=2)
        groups += gated_mlp(spec, "feed_forward", spec.intermediate, b, "mlp")
        if b.startswith("mamba"):
            groups += mamba2.param_groups(spec, b)
            continue
        groups += attention_projections(spec, "self_attn", b)
    groups += _norm("final_layernorm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What a layer of ``block`` saves: attention ('dense') or the Mamba-2 mixer
    ('mamba-dense'), then the MLP."""
    h = spec.hidden
    s = _norm_saved(spec, "input_layernorm", h)
    if block.startswith("mamba"):
        s += mamba2.mixer_saved(spec)
    else:
        s += projected_attention(spec, "self_attn")
    s += _norm_saved(spec, "pre_ff_layernorm", h)
    up = ("feed_forward.gate_proj", "feed_forward.up_proj")
    s.append(linear_input("gate/up input (normed hidden)", h, *up))
    return s + _gated_mlp(spec, "feed_forward", spec.intermediate)
