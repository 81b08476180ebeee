"""Training backends: which combinations each framework runs, and the buffers each allocates.

The capability table is data (``constraints/data/backends.json``, each entry naming the framework
source it follows). :func:`constraints.backend_rules.runnable_mask` turns it into a vectorised rule over a
:class:`~constraints.config_batch.ConfigBatch`; :func:`constraints.backend_memory.apply_backend` replaces the generic gradient,
bucket and optimizer terms of :mod:`constraints.model_states` with what each backend allocates.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from constraints.errors import FitplanError

BACKEND_NAMES: tuple[str, ...] = ("single", "ddp", "deepspeed", "fsdp2", "fsdp1", "megatron")
BACKEND_CODE: dict[str, int] = {b: i for i, b in enumerate(BACKEND_NAMES)}
_TABLE_PATH = Path(__file__).parent / "data" / "backends.json"

Arrays = dict[str, np.ndarray]


@cache
def table() -> dict[str, dict[str, Any]]:
    """The capability table, one entry per backend (``_about`` dropped)."""
    raw = json.loads(_TABLE_PATH.read_text())
    out = {k: v for k, v in raw.items() if not k.startswith("_")}
    if tuple(out) != BACKEND_NAMES:
        raise FitplanError(f"{_TABLE_PATH}: backends must be {BACKEND_NAMES}, got {tuple(out)}")
    return out


def backend(name: str) -> dict[str, Any]:
    try:
        return table()[name]
    except KeyError:
        raise FitplanError(
            f"unknown backend {name!r}", f"choose one of {', '.join(BACKEND_NAMES)}"
        ) from None


def searched_by_default(emit_format: str | None = None) -> tuple[str, ...]:
    """Backends some launch format writes (the others are searched only when pinned); with
    ``emit_format``, those that format writes (``emitted_by`` in data/backends.json)."""
    return tuple(
        b
        for b in BACKEND_NAMES
        if table()[b]["emitted_by"]
        and (emit_format is None or emit_format in table()[b]["emitted_by"])
    )


def infer_backend(
    *, gpus: int, zero: int, offload: str, tp: int, pp: int, recipe: str, method: str
) -> str:
    """The backend a configuration written without one runs under (what fitplan assumed before
    the backend knob: DeepSpeed for ZeRO-1, optimizer-only offload and the fp32-master recipes,
    FSDP2 for ZeRO-2/3, Megatron for pipeline parallel)."""
    if pp > 1 or (tp > 1 and (recipe == "bf16-master" or method != "full")):
        return "megatron"
    if tp > 1:
        return "fsdp2"
    if recipe in ("bf16-master", "bf16-pure") or zero == 1 or offload == "optimizer":
        return "deepspeed"
    if zero in (2, 3):
        return "fsdp2"
    return "single" if gpus == 1 else "ddp"


def why_not(
    name: str,
    *,
    gpus: int,
    zero: int,
    offload: str,
    tp: int,
    pp: int,
    recipe: str,
    method: str,
    optimizer: str,
    optimizer_in_backward: bool,
    loss: str = "standard",
) -> str | None:
    """Why ``name`` does not run this combination (None when it does)."""
    b = backend(name)

    def allowed(key: str, value: Any) -> bool:
        v = b[key]
        return v == "all" or value in v

    if b["gpus"] == "one" and gpus != 1:
        return f"{name} runs on one GPU"
    if b["gpus"] == "many" and gpus == 1:
        return f"{name} needs more than one GPU"
    if zero not in b["zero"]:
        return f"{name} has no ZeRO stage {zero} (stages {b['zero']})"
    if offload not in b["offload"]:
        return f"{name} has no offload {offload}"
    if tp > 1 and not b["tp"]:
        return f"{name} has no tensor parallelism"
    if tp > 1 and method not in b.get("tp_methods", [method]):
        return f"{name} runs tensor parallelism only for {', '.join(b['tp_methods'])} fine-tuning"
    if pp > 1 and not b["pp"]:
        return f"{name} has no pipeline parallelism"
    if not allowed("methods", method):
        return f"{name} has no {method} fine-tuning"
    if not allowed("recipes", recipe):
        return f"{name} has no recipe {recipe}"
    if recipe in b.get("recipes_need_zero", {}) and zero not in b["recipes_need_zero"][recipe]:
        return f"{name} runs recipe {recipe} only at ZeRO {b['recipes_need_zero'][recipe]}"
    if not allowed("optimizers", optimizer):
        return f"{name} does not run the {optimizer} optimizer"
    if loss not in b.get("losses", [loss]):
        return f"{name} has no {loss} cross-entropy (losses {b['losses']})"
    if optimizer_in_backward and not b["optimizer_in_backward"]:
        return f"{name} has no optimizer step fused into backward"
    return None
