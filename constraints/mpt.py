"""MPT (MosaicML's MPT-7B / 30B) as transformers 5.25 builds it (modeling_mpt.py): its config.json
read, its parameters tensor by tensor, and the tensors its layer saves.

A layer: ``norm_1`` (a LayerNorm whose bias is dropped) → ``attn.Wqkv`` (one fused projection, no
bias; optionally clamped to ``clip_qkv``) chunked into q, k, v views → ``matmul(q, kᵀ)`` scaled,
plus the ALiBi bias (one [heads, 1, max_seq_len] tensor the model builds each forward), the
causal mask filled in → ``softmax(scores.float())`` cast back → dropout → ``matmul`` with v →
heads merged (a contiguous copy) → ``attn.out_proj``, dropout added to the residual; ``norm_2`` →
``ffn.up_proj`` (4 × d_model, whatever ``expansion_ratio`` says) → exact GELU → ``ffn.down_proj``,
dropout. Eager attention only. No position embedding (ALiBi); the head is tied to ``wte`` by
default; every norm, ``norm_f`` too, has its bias dropped.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, untied_head
from constraints.saved_tensors import Saved, _attention_core, pre_norm_block


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """MptConfig's fields (configuration_mpt.py; ``attn_config`` a nested MptAttentionConfig),
    its defaults where a key is absent; the attention variants its layer code does not build
    (grouped or multi-query heads, q/k LayerNorms) refused by name."""
    attn = cfg.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise FitplanError(f"{where}: attn_config must be a mapping, got {excerpt(attn)}")
    for key, builds in (("attn_type", "multihead_attention"), ("qk_ln", False)):
        if key in attn and attn[key] not in (builds, None):
            raise FitplanError(
                f"{where}: attn_config.{key} {excerpt(attn[key])} is not what transformers' MPT "
                f"builds ({builds})",
                "pass raw numbers (--params …) or a config without it",
            )
    hidden = _positive(
        "d_model", _int(cfg, "d_model", "hidden_size", where=where, default=2048), where
    )
    heads = _positive(
        "n_heads", _int(cfg, "n_heads", "num_attention_heads", where=where, default=16), where
    )
    expansion = _int(cfg, "expansion_ratio", where=where, default=4)
    if expansion != 4:
        raise FitplanError(
            f"{where}: expansion_ratio {expansion}: transformers' MptMLP is 4 × d_model wide "
            "whatever the config says (its checkpoint would not load)",
            "pass raw numbers (--params …)",
        )
    pdrop = float(attn.get("attn_pdrop") or 0.0)
    clip = attn.get("clip_qkv")
    return ModelSpec(
        **common,
        family="mpt",
        hidden=hidden,
        layers=_positive(
            "n_layers", _int(cfg, "n_layers", "num_hidden_layers", where=where, default=24), where
        ),
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=50368), where),
        max_position=_int(cfg, "max_seq_len", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        norm="layernorm",
        gated_mlp=False,
        activation="gelu",
        fused_qkv=True,
        # MptMLP and MptBlock take their dropout from attn_config.attn_pdrop (resid_pdrop unused)
        hidden_dropout=pdrop,
        attention_dropout=pdrop,
        sdpa_supported=False,
        qkv_clip=float(clip or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("wte", "embedding", spec.vocab * h, role="embedding"),
        # norm_1 / norm_2 hold a weight only (MptBlock sets their bias to None)
        ParamGroup("norm_1/norm_2", "norm", h, 2, b, "", "norm"),
        *_linear("attn.Wqkv", "Wqkv", h, 3 * h, block=b, role="attention"),
        *_linear("attn.out_proj", "out_proj", h, h, block=b, role="attention"),
        *_linear("ffn.up_proj", "up_proj", h, i, block=b, role="mlp"),
        *_linear("ffn.down_proj", "down_proj", i, h, block=b, role="mlp"),
        ParamGroup("norm_f", "norm", h, 1, "", "", "norm"),  # its bias set to None too
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h = spec.hidden
    attention = []
    if spec.qkv_clip:
        attention.append(Saved("Wqkv output before the clamp (clamp's input)", 3 * h, "compute"))
    attention += _attention_core(spec, h, h, h, "attn.out_proj", qkv_storage=3 * h)
    return pre_norm_block(
        spec, ("norm_1", "norm_2"), ("attn.Wqkv", "ffn.up_proj", "ffn.down_proj"), attention
    )
