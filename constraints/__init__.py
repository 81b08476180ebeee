"""fitplan's physics: model specs and parameter counts, the GPU catalog, the memory model,
throughput and cost, hardware feasibility. Pure functions over numbers and numpy arrays.

One concept per module:

- the model: ``model_spec`` (ModelSpec), ``hf_config`` (config.json -> ModelSpec), ``models``
  (catalog, raw numbers, resolve);
- its parameters: ``param_groups`` (ParamGroup, ParamInventory, group_key), ``param_families``
  (each family's tensors, ``inventory``), ``lora_targets`` (what a target list matches);
  ``params`` re-exports the three;
- the run: ``config`` (TrainConfig, ConfigBatch), ``precision`` (recipes, optimizers, quants),
  ``gpus``, ``hardware`` (what a card cannot run);
- memory: ``model_states`` (weights, gradients, optimizer states, master copy, sharding),
  ``saved_tensors`` + ``saved_layers`` (what each family's layer saves for backward),
  ``activations`` (those lists reduced to coefficients and assembled per configuration),
  ``logits`` (logits and loss), ``memory`` (the four moments of a step and their peak),
  ``breakdown`` (one configuration's breakdown and verdict), ``inference``;
- serving: ``serving`` (weights, paged KV cache, vLLM's budget), ``serving_speed`` (prefill and
  decode), ``serving_plan`` (the question and its JSON); buy vs rent: ``ownership``;
- time: ``throughput``; constants: ``constants`` (memory), ``throughput_constants``.

Lever advice (what to change when it does not fit) is the searcher's:
:mod:`searcher.search.levers`.

The names below load lazily, so ``import constraints.errors`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ConfigBatch": "constraints.config_batch",
    "TrainConfig": "constraints.config",
    "Explanation": "constraints.breakdown",
    "MemoryBreakdown": "constraints.breakdown",
    "explain": "constraints.breakdown",
    "FitplanError": "constraints.errors",
    "GpuSpec": "constraints.gpus",
    "resolve_gpu": "constraints.gpus",
    "memory_arrays": "constraints.memory",
    "ModelSpec": "constraints.models",
    "raw_model": "constraints.models",
    "resolve_model": "constraints.models",
    "inventory": "constraints.params",
    "lora_params": "constraints.params",
    "total_params": "constraints.params",
    "inference_memory": "constraints.inference",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'constraints' has no attribute {name!r}")
