"""Run a strategy, keep the feasible Pareto front ranked by throughput cost, say why families failed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from constraints.config import METHODS
from searcher.search.evaluate import Evaluation
from searcher.search.members import FrontMember, member_at
from searcher.search.sinks import FAMILY_NAMES, FrontSink, Rejection, RejectionSink, check_rank_by
from searcher.search.space import SearchProblem
from searcher.search.strategies import Progress, Strategy

__all__ = ["FAMILY_NAMES", "FrontMember", "Rejection", "SearchResult", "member_at", "run_search"]


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
    #: per front member: the packages it needs beyond ``problem.stack`` (search/stack_front.py;
    #: empty: every member runs with the stack)
    stack_missing: tuple[tuple[str, ...], ...] = ()

    def default_pick(self) -> int:
        """1-based: the first member that runs with the stack (1 when none does)."""
        for i, missing in enumerate(self.stack_missing, start=1):
            if not missing:
                return i
        return 1


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
