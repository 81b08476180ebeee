"""Jamba (AI21's Jamba 1.5 / 1.6 Mini and Large, Jamba Reasoning) as transformers 5.25 builds it
(modeling_jamba.py): its config.json read, its parameters tensor by tensor, and what each kind
of layer saves.

A layer: ``input_layernorm`` → attention (``self_attn``: Llama's projections, no rotary) at
``i % attn_layer_period == attn_layer_offset``, else a Mamba-1 mixer (``mamba``: constraints/
mamba1.py, with weighted RMSNorms on dt, B and C) → added; ``pre_ff_layernorm`` →
``feed_forward``: an MoE (``router``, a Parameter: softmax in fp32, top-k unnormalised; the
experts' ``gate_up_proj`` / ``down_proj`` stacks) at ``i % expert_layer_period ==
expert_layer_offset``, else a SwiGLU MLP → added. ``final_layernorm``, an untied head.
"""

from __future__ import annotations

from typing import Any

from constraints import mamba1
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import positive_field
from constraints.model_spec import ModelSpec
from constraints.param_groups import (
    ParamGroup,
    ParamInventory,
    _norm,
    attention_projections,
    untied_head,
)
from constraints.param_mlp import gated_mlp
from constraints.saved_moe import routed_experts
from constraints.saved_tensors import (
    Saved,
    _gated_mlp,
    linear_input,
    projected_attention,
)
from constraints.saved_tensors import _norm as _norm_saved

#: JambaConfig's defaults (configuration_jamba.py)
DEFAULTS = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 65536,
    "max_position_embeddings": 262144,
    "num_experts": 16,
    "num_experts_per_tok": 2,
}
#: JambaConfig's names of the Mamba mixer's fields
MIXER_KEYS = {
    "expand": "mamba_expand",
    "state_size": "mamba_d_state",
    "conv_kernel": "mamba_d_conv",
    "time_step_rank": "mamba_dt_rank",
    "use_conv_bias": "mamba_conv_bias",
    "use_bias": "mamba_proj_bias",
}
FFN = "feed_forward"


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def _period(
    cfg: dict[str, Any], what: str, period: int, offset: int, where: str
) -> tuple[int, int]:
    """A layer pattern's (period, offset), the offset below the period (its
    ``validate_architecture``)."""
    p = _positive(f"{what}_period", _int(cfg, f"{what}_period", where=where, default=period), where)
    o = _int(cfg, f"{what}_offset", where=where, default=offset)
    if not 0 <= o < p:
        raise FitplanError(f"{where}: {what}_offset {o} must be in [0, {what}_period {p})")
    return p, o


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """JambaConfig's fields (its defaults where a key is absent)."""
    hidden = _field(cfg, "hidden_size", where)
    heads = _field(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads", DEFAULTS["num_key_value_heads"])
    kv_heads = heads if kv is None else _field(cfg, "num_key_value_heads", where)
    if heads % kv_heads or hidden % heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} must divide hidden_size {hidden} and be a "
            f"multiple of num_key_value_heads {kv_heads}"
        )
    layers = _field(cfg, "num_hidden_layers", where)
    attn_period, attn_offset = _period(cfg, "attn_layer", 8, 4, where)
    moe_period, moe_offset = _period(cfg, "expert_layer", 2, 1, where)
    experts = _field(cfg, "num_experts", where)
    moe = experts > 1 and any(i % moe_period == moe_offset for i in range(layers))
    if moe and moe_offset != moe_period - 1:
        raise FitplanError(
            f"{where}: expert_layer_offset {moe_offset} with expert_layer_period {moe_period}: "
            "fitplan models experts on every period's last layer (offset = period − 1, as every "
            "published Jamba)",
            "pass raw numbers (--params …)",
        )
    top_k = _field(cfg, "num_experts_per_tok", where)
    if moe and top_k > experts:
        raise FitplanError(f"{where}: num_experts_per_tok {top_k} exceeds num_experts {experts}")
    intermediate = _field(cfg, "intermediate_size", where)
    return ModelSpec(
        **common,
        **mamba1.read(cfg, hidden, where, MIXER_KEYS, inner_key=None),
        family=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=intermediate,
        vocab=_field(cfg, "vocab_size", where),
        max_position=_field(cfg, "max_position_embeddings", where),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0) or 0.0),
        layer_mixers="".join("a" if i % attn_period == attn_offset else "y" for i in range(layers)),
        ssm_bcdt_norm="rmsnorm",
        num_experts=experts if moe else 0,
        experts_per_token=top_k if moe else 0,
        moe_intermediate=intermediate if moe else 0,
        moe_every=moe_period,
        router_linear=False,
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks = {b: kinds.count(b) for b in dict.fromkeys(kinds)}
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    for b in blocks:
        groups += _norm("input_layernorm/pre_ff_layernorm", spec, h, b, per_block=2)
        if b.startswith("mamba1-"):
            groups += mamba1.param_groups(spec, b, prefix="mamba")
        else:
            groups += attention_projections(spec, "self_attn", b)
        if b.endswith("moe"):
            e = spec.num_experts
            groups.append(
                ParamGroup(f"{FFN}.router.weight", "router", e * h, 1, b, "router", "router")
            )
            groups += gated_mlp(
                spec, f"{FFN}.experts", spec.moe_intermediate, b, "expert", per_block=e
            )
        else:
            groups += gated_mlp(spec, FFN, spec.intermediate, b, "mlp")
    groups += _norm("final_layernorm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What a layer of ``block`` saves: its mixer (attention, or Mamba on transformers' torch
    path), then its MLP or MoE."""
    h = spec.hidden
    s = _norm_saved(spec, "input_layernorm", h)
    if block.startswith("mamba1-"):
        s += mamba1.mixer_saved(spec, prefix="mamba")
    else:
        s += projected_attention(spec, "self_attn")
    s += _norm_saved(spec, "pre_ff_layernorm", h)
    if block.endswith("moe"):
        return s + _moe_saved(spec)
    s.append(linear_input("gate/up input (normed hidden)", h, f"{FFN}.gate_proj", f"{FFN}.up_proj"))
    return s + _gated_mlp(spec, FFN, spec.intermediate)


def _moe_saved(spec: ModelSpec) -> list[Saved]:
    """``JambaSparseMoeBlock``: the router's F.linear on its Parameter (its input kept only
    where the router trains), its softmax in fp32, each token's hidden gathered for its top-k
    experts, their fused gate/up → SiLU · up → down, scaled by the routing weights."""
    h, k, e = spec.hidden, spec.experts_per_token, spec.num_experts
    experts = f"{FFN}.experts"
    return [
        Saved(
            "router input (normed hidden)",
            h,
            "compute",
            inputs_of=(f"{FFN}.router",),
            tp_split=False,
        ),
        Saved("router probabilities (fp32 softmax)", e, "fp32", tp_split=False),
        *routed_experts(
            spec, experts, spec.moe_intermediate, k, (f"{experts}.gate_proj", f"{experts}.up_proj")
        ),
    ]
