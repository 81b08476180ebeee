"""Throughput regimes: rows grouped by what dominates their step, each scored on its own so that
groups that err in opposite directions cannot hide behind one overall median (issue 12)."""

from __future__ import annotations

from collections.abc import Sequence

from constraints.frozen import frozen
from searcher.truth.cases import ThroughputCase
from searcher.truth.predict import ThroughputResult

#: regimes in the order a row is assigned (the first that applies)
REGIMES = ("Megatron-style TP/PP", "fp8", "single-GPU", "FSDP / data parallel")


def regime_of(case: ThroughputCase) -> str:
    cfg = case.config
    assert cfg is not None
    if cfg.tp > 1 or cfg.pp > 1:
        return "Megatron-style TP/PP"
    if cfg.compute_dtype == "fp8":
        return "fp8"
    if cfg.gpus == 1:
        return "single-GPU"
    return "FSDP / data parallel"


@frozen
class RegimeScore:
    regime: str
    rows: int
    median_abs_error: float
    #: median signed error, (predicted − measured)/measured: > 0 predicts too fast
    bias: float


def regime_scores(results: Sequence[ThroughputResult]) -> list[RegimeScore]:
    import numpy as np

    by: dict[str, list[float]] = {}
    for r in results:
        by.setdefault(regime_of(r.case), []).append(r.error)
    return [
        RegimeScore(
            name,
            len(by[name]),
            float(np.median(np.abs(by[name]))),
            float(np.median(by[name])),
        )
        for name in REGIMES
        if name in by
    ]
