"""fitplan's physics: model specs and parameter counts, the GPU catalog, the memory model,
throughput and cost, hardware feasibility. Pure functions over numbers and numpy arrays.

The names below load lazily, so ``import constraints.errors`` stays cheap for the CLI.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ConfigBatch": "constraints.config",
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
