"""Which family a ``config.json`` is: its ``model_type`` (or ``--family``), checked first.

The type is read before any field's value is, so a config of a type fitplan does not model is
refused for its type (naming it and what is supported), not for a field that type spells
differently (Swin's per-stage ``num_heads`` list, Mamba-2's ``Infinity`` time-step limit).
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.limits import excerpt
from constraints.model_spec import SUPPORTED_TYPES


def read_model_type(cfg: dict[str, Any], where: str, family: str | None) -> tuple[str, str]:
    """(the family read, a caveat), or one clear refusal. A config read with ``--family`` is
    that family everywhere after (its layers, saved tensors, kernels: the spec's ``family``);
    its own model_type is named in the caveat."""
    outer_type = str(cfg.get("model_type") or "").strip().lower()
    nests_text = isinstance(cfg.get("text_config"), dict) or "hidden_size" not in cfg
    if "text_config" in cfg and nests_text and outer_type not in SUPPORTED_TYPES:
        raise _multimodal(cfg, where)
    raw_type = cfg.get("model_type")
    if raw_type is not None and not isinstance(raw_type, str):
        raise FitplanError(f"{where}: model_type must be a name, got {excerpt(raw_type)}")
    model_type = (raw_type or "").strip().lower()
    caveats = ""
    supported = "`fitplan models --types` lists the model_types fitplan reads"
    if family is not None:
        chosen = family.strip().lower()
        if chosen not in SUPPORTED_TYPES:
            raise FitplanError(f"--family {excerpt(family)} is not a supported family", supported)
        if model_type in SUPPORTED_TYPES and model_type != chosen:
            raise FitplanError(
                f"--family {chosen} contradicts the config's model_type '{model_type}'",
                "leave out --family: the config names its family",
            )
        if model_type != chosen:
            caveats = (
                f"model_type {excerpt(model_type or None)} read as {chosen} (--family {chosen})."
            )
        model_type = chosen
    elif not model_type:
        raise FitplanError(
            f"{where}: config.json has no model_type",
            f"add --family NAME to read it as one ({supported}), or pass raw numbers (--params …)",
        )
    elif model_type not in SUPPORTED_TYPES:
        raise FitplanError(
            f"{where}: model_type {excerpt(model_type)} is not supported",
            f"add --family NAME to read it as one ({supported}), or pass raw numbers (--params …)",
        )
    return model_type, caveats


def _multimodal(cfg: dict[str, Any], where: str) -> FitplanError:
    """A config nesting a ``text_config`` (LLaVA, Gemma 3, Qwen2-VL, Whisper-style composites):
    its vision/audio tower is loaded and stepped with the text model, and fitplan counts neither
    its weights nor its activations, so the whole model is refused rather than undercounted."""
    outer = cfg.get("model_type")
    text = cfg.get("text_config")
    inner = text.get("model_type") if isinstance(text, dict) else None
    named = f"model_type {excerpt(outer)}" if isinstance(outer, str) else "this config"
    nested = f" of model_type {excerpt(inner)}" if isinstance(inner, str) and inner else ""
    if isinstance(inner, str) and inner.strip().lower() in SUPPORTED_TYPES:
        hint = (
            "fitplan reads its text_config: save that section as its own config.json to plan the "
            "language model alone (the other towers not counted), or pass raw numbers (--params …)"
        )
    else:
        hint = "its text model is not a family fitplan models either: pass raw numbers (--params …)"
    return FitplanError(
        f"{where}: {named} is multimodal (it nests a text_config{nested}): fitplan plans text "
        "models only",
        hint,
    )
