"""Reading one field of a Hugging Face ``config.json``: present, whole, positive, dividing."""

from __future__ import annotations

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
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
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
