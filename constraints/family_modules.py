"""Families whose layer is described by a module of their own: its config reader, its parameter
inventory and the tensors its layer saves, each a function of that module.

A module here holds ``read(cfg, common, where, model_type) -> ModelSpec``,
``inventory(spec) -> ParamInventory`` and ``layer(spec) -> list[Saved]`` — or, where its layers are
of more than one kind, ``block_layer(spec, block)`` for each inventory block instead (and, where
its norm keeps other tensors than the shared kinds, ``norm_saved(spec, name, width)``); the parsers, the
inventory and the saved-tensor lists look the family up here instead of branching on it. Adding a
family with a layer of its own is one module and one line below.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: model_type -> the module that describes its layer
FAMILY_MODULES = {
    "gpt_neox": "constraints.gpt_neox",
    "phi": "constraints.phi",
    "cohere": "constraints.cohere",
    "cohere2": "constraints.cohere",
    "gpt_bigcode": "constraints.gpt_bigcode",
    "gptj": "constraints.gptj",
    "codegen": "constraints.gptj",
    "gpt_neo": "constraints.gpt_neo",
    "bloom": "constraints.bloom",
    "mpt": "constraints.mpt",
    "persimmon": "constraints.persimmon",
    "lfm2": "constraints.lfm2",
    "lfm2_moe": "constraints.lfm2",
    "bamba": "constraints.bamba",
    "nemotron_h": "constraints.nemotron_h",
    "gemma4_text": "constraints.gemma4",
    "falcon_h1": "constraints.falcon_h1",
    "lfm3": "constraints.lfm3",
    "gemma3n_text": "constraints.gemma3n",
    "nanochat": "constraints.nanochat",
    "mamba2": "constraints.mamba2_lm",
    "mamba": "constraints.mamba_lm",
    "falcon_mamba": "constraints.mamba_lm",
    "jamba": "constraints.jamba",
    "bitnet": "constraints.bitnet",
    "cohere2_moe": "constraints.cohere2_moe",
}


def family_module(family: str) -> ModuleType | None:
    """The module describing ``family``'s layer, or None for the families read elsewhere."""
    name = FAMILY_MODULES.get(family)
    return importlib.import_module(name) if name else None
