"""Model specs: from the built-in catalog, from a Hugging Face ``config.json``, or from raw numbers.

A :class:`ModelSpec` holds what decides parameter count, activation memory and FLOPs, in one
normalised vocabulary (``hidden``, ``layers``, ``kv_heads`` …) whatever the config called it
(GPT-2's ``n_embd``, T5's ``d_model``, Falcon's ``n_head`` …). The catalog
(``data/models.json``) stores each model as the real ``config.json`` fields of its Hub repo, so
the catalog and a user's file go through the same parser.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError, unknown_name
from constraints.hf_config import load_config_file, spec_from_hf_config
from constraints.model_spec import DATA_DIR, LLAMA_LIKE, SUPPORTED_TYPES, ModelSpec

__all__ = [
    "DATA_DIR",
    "LLAMA_LIKE",
    "SUPPORTED_TYPES",
    "ModelSpec",
    "catalog_entry",
    "catalog_ids",
    "catalog_model",
    "load_config_file",
    "raw_model",
    "resolve_model",
    "spec_from_hf_config",
]

# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------


@cache
def _catalog_entries() -> list[dict[str, Any]]:
    text = (DATA_DIR / "models.json").read_text(encoding="utf-8")
    entries: list[dict[str, Any]] = json.loads(text)
    return entries


@cache
def _catalog_index() -> dict[str, int]:
    index: dict[str, int] = {}
    for i, entry in enumerate(_catalog_entries()):
        for key in [
            entry["id"],
            entry.get("name", ""),
            entry.get("hf_repo", ""),
            *entry.get("aliases", []),
        ]:
            if key:
                index[key.lower()] = i
    return index


def catalog_ids() -> list[str]:
    return [e["id"] for e in _catalog_entries()]


@cache
def catalog_model(model_id: str) -> ModelSpec:
    key = model_id.strip().lower()
    if key not in _catalog_index():
        raise unknown_name("model", model_id, catalog_ids(), "fitplan models")
    entry = _catalog_entries()[_catalog_index()[key]]
    named = {
        "id": entry["id"],
        "name": entry.get("name", entry["id"]),
        "source": entry.get("source", ""),
        "published_total_params": entry.get("published_total_params"),
        "notes": entry.get("notes", "") or "",
    }
    if "towers" in entry:  # a multimodal checkpoint: its text model, the towers as stored
        from constraints.towers import spec_from_wrapper

        return spec_from_wrapper(entry["config"], entry["towers"], **named)
    return spec_from_hf_config(entry["config"], **named)


def catalog_entry(model_id: str) -> dict[str, Any]:
    return _catalog_entries()[_catalog_index()[catalog_model(model_id).id.lower()]]


def raw_model(
    params: float,
    *,
    trainable_params: float | None = None,
    layers: int | None = None,
    hidden: int | None = None,
    vocab: int | None = None,
    heads: int | None = None,
) -> ModelSpec:
    """A model known only by its numbers, so the source documents' arithmetic runs as stated.

    Without --layers/--hidden there is no activation estimate (it is reported as 0 with a note).
    """
    if not params or params <= 0:
        raise FitplanError(f"--params must be positive, got {params}")
    if params > 1e14:
        raise FitplanError(
            f"--params {params:.3g} is absurd (over 100 trillion)", "use e.g. --params 7e9"
        )
    if trainable_params is not None and not 0 < trainable_params <= params:
        raise FitplanError(
            f"--trainable-params {trainable_params:.4g} must be positive and at most --params {params:.4g}"
        )
    for flag, value in (
        ("--layers", layers),
        ("--hidden", hidden),
        ("--vocab", vocab),
        ("--heads", heads),
    ):
        if value is not None and value <= 0:
            raise FitplanError(f"{flag} must be positive, got {value}")
    if heads is not None and hidden is None:
        raise FitplanError("--heads needs --hidden (the heads split the hidden size)")
    if heads is not None and hidden is not None and hidden % heads:
        raise FitplanError(
            f"--hidden {hidden} is not divisible by --heads {heads}",
            "each head takes hidden / heads elements",
        )
    h = hidden or 1
    n_heads = heads or max(1, h // 128)
    while h % n_heads:  # the default head count (128-wide heads) must divide too
        n_heads -= 1
    notes = "raw numbers: weights/gradients/optimizer from the totals as given"
    if not (layers and hidden):
        notes += "; no --layers/--hidden, so activations are not estimated"
    else:
        notes += (
            "; activations from Korthikanti's GPT layer (34·h bytes per token per layer in 16-bit)"
        )
    from constraints.spec_checks import check_spec

    return check_spec(
        ModelSpec(
            id=f"raw-{params:.3g}",
            name=f"raw model ({params:.4g} parameters)",
            family="raw",
            arch="raw",
            hidden=h,
            layers=layers or 1,
            heads=n_heads,
            kv_heads=n_heads,
            head_dim=max(1, h // n_heads),
            intermediate=4 * h,
            vocab=vocab or 1,
            gated_mlp=False,
            activation="gelu",
            norm="layernorm",
            raw_params=round(params),
            raw_trainable_params=round(trainable_params) if trainable_params is not None else None,
            caveats=notes,
        ),
        "raw numbers",
    )


def resolve_model(name_or_path: str, family: str | None = None) -> ModelSpec:
    """A catalog id/alias (case-insensitive) or a path to a config.json (or its folder).
    ``family`` reads a config.json with a missing or unknown model_type as that family."""
    from constraints.limits import excerpt

    if len(name_or_path) > 4096 or "\x00" in name_or_path:
        raise FitplanError(f"--model {excerpt(name_or_path)} is not a model name or a path")
    text = name_or_path.strip()
    if not text:
        raise FitplanError(
            "--model is empty", "name a catalog model (fitplan models) or a config.json path"
        )
    if text.lower() in _catalog_index():
        if family is not None:
            raise FitplanError(
                f"--family does nothing with the catalog model {text}: it names its family",
                "--family applies to a config.json path",
            )
        return catalog_model(text)
    try:
        p = Path(text).expanduser()
        is_path = p.exists() or p.is_symlink() or p.suffix == ".json"
    except (OSError, ValueError, RuntimeError):  # a bad path, '~nobody'
        p, is_path = Path(text), False
    if is_path:
        return load_config_file(p, family=family)
    raise unknown_name("model", text, catalog_ids(), "fitplan models")
