"""Run a strategy, keep the feasible Pareto front ranked by throughput cost, say why families failed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from constraints.breakdown import MemoryBreakdown
from constraints.config import METHODS, TrainConfig
from constraints.memory import PARTS, PHASES, TERMS
from searcher.search.evaluate import Evaluation
from searcher.search.sinks import FAMILY_NAMES, FrontSink, Rejection, RejectionSink, check_rank_by
from searcher.search.space import SearchProblem
from searcher.search.strategies import Progress, Strategy

__all__ = ["FAMILY_NAMES", "FrontMember", "Rejection", "SearchResult", "member_at", "run_search"]


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

    @property
    def gpus(self) -> int:
        return self.config.gpus

    def budget(self, tokens: float, usd_per_gpu_hour: float | None) -> tuple[float, float | None]:
        """(hours, dollars) to train on ``tokens`` tokens."""
        hours = tokens / self.tokens_per_s / 3600.0
        return hours, (hours * self.gpus * usd_per_gpu_hour if usd_per_gpu_hour else None)


@dataclass
class SearchResult:
    problem: SearchProblem
    strategy: str
    front: list[FrontMember]
    rejected: list[Rejection]
    evaluated: int
    feasible: int
    seconds: float
    evaluation: Evaluation | None = field(default=None, repr=False)
    rank_by: str = "cost"
    #: configurations skipped because they provably change no answer (counted in ``evaluated``)
    pruned: int = 0


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


def run_search(
    problem: SearchProblem,
    strategy: Strategy,
    progress: Progress | None = None,
    keep_evaluation: bool = False,
    rank_by: str = "cost",
) -> SearchResult:
    """The feasible Pareto front, ranked by throughput cost (``rank_by="speed"``: tokens/s first).

    A strategy that streams (``search``: the exhaustive one) hands its chunks to the sinks as it
    goes and prunes what they can do without; ``keep_evaluation`` asks for every configuration's
    evaluation instead (all at once, unpruned)."""
    check_rank_by(rank_by)
    start = time.perf_counter()
    front, rejections = FrontSink(problem), RejectionSink(problem)
    ev: Evaluation | None = None
    search = getattr(strategy, "search", None)
    if search is not None and not keep_evaluation:
        count = search(problem, [front, rejections], progress)
        evaluated, pruned = count.space, count.pruned
    else:
        ev = strategy.run(problem, progress)
        keys = np.arange(len(ev.batch))
        front.add(ev, keys)
        rejections.add(ev, keys)
        evaluated, pruned = len(ev.batch), 0
    return SearchResult(
        problem=problem,
        strategy=strategy.name,
        front=front.members(rank_by),
        rejected=rejections.rejections(),
        evaluated=evaluated,
        feasible=front.feasible,
        seconds=time.perf_counter() - start,
        evaluation=ev if keep_evaluation else None,
        rank_by=rank_by,
        pruned=pruned,
    )


def methods_of(result: SearchResult) -> list[str]:
    return [m for m in METHODS if any(f.config.method == m for f in result.front)]
