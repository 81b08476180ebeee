"""Build the real Hugging Face model of a fitplan model from its ``config.json`` fields.

Shared by ``fitplan trace`` (on the meta device: shapes without memory) and ``fitplan measure``
(random weights on a real device). Nothing is downloaded: the catalog stores each model's
``config.json`` fields, ``constraints/data/calibration/extra_models.json`` a few more, and a user
may pass a ``config.json`` path. torch and transformers are imported inside the functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.models import ModelSpec, catalog_entry, catalog_model, spec_from_hf_config

#: the config key that holds the layer count, per model_type (decoder layers first)
LAYER_KEYS = {
    "gpt2": ("n_layer",),
    "gpt_bigcode": ("n_layer",),
    "gptj": ("n_layer",),
    "codegen": ("n_layer",),
    "gpt_neo": ("num_layers",),
    "bloom": ("n_layer",),
    "mpt": ("n_layers",),
    "t5": ("num_layers", "num_decoder_layers"),
    "mt5": ("num_layers", "num_decoder_layers"),
}


def require_torch() -> None:
    """A clear error when the ``measure`` extra is not installed."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise FitplanError(
            "this command needs torch and transformers",
            'install the extra: pip install "fitplan[measure]" (torch CPU build: '
            "pip install torch --index-url https://download.pytorch.org/whl/cpu)",
        ) from None


def quiet_transformers() -> None:
    """transformers' advisory logging (deprecations, loss_type notes) off: fitplan prints results."""
    try:
        import transformers

        transformers.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass


def config_of(model: str) -> tuple[dict[str, Any], ModelSpec]:
    """The ``config.json`` dict and the ModelSpec of a catalog id, calibration extra or path."""
    from searcher.truth.cases import CALIBRATION_DIR

    text = model.strip()
    if not text:
        raise FitplanError("no model given", "name a catalog model (fitplan models) or a path")
    try:
        spec = catalog_model(text)
        return dict(catalog_entry(spec.id)["config"]), spec
    except FitplanError:
        pass
    extras = json.loads((CALIBRATION_DIR / "extra_models.json").read_text(encoding="utf-8"))
    for e in extras:
        names = [e["id"], e.get("hf_repo", ""), *e.get("aliases", [])]
        if text.lower() in (n.lower() for n in names if n):
            spec = spec_from_hf_config(e["config"], id=e["id"], name=e["name"])
            return dict(e["config"]), spec
    p = Path(text).expanduser()
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        from constraints.limits import NONFINITE_CONFIG_KEYS, read_text, strict_json
        from constraints.models import load_config_file

        spec = load_config_file(p)
        cfg = strict_json(read_text(p, "config.json"), str(p), NONFINITE_CONFIG_KEYS)
        return cfg, spec
    catalog_model(text)  # raises the 'unknown model … did you mean' error
    raise AssertionError  # pragma: no cover


#: configs whose depth is the length of their list of blocks (Nemotron-H: num_hidden_layers is
#: deprecated there and ignored)
BLOCK_LIST_KEYS = ("layers_block_type",)


def depth_of(cfg: dict[str, Any]) -> int:
    """The config's decoder depth: its layer count, or the length of its list of blocks."""
    for key in BLOCK_LIST_KEYS:
        if isinstance(cfg.get(key), list):
            return len(cfg[key])
    model_type = str(cfg.get("model_type", "")).lower()
    return int(cfg[LAYER_KEYS.get(model_type, ("num_hidden_layers",))[0]])


def with_layers(cfg: dict[str, Any], layers: int | None) -> dict[str, Any]:
    """The same config with ``layers`` blocks (per stack); MoE dense-first layers are kept."""
    if not layers:
        return dict(cfg)
    out = dict(cfg)
    for key in BLOCK_LIST_KEYS:
        if isinstance(cfg.get(key), list):
            out[key] = cfg[key][:layers]
            out["num_hidden_layers"] = len(out[key])
            return out
    model_type = str(cfg.get("model_type", "")).lower()
    keys = LAYER_KEYS.get(model_type, ("num_hidden_layers",))
    dense_first = int(cfg.get("first_k_dense_replace", 0) or 0)
    n = layers + dense_first
    for key in keys:
        if key in out or key == keys[0]:
            out[key] = min(int(out.get(key, n) or n), n)
    out.pop("num_nextn_predict_layers", None)
    depth = int(cfg.get(keys[0]) or 0)
    for key, value in cfg.items():  # one entry per layer (layer_types, no_rope_layers, ...)
        if isinstance(value, list) and depth and len(value) == depth:
            out[key] = value[: out[keys[0]]]
    if isinstance(out.get("moe_layers"), list):  # layer indices (Llama 4)
        out["moe_layers"] = [i for i in out["moe_layers"] if i < out[keys[0]]]
    return out


def hf_config(cfg: dict[str, Any], **overrides: Any) -> Any:
    """A transformers config object from a config.json dict (no download)."""
    import transformers

    cfg = dict(cfg)
    model_type = cfg.pop("model_type", None)
    if not model_type:
        raise FitplanError("config.json has no model_type: fitplan cannot build the HF model")
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    cfg.pop("dtype", None)
    cfg.pop("auto_map", None)
    cfg.pop("quantization_config", None)
    cfg.update(overrides)
    try:
        return transformers.AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as err:
        raise FitplanError(f"transformers cannot build a '{model_type}' config: {err}") from None


def build_model(config: Any, *, device: str, dtype: Any, attn_implementation: str) -> Any:
    """The training class of the config (causal LM, T5 conditional generation, BERT classifier)."""
    import torch
    import transformers

    kwargs = {"dtype": dtype, "attn_implementation": attn_implementation}
    with torch.device(device):
        if config.model_type in ("t5", "mt5"):
            cls = (
                transformers.MT5ForConditionalGeneration
                if config.model_type == "mt5"
                else transformers.T5ForConditionalGeneration
            )
            model = cls._from_config(config, **kwargs)
        elif config.model_type == "bert":
            model = transformers.BertForSequenceClassification._from_config(config, **kwargs)
        else:
            model = transformers.AutoModelForCausalLM.from_config(config, **kwargs)
    return model


def layer_stacks(model: Any) -> list[tuple[str, Any]]:
    """(stack name, nn.ModuleList of layers): 'encoder'/'decoder' for T5, else one stack."""
    from torch import nn

    stacks: list[tuple[str, Any]] = []
    names = ("layers", "h", "layer", "block", "blocks")
    for name, mod in model.named_modules():
        is_stack = isinstance(mod, nn.ModuleList) and name.split(".")[-1] in names
        nested = any(name.startswith(s + ".") for s, _ in stacks)
        if is_stack and len(mod) and not nested:
            stacks.append((name, mod))
    if not stacks:
        raise FitplanError("cannot find the layer stack of this model")
    return stacks


def dummy_inputs(model: Any, batch: int, seq_len: int, device: str) -> dict[str, Any]:
    import torch

    ids = torch.zeros(batch, seq_len, dtype=torch.long, device=device)
    if getattr(model.config, "model_type", "") in ("t5", "mt5"):
        return {"input_ids": ids, "decoder_input_ids": ids.clone()}
    return {"input_ids": ids}
