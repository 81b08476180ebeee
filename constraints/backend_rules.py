"""The capability table as a vectorised rule: which rows of a batch their backend runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from constraints.backends import BACKEND_CODE, BACKEND_NAMES, table
from constraints.config import LOSSES, METHODS, OFFLOADS, OPTIMIZER_NAMES, RECIPE_NAMES
from constraints.config_batch import ConfigBatch

#: the layout-independent columns :func:`runnable_mask` reads (the rest it reads are layout
#: columns: backend, tp, pp, dp, zero, offload). A search evaluates the rule once per distinct
#: combination of these and shares the answer across the static variants that agree on them
#: (tests/search/test_fronts_unchanged.py checks it reads no other static column).
RUNNABLE_STATIC_COLUMNS = ("method", "recipe", "optimizer", "loss", "opt_in_bwd")


def _codes(names: tuple[str, ...], allowed: Any) -> np.ndarray:
    return np.array([allowed == "all" or n in allowed for n in names], dtype=bool)


def _in(column: np.ndarray, allowed: Any) -> np.ndarray:
    """``np.isin(column, allowed)`` for a column of small integer codes (ZeRO stages), by a
    lookup table: isin sorts both arrays on every call, a third of this rule's time."""
    if column.size == 0 or int(column.min()) < 0:
        return np.isin(column, allowed)
    table = np.zeros(int(column.max()) + 1, dtype=bool)
    for v in allowed:
        if 0 <= int(v) < table.size:
            table[int(v)] = True
    return table[column]


def runnable_mask(batch: ConfigBatch) -> np.ndarray:
    """True where the row's backend runs the row's combination (vectorised :func:`why_not`)."""
    ok = np.zeros(len(batch), dtype=bool)
    gpus = batch.gpus
    for name in BACKEND_NAMES:
        sel = batch.backend == BACKEND_CODE[name]
        if not sel.any():
            continue
        b = table()[name]
        good = np.ones(len(batch), dtype=bool)
        if b["gpus"] == "one":
            good &= gpus == 1
        if b["gpus"] == "many":
            good &= gpus > 1
        good &= _in(batch.zero, b["zero"])
        good &= _codes(OFFLOADS, b["offload"])[batch.offload]
        if not b["tp"]:
            good &= batch.tp == 1
        elif "tp_methods" in b:
            good &= (batch.tp == 1) | _codes(METHODS, b["tp_methods"])[batch.method]
        if not b["pp"]:
            good &= batch.pp == 1
        good &= _codes(METHODS, b["methods"])[batch.method]
        good &= _codes(RECIPE_NAMES, b["recipes"])[batch.recipe]
        for rec, stages in b.get("recipes_need_zero", {}).items():
            good &= (batch.recipe != RECIPE_NAMES.index(rec)) | _in(batch.zero, stages)
        good &= _codes(OPTIMIZER_NAMES, b["optimizers"])[batch.optimizer]
        if "losses" in b:
            good &= _codes(LOSSES, b["losses"])[batch.loss]
        if not b["optimizer_in_backward"]:
            good &= ~batch.opt_in_bwd
        ok |= sel & good
    return ok
