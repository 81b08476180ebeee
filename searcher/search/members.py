"""A configuration of an evaluation as a person reads it: knobs, memory breakdown, speed, cost."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constraints.breakdown import MemoryBreakdown
from constraints.config import TrainConfig
from constraints.memory import PARTS, PHASES, TERMS
from searcher.search.evaluate import Evaluation


@dataclass
class FrontMember:
    config: TrainConfig
    memory: MemoryBreakdown
    needed: int
    tokens_per_s: float
    step_time_s: float
    usd_per_mtok: float | None
    mfu: float
    fidelity: float
    #: configurations with this member's objective vector, slower or equal (search/alternatives.py)
    alternatives: tuple[TrainConfig, ...] = ()

    @property
    def gpus(self) -> int:
        return self.config.gpus

    def budget(self, tokens: float, usd_per_gpu_hour: float | None) -> tuple[float, float | None]:
        """(hours, dollars) to train on ``tokens`` tokens."""
        hours = tokens / self.tokens_per_s / 3600.0
        return hours, (hours * self.gpus * usd_per_gpu_hour if usd_per_gpu_hour else None)


def _breakdown(ev: Evaluation, i: int) -> MemoryBreakdown:
    parts = {p: round(float(ev.memory[p][i])) for p in PARTS}
    terms = {t: sum(parts[p] for p in TERMS[t]) for t in TERMS}
    return MemoryBreakdown(
        **terms,
        total=sum(terms.values()),
        parts=parts,
        phase=PHASES[int(ev.memory["phase"][i])],
        static=round(float(ev.memory["static"][i])),
        static_weights=round(float(ev.memory["static_weights"][i])),
        static_gradients=round(float(ev.memory["static_gradients"][i])),
        static_optimizer=round(float(ev.memory["static_optimizer"][i])),
        paged_optimizer=round(float(ev.memory["paged_optimizer"][i])),
        cpu_bytes=round(float(ev.memory["cpu_bytes"][i])),
    )


def member_at(ev: Evaluation, i: int) -> FrontMember:
    """Configuration ``i`` of an evaluation as a FrontMember (tokens/s 0 where not computed)."""
    price = ev.throughput["usd_per_mtok"][i]
    return FrontMember(
        config=ev.batch.config(i),
        memory=_breakdown(ev, i),
        needed=round(float(ev.needed[i])),
        tokens_per_s=float(np.nan_to_num(ev.throughput["tokens_per_s"][i], nan=0.0)),
        step_time_s=float(ev.throughput["step_time_s"][i]),
        usd_per_mtok=None if np.isnan(price) else float(price),
        mfu=float(ev.throughput["mfu"][i]),
        fidelity=float(ev.fidelity[i]),
    )
