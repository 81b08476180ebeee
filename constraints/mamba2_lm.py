"""Mamba-2 (``state-spaces/mamba2-*``, Mistral's Mamba-Codestral) as transformers 5.25 builds
it (modeling_mamba2.py ``Mamba2ForCausalLM``): its config.json read, its parameters and what a
block saves.

A block is ``norm`` (Llama's RMSNorm) → the Mamba-2 mixer (``mixer``: Bamba's, constraints/
mamba2.py: one ``in_proj``, a depthwise conv, the chunked scan, the gated RMSNorm over
``n_groups`` groups, ``out_proj``) → added to the residual. No attention, no MLP. With
``residual_in_fp32`` (the default) the residual is upcast before the add, so the stream between
blocks is fp32 whatever the weights (``ModelSpec.residual_fp32``); each block casts it to its
norm weight's dtype first. ``norm_f``, an untied head by default (``tie_word_embeddings``).
"""

from __future__ import annotations

from typing import Any

from constraints import mamba2
from constraints.errors import FitplanError
from constraints.hf_config_fields import positive_field
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _norm, untied_head
from constraints.saved_tensors import Saved
from constraints.saved_tensors import _norm as _norm_saved

#: Mamba2Config's defaults (configuration_mamba2.py)
DEFAULTS = {
    "num_heads": 128,
    "head_dim": 64,
    "vocab_size": 32768,
    "hidden_size": 4096,
    "state_size": 128,
    "num_hidden_layers": 64,
    "expand": 2,
    "conv_kernel": 4,
    "n_groups": 8,
    "chunk_size": 256,
}
BLOCK = "mamba-dense"


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Mamba2Config's fields (its defaults where a key is absent); its
    ``validate_architecture``: the heads tile ``expand · hidden_size`` exactly."""
    hidden = _field(cfg, "hidden_size", where)
    heads, head_dim = _field(cfg, "num_heads", where), _field(cfg, "head_dim", where)
    expand, groups = _field(cfg, "expand", where), _field(cfg, "n_groups", where)
    if heads * head_dim != expand * hidden:
        raise FitplanError(
            f"{where}: num_heads {heads} × head_dim {head_dim} is not expand {expand} × "
            f"hidden_size {hidden}"
        )
    if heads % groups:
        raise FitplanError(f"{where}: n_groups {groups} does not divide num_heads {heads}")
    act = str(cfg.get("hidden_act", "silu"))
    if act not in ("silu", "swish"):
        raise FitplanError(
            f"{where}: hidden_act {act!r}: fitplan models Mamba-2's SiLU convolution",
            "pass raw numbers (--params …)",
        )
    return ModelSpec(
        **common,
        family=model_type,
        hidden=hidden,
        layers=_field(cfg, "num_hidden_layers", where),
        # no attention: the mixer's heads stand in where a width per head is asked
        heads=heads,
        kv_heads=heads,
        head_dim=head_dim,
        intermediate=0,
        vocab=_field(cfg, "vocab_size", where),
        max_position=None,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        layer_mixers="m" * _field(cfg, "num_hidden_layers", where),
        ssm_heads=heads,
        ssm_head_dim=head_dim,
        ssm_groups=groups,
        ssm_state=_field(cfg, "state_size", where),
        ssm_chunk=_field(cfg, "chunk_size", where),
        linear_conv_kernel=_field(cfg, "conv_kernel", where),
        ssm_conv_bias=bool(cfg.get("use_conv_bias", True)),
        mixer_bias=bool(cfg.get("use_bias", False)),
        residual_fp32=bool(cfg.get("residual_in_fp32", True)),
        sdpa_supported=False,  # no attention: transformers refuses an sdpa request
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    return mixer_stack_inventory(spec, BLOCK, mamba2.param_groups(spec, BLOCK, prefix="mixer"))


def mixer_stack_inventory(spec: ModelSpec, block: str, mixer: list[ParamGroup]) -> ParamInventory:
    """A state-space LM's tensors (Mamba, Mamba-2): the embedding, per block a norm and its
    ``mixer``'s tensors, the final norm, the head where untied."""
    h = spec.hidden
    groups = [
        ParamGroup("backbone.embeddings", "embedding", spec.vocab * h, role="embedding"),
        *_norm("norm", spec, h, block),
        *mixer,
        *_norm("norm_f", spec, h, ""),
        *untied_head(spec),
    ]
    return ParamInventory(spec.id, tuple(groups), {block: spec.layers})


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What one block saves: its norm (of the stream cast to the norm weight's dtype), then the
    mixer on transformers' torch path."""
    return _norm_saved(spec, "norm", spec.hidden) + mamba2.mixer_saved(spec, prefix="mixer")
