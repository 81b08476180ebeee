"""Reading one field of a Hugging Face ``config.json``: present, whole, positive, dividing."""

from __future__ import annotations

import math
from typing import Any

from constraints.errors import FitplanError
from constraints.limits import excerpt


def required(cfg: dict[str, Any], *keys: str, where: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    raise FitplanError(
        f"{where}: config.json has no {' / '.join(keys)}",
        "is this a complete Hugging Face config.json? pass raw numbers (--params …) otherwise",
    )


def int_field(cfg: dict[str, Any], *keys: str, where: str, default: int | None = None) -> int:
    try:
        value = required(cfg, *keys, where=where)
    except FitplanError:
        if default is None:
            raise
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or int(value) != value
    ):
        raise FitplanError(f"{where}: {keys[0]} must be an integer, got {value!r}")
    if value < 0:
        raise FitplanError(f"{where}: {keys[0]} must not be negative, got {value}")
    return int(value)


def per_head(hidden: int, heads: int, where: str) -> int:
    """hidden / heads, which must divide exactly (each head gets a whole slice)."""
    if hidden % heads:
        raise FitplanError(
            f"{where}: hidden size {hidden} is not divisible by {heads} attention heads",
            "each head takes hidden / heads elements; check the config",
        )
    return hidden // heads


def probability(cfg: dict[str, Any], key: str, default: float) -> float:
    """A dropout probability (checked in [0, 1) by spec_checks); null reads as absent."""
    value = cfg.get(key)
    return float(default if value is None else value)


def kv_heads(cfg: dict[str, Any], heads: int, where: str) -> int:
    """num_key_value_heads, or every head where the config leaves it out (or null)."""
    if cfg.get("num_key_value_heads") is None:
        return heads
    return positive(
        "num_key_value_heads", int_field(cfg, "num_key_value_heads", where=where), where
    )


def positive_field(cfg: dict[str, Any], key: str, default: int, where: str) -> int:
    """A positive whole number at ``key``, ``default`` where the config leaves it out."""
    return positive(key, int_field(cfg, key, where=where, default=default), where)


def positive(name: str, value: int, where: str) -> int:
    if value <= 0:
        raise FitplanError(f"{where}: {name} must be positive, got {value}")
    return value


def dense_prefix(kinds: Any, cfg: dict[str, Any], where: str) -> int:
    """How many layers come first with a dense MLP, from an ``mlp_layer_types`` list ("dense" /
    "sparse" per layer: Glm4MoeLiteConfig, ExaoneMoeConfig); a dense layer after a sparse one is
    refused (fitplan models a dense prefix), as is a list of the wrong length."""
    if not isinstance(kinds, list) or not all(k in ("dense", "sparse") for k in kinds):
        raise FitplanError(
            f"{where}: mlp_layer_types must list 'dense' or 'sparse' per layer, got {excerpt(kinds)}"
        )
    dense = kinds.index("sparse") if "sparse" in kinds else len(kinds)
    if "dense" in kinds[dense:]:
        raise FitplanError(
            f"{where}: mlp_layer_types {excerpt(kinds)} puts a dense layer after a sparse one",
            "fitplan models dense layers first, then MoE: pass raw numbers (--params …)",
        )
    layers = cfg.get("num_hidden_layers")
    if isinstance(layers, int) and len(kinds) != layers:
        raise FitplanError(
            f"{where}: mlp_layer_types lists {len(kinds)} layers, num_hidden_layers is {layers}"
        )
    return dense


#: where a type puts its windowed layers when its config.json has no ``layer_types`` (transformers
#: 5.25 configuration_<type>.py ``__post_init__``): every layer but each p-th, p from the config
#: key or its default (Gemma 2, gpt-oss: every other; Gemma 3: 6; Cohere 2, EXAONE 4: 4); Qwen
#: 2 / 3: the layers from ``max_window_layers`` (default 28) on. Any other type with a window
#: applies it in every layer (Mistral, Mixtral, Phi-3, Starcoder 2: one sliding mask for all).
SLIDING_EVERY: dict[str, tuple[str, int | str]] = {
    # GraniteSWAConfig.__post_init__: full attention where i % 4 == 0
    "granite_swa": ("", "GLLL"),
    "granitemoe_swa": ("", "GLLL"),
    "gemma2": ("", 2),
    "vaultgemma": ("", 2),
    "gpt_oss": ("", 2),
    "gemma3_text": ("sliding_window_pattern", 6),
    "cohere2": ("sliding_window_pattern", 4),
    "exaone4": ("sliding_window_pattern", 4),
    "exaone_moe": ("sliding_window_pattern", 4),
}
SLIDING_FROM_LAYER = {"qwen2": 28, "qwen3": 28}


def sliding_layers(cfg: dict[str, Any], model_type: str, layers: int, where: str) -> int:
    """How many of ``layers`` attend within the window (0 without one)."""
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list) and len(kinds) == layers:
        return sum(k == "sliding_attention" for k in kinds)
    if kinds is not None:
        raise FitplanError(
            f"{where}: layer_types must list one attention type per layer ({layers}), "
            f"got {excerpt(kinds)}"
        )
    if model_type in SLIDING_FROM_LAYER:
        first = int_field(
            cfg, "max_window_layers", where=where, default=SLIDING_FROM_LAYER[model_type]
        )
        return max(layers - first, 0)
    key, default = SLIDING_EVERY.get(model_type, ("", 0))
    every = cfg.get(key, default) if key else default
    if isinstance(every, str) and every and set(every) <= {"L", "G"}:
        return sum(every[i % len(every)] == "L" for i in range(layers))
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise FitplanError(f"{where}: {key} must be a positive integer, got {excerpt(every)}")
    return layers - layers // every if every else layers
