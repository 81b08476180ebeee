"""Multimodal wrappers (Gemma 3, Mistral 3, LLaVA, ...): the text model planned from the config's
``text_config``, the other towers counted from the model transformers builds on the meta device.

A text-only fine-tune loads the whole checkpoint: the vision (or audio) tower and its projector
are resident weights, frozen here, and PEFT's ``all-linear`` puts adapters on their Linears
(tuners_utils.py ``_maybe_include_all_linear_layers`` takes every nn.Linear but the output head).
Their activations are not costed: a text-only step does not run them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.model_spec import ModelSpec

#: fitplan's count of the text model against the module transformers builds (the same bar as
#: searcher.hub's structure reading)
TEXT_TOLERANCE = 0.005


def models_buildable() -> bool:
    """Whether torch and transformers are importable here (found, not imported)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def config_at(text: str) -> tuple[Path, dict[str, Any]] | None:
    """A local config.json (a file or its folder) and its fields; None where none is readable."""
    path = Path(text).expanduser()
    path = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except Exception:
        return None
    return (path, cfg) if isinstance(cfg, dict) else None


def read_wrapper(text: str) -> ModelSpec | None:
    """The text model of a local config.json that nests a ``text_config``, with its other towers
    counted; None without torch and transformers, or when transformers cannot build it."""
    found = config_at(text) if models_buildable() else None
    if found is None:
        return None
    from constraints.hf_config import config_id
    from constraints.params import total_params
    from constraints.towers import spec_from_wrapper

    path, cfg = found
    try:
        outer = str(cfg["model_type"])
        inner = dict(cfg["text_config"])
    except Exception:
        return None
    try:
        towers = count_towers(outer, cfg)
    except ImportError as err:  # a tower needs a package this machine lacks (Gemma 3n: timm)
        raise _missing_package(path, outer, err) from None
    except Exception:  # a config transformers cannot build either: the refusal stands
        return None
    towers["text_type"] = inner.get("model_type") or _text_type(outer)
    try:
        spec = spec_from_wrapper(cfg, towers, id=config_id(path), name=str(path))
    except FitplanError:  # a text model of a type fitplan does not read: the refusal stands
        return None
    if abs(total_params(spec) / towers["text_params"] - 1) > TEXT_TOLERANCE:
        return None
    return spec


def _missing_package(path: Path, outer: str, err: ImportError) -> FitplanError:
    """The refusal where transformers needs another package to build a wrapper's towers,
    naming it (transformers' message says ``pip install NAME``)."""
    import re

    found = re.search(r"pip install ([\w.\-\[\]]+)", str(err))
    need = found.group(1) if found else "the package transformers names"
    return FitplanError(
        f"{path}: transformers builds the other towers of {outer} only with {need} installed",
        f"pip install {need} (fitplan then plans its text model and counts the towers), or save "
        "its text_config as its own config.json (the towers not counted)",
    )


def _text_type(outer: str) -> str:
    """The text model's type where a wrapper's text_config leaves it out."""
    from transformers import AutoConfig

    return str(AutoConfig.for_model(outer).get_text_config().model_type)


def count_towers(model_type: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The wrapper built on the meta device: the text model's parameters (its decoder and output
    head), and the rest's: all of them, those in nn.Linear weights, Σ (d_in + d_out) of those
    Linears, and the modules they are."""
    import torch

    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    config, model = build_on_meta(model_type, fields, _build)
    text_model = text_module(model, config)
    head = model.get_output_embeddings()
    embed = model.get_input_embeddings()
    tied = head is not None and embed is not None and head.weight is embed.weight
    text_ids = {id(p) for p in text_model.parameters()}
    if head is not None:
        text_ids |= {id(p) for p in head.parameters()}
    params = {id(p): p for p in model.parameters()}
    text_params = sum(p.numel() for k, p in params.items() if k in text_ids)
    tower_params = sum(p.numel() for k, p in params.items() if k not in text_ids)
    linear_params = lora_width = 0
    kinds: list[str] = []
    for name, module in model.named_children():
        if module is text_model or module is head:
            continue
        inner_text = any(m is text_model for m in module.modules())
        for sub_name, sub in module.named_children() if inner_text else [(name, module)]:
            if sub is text_model or not any(True for _ in sub.parameters()):
                continue
            kinds.append(f"{sub_name} ({type(sub).__name__})")
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and id(module.weight) not in text_ids:
            linear_params += module.weight.numel()
            lora_width += module.in_features + module.out_features
    return {
        "text_params": text_params,
        "tied": tied,
        "params": tower_params,
        "linear_params": linear_params,
        "lora_width": lora_width,
        "note": ", ".join(kinds) or "its other towers",
    }


def build_on_meta(model_type: str, fields: dict[str, Any], build: Any) -> tuple[Any, Any]:
    """(config, model): transformers' config of ``model_type`` from ``fields`` and the model
    ``build(config)`` makes of it on the meta device (no weights), transformers' notices
    silenced (they are not fitplan's output)."""
    import warnings

    import torch
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = AutoConfig.for_model(model_type, **fields)
            with torch.device("meta"):
                return config, build(config)
    finally:
        hf_logging.set_verbosity(verbosity)


def text_module(model: Any, config: Any) -> Any:
    """The wrapper's text model: the first module built from its text config (its decoder)."""
    text_config = config.get_text_config()
    for m in model.modules():
        if m is not model and getattr(m, "config", None) is text_config:
            return m
    raise FitplanError(
        f"{config.model_type}: no module of the text config in {type(model).__name__}"
    )


def _build(config: Any) -> Any:
    """The class transformers builds the wrapper with: image-text-to-text, multimodal LM (the
    audio wrappers: Qwen2-Audio, Voxtral, Granite Speech), causal LM, sequence-to-sequence LM
    (Audio Flamingo 3), else the base model (whose output head, if any, stays out)."""
    import transformers

    for auto in (
        "AutoModelForImageTextToText",
        "AutoModelForMultimodalLM",
        "AutoModelForCausalLM",
        "AutoModelForSeq2SeqLM",
        "AutoModel",
    ):
        cls = getattr(transformers, auto, None)
        if cls is None:
            continue
        try:
            return cls.from_config(config)
        except ValueError:  # not in that auto class's mapping
            continue
    raise FitplanError(f"transformers builds no model class for {config.model_type}")
