"""Gemma 4's text model (``gemma4_text``; the text tower of Gemma 4 checkpoints) as transformers
5.25 builds it (modeling_gemma4.py): its config.json read, its parameters tensor by tensor, and
what each kind of layer saves.

A layer: ``input_layernorm`` → attention → ``post_attention_layernorm``, added to the residual;
``pre_feedforward_layernorm`` → a GeGLU MLP (and, with ``enable_moe_block``, a routed MoE beside
it reading the residual, each with its own norms) → ``post_feedforward_layernorm``, added; then,
with per-layer embeddings (``hidden_size_per_layer_input``), a gated projection of the layer's
slice of them added too. Attention layers are sliding-window or global (``layer_types``); the
global ones have their own head width (``global_head_dim``) and key/value heads, and with
``attention_k_eq_v`` no v_proj (the values are the keys before their norm). The last
``num_kv_shared_layers`` layers reuse the keys and values of the last earlier layer of their
type: no k/v projections or norms (``kv_sharing_modes``), and with ``use_double_wide_mlp`` an
MLP twice as wide. Every RMSNorm computes ``x · (mean(x²) + ε)^-½ · w`` in fp32
(``Gemma4RMSNorm``; the v norm has no weight).

Layer letters in ``ModelSpec.layer_mixers``: ``a`` sliding, ``g`` global, ``s`` sliding and
``r`` global layers reusing another layer's keys and values.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.gemma4_layers import (
    block_layer,
    block_shape,
    mlp_width,
    model_saved,
    norm_saved,
    owns_kv,
    values_are_keys,
)
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import positive_field
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.param_mlp import gated_mlp

SLIDING, GLOBAL = "sliding_attention", "full_attention"
#: (global layer, reuses another layer's K/V) -> layer letter
LETTER = {(False, False): "a", (True, False): "g", (False, True): "s", (True, True): "r"}
#: Gemma4TextConfig's defaults (configuration_gemma4.py; ``global_head_dim`` is popped in
#: ``__post_init__``)
DEFAULTS = {
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 30,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "global_head_dim": 512,
    "vocab_size": 262144,
    "vocab_size_per_layer_input": 262144,
    "hidden_size_per_layer_input": 256,
    "sliding_window": 512,
    "max_position_embeddings": 131072,
}
#: Gemma4TextConfig.kv_sharing_modes raises the same
SHARED_TYPES_REFUSAL = (
    "the layers sharing keys and values include a type (sliding or global) that no earlier "
    "layer computes"
)
#: what a ``per_layer_config`` entry may override (anything else is a shape not modelled)
LAYER_OVERRIDES = {"head_dim", "num_key_value_heads"}


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def gemma_layer_fields(cfg: dict[str, Any], softcap: float | None) -> dict[str, Any]:
    """What Gemma 4's and Gemma 3n's layers share: fp32 RMSNorms weighted before the cast,
    four a layer, per-head q/k norms, GeGLU, a window, a logit soft-cap (``softcap``: the
    config class's default), biases on attention only."""
    window = cfg.get("sliding_window", DEFAULTS["sliding_window"])
    bias = bool(cfg.get("attention_bias", False))
    return {
        "tie_embeddings": bool(cfg.get("tie_word_embeddings", True)),
        "qkv_bias": bias,
        "o_bias": bias,
        "norm_weight_fp32": True,
        "norms_per_layer": 4,
        "qk_norm": "head",
        "activation": str(cfg.get("hidden_activation", "gelu_pytorch_tanh")),
        "attention_dropout": float(cfg.get("attention_dropout", 0.0) or 0.0),
        "final_softcap": float(cfg.get("final_logit_softcapping", softcap) or 0.0),
        "sliding_window": int(window) if isinstance(window, int) and window > 0 else None,
    }


def _layer_types(cfg: dict[str, Any], layers: int, where: str) -> list[bool]:
    """Whether each layer is global; Gemma4TextConfig's 5:1 pattern without ``layer_types``,
    the last layer global whatever the list says (it forces it)."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = [GLOBAL if (i + 1) % 6 == 0 else SLIDING for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {SLIDING, GLOBAL}:
        raise FitplanError(
            f"{where}: layer_types must list '{SLIDING}' or '{GLOBAL}' for each of the "
            f"{layers} layers, got {excerpt(kinds)}"
        )
    return [k == GLOBAL for k in kinds[:-1]] + [True]


def _global_shape(
    cfg: dict[str, Any], is_global: list[bool], head_dim: int, kv_heads: int, where: str
) -> tuple[int, int]:
    """The global layers' head width and key/value heads: from ``per_layer_config`` (what
    transformers writes), else ``global_head_dim`` and, with ``attention_k_eq_v``,
    ``num_global_key_value_heads``."""
    overrides = cfg.get("per_layer_config")
    if overrides is None:
        g_kv = cfg.get("num_global_key_value_heads") if cfg.get("attention_k_eq_v") else None
        g_kv = kv_heads if g_kv is None else _int(cfg, "num_global_key_value_heads", where=where)
        return _field(cfg, "global_head_dim", where), _positive(
            "num_global_key_value_heads", g_kv, where
        )
    if not isinstance(overrides, dict):
        raise FitplanError(
            f"{where}: per_layer_config must map layer indices to their overrides, "
            f"got {excerpt(overrides)}"
        )
    shapes: dict[bool, set[tuple[int, int]]] = {True: set(), False: set()}
    for key, layer in overrides.items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            index = -1
        if not 0 <= index < len(is_global) or not isinstance(layer, dict):
            raise FitplanError(
                f"{where}: per_layer_config key {excerpt(key)} is not a layer index with its "
                f"overrides (0 … {len(is_global) - 1})"
            )
        if set(layer) - LAYER_OVERRIDES:
            raise FitplanError(
                f"{where}: per_layer_config overrides {sorted(set(layer) - LAYER_OVERRIDES)} "
                f"of layer {index}: only head_dim and num_key_value_heads per layer are modelled",
                "pass raw numbers (--params …)",
            )
        shape = {"head_dim": head_dim, "num_key_value_heads": kv_heads, **layer}
        shapes[is_global[index]].add(
            (
                _positive("head_dim", _int(shape, "head_dim", where=where), where),
                _positive(
                    "num_key_value_heads", _int(shape, "num_key_value_heads", where=where), where
                ),
            )
        )
    global_layers = sum(is_global)
    listed = sum(1 for k in overrides if is_global[int(k)])
    if (
        shapes[False] - {(head_dim, kv_heads)}
        or len(shapes[True]) > 1
        or (shapes[True] and listed != global_layers)
    ):
        raise FitplanError(
            f"{where}: per_layer_config gives layers of one type different shapes: fitplan "
            "models one shape for the sliding layers and one for the global layers",
            "pass raw numbers (--params …)",
        )
    return next(iter(shapes[True]), (head_dim, kv_heads))


def shared_from(
    cfg: dict[str, Any], is_global: list[bool], where: str, default: int = 0, all_may: bool = True
) -> int:
    """The first layer that reuses an earlier layer's keys and values (the layer count: none);
    ``all_may``: every layer may reuse (Gemma 4's config allows it, Gemma 3n's does not)."""
    layers = len(is_global)
    shared = _int(cfg, "num_kv_shared_layers", where=where, default=default)
    if shared > layers:
        raise FitplanError(
            f"{where}: num_kv_shared_layers {shared} is more than the {layers} layers"
        )
    first = layers - shared
    if shared and (shared < layers or not all_may) and set(is_global[:first]) != set(is_global):
        raise FitplanError(
            f"{where}: {SHARED_TYPES_REFUSAL}", "check layer_types and num_kv_shared_layers"
        )
    return first


def _moe_fields(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    if not cfg.get("enable_moe_block"):
        return {}
    return {
        "num_experts": _positive("num_experts", _int(cfg, "num_experts", where=where), where),
        "experts_per_token": _positive(
            "top_k_experts", _int(cfg, "top_k_experts", where=where), where
        ),
        "moe_intermediate": _positive(
            "moe_intermediate_size", _int(cfg, "moe_intermediate_size", where=where), where
        ),
        "router_linear": True,
    }


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Gemma4TextConfig's fields (its defaults where a key is absent)."""
    if cfg.get("use_bidirectional_attention") == "all":
        raise FitplanError(
            f"{where}: use_bidirectional_attention is 'all': a Gemma 4 encoder, not a causal "
            "language model",
            "pass raw numbers (--params …)",
        )
    layers = _field(cfg, "num_hidden_layers", where)
    heads = _field(cfg, "num_attention_heads", where)
    kv_heads = _field(cfg, "num_key_value_heads", where)
    head_dim = _field(cfg, "head_dim", where)
    is_global = _layer_types(cfg, layers, where)
    g_dim, g_kv = _global_shape(cfg, is_global, head_dim, kv_heads, where)
    for n in (kv_heads, g_kv):
        if heads % n:
            raise FitplanError(
                f"{where}: num_attention_heads {heads} is not a multiple of {n} key/value heads"
            )
    first_shared = shared_from(cfg, is_global, where)
    per_layer = _int(
        cfg, "hidden_size_per_layer_input", where=where,
        default=DEFAULTS["hidden_size_per_layer_input"],
    )  # fmt: skip
    return ModelSpec(
        **common,
        **_moe_fields(cfg, where),
        **gemma_layer_fields(cfg, None),
        family=model_type,
        hidden=_field(cfg, "hidden_size", where),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=_field(cfg, "intermediate_size", where),
        vocab=_field(cfg, "vocab_size", where),
        max_position=_field(cfg, "max_position_embeddings", where),
        sliding_layers=is_global.count(False),
        layer_mixers="".join(LETTER[g, i >= first_shared] for i, g in enumerate(is_global)),
        global_head_dim=g_dim,
        global_kv_heads=g_kv,
        global_k_eq_v=bool(cfg.get("attention_k_eq_v", False)),
        shared_kv_double_mlp=bool(cfg.get("use_double_wide_mlp", False)),
        per_layer_input=per_layer,
        per_layer_vocab=_field(cfg, "vocab_size_per_layer_input", where) if per_layer else 0,
    )


#: what the family module offers the saved-tensor lists (constraints/family_modules.py)
__all__ = ["block_layer", "inventory", "model_saved", "norm_saved", "read"]


def inventory(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks = {b: kinds.count(b) for b in dict.fromkeys(kinds)}
    groups = [ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")]
    if spec.per_layer_input:
        lp = spec.layers * spec.per_layer_input
        groups += [
            ParamGroup(
                "embed_tokens_per_layer", "embedding", spec.per_layer_vocab * lp, role="embedding"
            ),
            *_linear(
                "per_layer_model_projection", "per_layer_model_projection", h, lp,
                block="", role="other",
            ),
            *_norm("per_layer_projection_norm", spec, spec.per_layer_input, ""),
        ]  # fmt: skip
    for b in blocks:
        groups += attention_groups(spec, b)
        groups += _norm(
            "input/post_attention/pre_feedforward/post_feedforward_layernorm", spec, h, b, 4
        )
        groups += gated_mlp(spec, "mlp", mlp_width(spec, b), b, "mlp")
        if spec.is_moe:
            groups += _moe_groups(spec, b)
        if spec.per_layer_input:
            p = spec.per_layer_input
            groups += [
                *_linear("per_layer_input_gate", "per_layer_input_gate", h, p, block=b, role="mlp"),
                *_linear("per_layer_projection", "per_layer_projection", p, h, block=b, role="mlp"),
                *_norm("post_per_layer_input_norm", spec, h, b),
            ]
    groups += _norm("norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def attention_groups(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """q/o projections and q_norm; in a layer computing its own K/V, k/v projections (no v_proj
    where the values are the keys) and k_norm (the v norm has no weight)."""
    shape = block_shape(spec, block)
    h, q, kv, d, bias = spec.hidden, shape.q_width, shape.kv_width, shape.head_dim, spec.qkv_bias
    groups = [
        *_linear("self_attn.q_proj", "q_proj", h, q, block=block, role="attention", bias=bias),
        *_norm("self_attn.q_norm", spec, d, block),
        *_linear("self_attn.o_proj", "o_proj", q, h, block=block, role="attention", bias=bias),
    ]
    if not owns_kv(block):
        return groups
    groups += [
        *_linear("self_attn.k_proj", "k_proj", h, kv, block=block, role="attention", bias=bias),
        *_norm("self_attn.k_norm", spec, d, block),  # the v norm has no weight
    ]
    if not values_are_keys(spec, block):
        groups += _linear(
            "self_attn.v_proj", "v_proj", h, kv, block=block, role="attention", bias=bias
        )
    return groups


def _moe_groups(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """``Gemma4TextRouter`` (an unweighted norm, a ``scale`` per channel, the ``proj`` Linear, a
    ``per_expert_scale``) and ``Gemma4TextExperts`` (3-D gate_up_proj / down_proj Parameters),
    with the three norms around them."""
    h, e = spec.hidden, spec.num_experts
    return [
        *_linear("router.proj", "proj", h, e, block=block, role="router"),
        ParamGroup("router.scale", "other", h, 1, block, "", "router"),
        ParamGroup("router.per_expert_scale", "other", e, 1, block, "", "router"),
        *gated_mlp(spec, "experts", spec.moe_intermediate, block, "expert", per_block=e),
        *_norm("post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2", spec, h, block, 3),
    ]
