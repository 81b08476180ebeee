"""Falcon-H1 (TII's Falcon-H1 0.5B … 34B) as transformers 5.25 builds it (modeling_falcon_h1.py):
its config.json read, its parameters tensor by tensor, and what a layer saves.

Every layer is one kind: ``input_layernorm``, then side by side a Mamba-2 mixer (``mamba``:
Bamba's, constraints/mamba2.py, with its own width ``mamba_d_ssm`` and an optional gated norm)
and Llama's attention (``self_attn``), their outputs summed into the residual;
``pre_ff_layernorm`` → ``feed_forward`` (SwiGLU) → added. μP multipliers scale the branch
inputs and outputs (``ssm_in_multiplier``, ``attention_in_multiplier``, ``key_multiplier``, the
MLP's, the logits'): each makes a new tensor, which the linear after it keeps in place of the
norm's output; none adds a parameter. Llama's RMSNorm, ``final_layernorm``, an untied head by
default. Layer letter ``p`` in ``ModelSpec.layer_mixers``.
"""

from __future__ import annotations

from typing import Any

from constraints import mamba2
from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
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
from constraints.saved_tensors import Saved, _gated_mlp, linear_input, projected_attention
from constraints.saved_tensors import _norm as _norm_saved

#: FalconH1Config's defaults (configuration_falcon_h1.py) where they differ from Bamba's mixer
MIXER_DEFAULTS = {"mamba_d_ssm": 1024}
BLOCK = "hybrid-dense"


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """FalconH1Config's fields (its defaults where a key is absent)."""
    hidden = positive_field(cfg, "hidden_size", 4096, where)
    heads = positive_field(cfg, "num_attention_heads", 32, where)
    kv = cfg.get("num_key_value_heads", 8)
    kv_heads = heads if kv is None else positive_field(cfg, "num_key_value_heads", 8, where)
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    # FalconH1Attention: getattr(config, "head_dim", hidden // heads)
    head_dim = (
        positive_field(cfg, "head_dim", 0, where)
        if cfg.get("head_dim") is not None
        else hidden // heads
    )
    if not head_dim:
        raise FitplanError(f"{where}: hidden_size {hidden} is smaller than {heads} heads")
    layers = positive_field(cfg, "num_hidden_layers", 32, where)
    rms_norm = bool(cfg.get("mamba_rms_norm", False))
    before_gate = bool(cfg.get("mamba_norm_before_gate", True))
    return ModelSpec(
        **common,
        **mamba2.read(cfg, hidden, where, MIXER_DEFAULTS),
        family=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=positive_field(cfg, "intermediate_size", 14336, where),
        vocab=positive_field(cfg, "vocab_size", 128000, where),
        max_position=_int(cfg, "max_position_embeddings", where=where, default=8192),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", False)),
        o_bias=bool(cfg.get("attention_bias", False)),
        mlp_bias=bool(cfg.get("mlp_bias", False)),
        layer_mixers="p" * layers,
        ssm_out_bias=bool(cfg.get("projectors_bias", False)),
        ssm_norm=("norm-first" if before_gate else "gate-first") if rms_norm else "none",
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, b = spec.hidden, BLOCK
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        *_norm("input_layernorm/pre_ff_layernorm", spec, h, b, per_block=2),
        *gated_mlp(spec, "feed_forward", spec.intermediate, b, "mlp"),
        *mamba2.param_groups(spec, b),
        *attention_projections(spec, "self_attn", b),
        *_norm("final_layernorm", spec, h, ""),
        *untied_head(spec),
    ]
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """The layer: its norm, the Mamba-2 mixer on ``normed · ssm_in_multiplier`` and attention
    on ``normed · attention_in_multiplier`` (each input its own tensor), then the MLP."""
    h = spec.hidden
    s = _norm_saved(spec, "input_layernorm", h)
    # in_proj's output × mup_vector, a buffer in the weights' dtype (fp32 under autocast)
    s += mamba2.mixer_saved(spec, projection="residual")
    s += projected_attention(spec, "self_attn")
    s += _norm_saved(spec, "pre_ff_layernorm", h)
    up = ("feed_forward.gate_proj", "feed_forward.up_proj")
    s.append(linear_input("gate/up input (normed hidden)", h, *up))
    return s + _gated_mlp(spec, "feed_forward", spec.intermediate)
