"""Gemma 3n's text model (``gemma3n_text``; the text tower of Gemma 3n E2B / E4B) as transformers
5.25 builds it (modeling_gemma3n.py): its config.json read and its parameters tensor by tensor;
what its layers save is constraints/gemma3n_layers.py.

The residual stream is ``altup_num_inputs`` streams (AltUp): the embedding and its projections
(``altup_projections``), merged back at the end (``altup_unembed_projections``). A layer predicts
the streams (``altup``: a router over the active stream, ``prediction_coefs``), runs Gemma's
attention and GeGLU MLP on the active one with a low-rank side path (``laurel``), corrects the
streams (``correction_coefs``) and adds a gated projection of its per-layer input to the others.
Sliding and global layers (``layer_types``), the last ``num_kv_shared_layers`` reusing earlier
layers' keys and values (Gemma 4's scheme: constraints/gemma4.py), the first layers' MLP gate
sparsified by a Gaussian top-k (``activation_sparsity_pattern``). Layer letters as Gemma 4's.
"""

from __future__ import annotations

import dataclasses as dc
from typing import Any

from constraints.errors import FitplanError
from constraints.gemma3n_layers import block_layer, model_saved, norm_saved
from constraints.gemma4 import LETTER, attention_groups, gemma_layer_fields, shared_from
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_fields import positive_field
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.param_mlp import gated_mlp

#: what the family module offers the saved-tensor lists (constraints/family_modules.py)
__all__ = ["block_layer", "inventory", "model_saved", "norm_saved", "read"]

SLIDING, GLOBAL = "sliding_attention", "full_attention"
#: Gemma3nTextConfig's defaults (configuration_gemma3n.py)
DEFAULTS = {
    "hidden_size": 2048,
    "intermediate_size": 16384,
    "num_hidden_layers": 35,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "vocab_size": 262400,
    "vocab_size_per_layer_input": 262144,
    "hidden_size_per_layer_input": 256,
    "altup_num_inputs": 4,
    "num_kv_shared_layers": 15,
    "laurel_rank": 64,
    "sliding_window": 512,
    "max_position_embeddings": 32768,
}


def _field(cfg: dict[str, Any], key: str, where: str) -> int:
    return positive_field(cfg, key, DEFAULTS[key], where)


def _per_layer(cfg: dict[str, Any], key: str, layers: int, default: Any, where: str) -> list[Any]:
    value = cfg.get(key, default)
    values = value if isinstance(value, list) else [value] * layers
    if len(values) != layers:
        raise FitplanError(
            f"{where}: {key} must give one value per layer ({layers}) or one for all, "
            f"got {excerpt(value)}"
        )
    return values


def _mlp_width(cfg: dict[str, Any], layers: int, where: str) -> int:
    """``intermediate_size``: one width, or one per layer (all equal: fitplan models one)."""
    widths = _per_layer(cfg, "intermediate_size", layers, DEFAULTS["intermediate_size"], where)
    for w in widths:
        _positive(
            "intermediate_size",
            _int({"intermediate_size": w}, "intermediate_size", where=where),
            where,
        )
    if len(set(widths)) > 1:
        raise FitplanError(
            f"{where}: intermediate_size differs between layers: fitplan models one MLP width",
            "pass raw numbers (--params …)",
        )
    return int(widths[0])


def _sparse_layers(cfg: dict[str, Any], layers: int, where: str) -> int:
    """How many first layers sparsify their MLP gate (``activation_sparsity_pattern``: the
    config's default is the first ten at 0.95 when there are more than ten layers)."""
    default = [0.95] * 10 + [0.0] * (layers - 10) if layers > 10 else [0.0] * layers
    pattern = _per_layer(cfg, "activation_sparsity_pattern", layers, default, where)
    if not all(
        isinstance(p, int | float) and not isinstance(p, bool) and 0 <= p < 1 for p in pattern
    ):
        raise FitplanError(
            f"{where}: activation_sparsity_pattern must hold fractions in [0, 1), "
            f"got {excerpt(pattern)}"
        )
    sparse = sum(p > 0 for p in pattern)
    if any(p > 0 for p in pattern[sparse:]):
        raise FitplanError(
            f"{where}: activation_sparsity_pattern sparsifies layers after a dense one: fitplan "
            "models the sparse layers first",
            "pass raw numbers (--params …)",
        )
    return sparse


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """Gemma3nTextConfig's fields (its defaults where a key is absent)."""
    layers = _field(cfg, "num_hidden_layers", where)
    heads = _field(cfg, "num_attention_heads", where)
    kv_heads = _field(cfg, "num_key_value_heads", where)
    if heads % kv_heads:
        raise FitplanError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads "
            f"{kv_heads}"
        )
    kinds = cfg.get("layer_types")
    if kinds is None:
        kinds = [GLOBAL if (i + 1) % 5 == 0 else SLIDING for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= {SLIDING, GLOBAL}:
        raise FitplanError(
            f"{where}: layer_types must list '{SLIDING}' or '{GLOBAL}' for each of the "
            f"{layers} layers, got {excerpt(kinds)}"
        )
    is_global = [k == GLOBAL for k in kinds]
    first = shared_from(cfg, is_global, where, DEFAULTS["num_kv_shared_layers"], all_may=False)
    streams = _field(cfg, "altup_num_inputs", where)
    active = _int(cfg, "altup_active_idx", where=where, default=0)
    if active >= streams:
        raise FitplanError(
            f"{where}: altup_active_idx {active} is not one of the {streams} streams"
        )
    return ModelSpec(
        **common,
        **gemma_layer_fields(cfg, 30.0),
        family=model_type,
        hidden=_field(cfg, "hidden_size", where),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_field(cfg, "head_dim", where),
        intermediate=_mlp_width(cfg, layers, where),
        vocab=_field(cfg, "vocab_size", where),
        max_position=_field(cfg, "max_position_embeddings", where),
        sliding_layers=kinds.count(SLIDING),
        layer_mixers="".join(LETTER[g, i >= first] for i, g in enumerate(is_global)),
        per_layer_input=_field(cfg, "hidden_size_per_layer_input", where),
        per_layer_vocab=_field(cfg, "vocab_size_per_layer_input", where),
        altup_streams=streams,
        altup_scale=bool(cfg.get("altup_correct_scale", True)),
        laurel_rank=_field(cfg, "laurel_rank", where),
        sparse_mlp_layers=_sparse_layers(cfg, layers, where),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, n = spec.hidden, spec.altup_streams
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    blocks = {b: kinds.count(b) for b in dict.fromkeys(kinds)}
    lp, p = spec.layers * spec.per_layer_input, spec.per_layer_input
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding"),
        ParamGroup(
            "embed_tokens_per_layer", "embedding", spec.per_layer_vocab * lp, role="embedding"
        ),
        *_linear(
            "per_layer_model_projection", "per_layer_model_projection", h, lp, block="",
            role="other",
        ),
        *_norm("per_layer_projection_norm", spec, p, ""),
        # one h × h Linear per extra stream, into the streams and out of them
        *_linear("altup_projections", "altup_projections", h, h, block="", role="other", per_block=n - 1),
        *_linear(
            "altup_unembed_projections", "altup_unembed_projections", h, h, block="",
            role="other", per_block=n - 1,
        ),
    ]  # fmt: skip
    for b in blocks:
        groups += attention_groups(spec, b)
        groups += _norm(
            "input/post_attention/pre_feedforward/post_feedforward_layernorm", spec, h, b, 4
        )
        groups += gated_mlp(spec, "mlp", spec.intermediate, b, "mlp")
        groups += [
            ParamGroup("altup.correct_output_scale", "other", h, 1, b, "", "other"),
            *_linear("altup.correction_coefs", "correction_coefs", n, n, block=b, role="other"),
            *_linear("altup.prediction_coefs", "prediction_coefs", n, n * n, block=b, role="other"),
            # the router runs twice per layer: to predict the streams and to correct them
            dc.replace(
                _linear("altup.modality_router", "modality_router", h, n, block=b, role="other")[0],
                uses=2,
            ),
            *_norm("altup.router_norm", spec, h, b),
            *_linear("laurel.linear_left", "linear_left", h, spec.laurel_rank, block=b, role="mlp"),
            *_linear(
                "laurel.linear_right", "linear_right", spec.laurel_rank, h, block=b, role="mlp"
            ),
            *_norm("laurel.post_laurel_norm", spec, h, b),
            *_linear("per_layer_input_gate", "per_layer_input_gate", h, p, block=b, role="mlp"),
            *_linear("per_layer_projection", "per_layer_projection", p, h, block=b, role="mlp"),
            *_norm("post_per_layer_input_norm", spec, h, b),
        ]
    groups += _norm("norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)
