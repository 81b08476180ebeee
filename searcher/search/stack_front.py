"""A search that respects the installed stack: plans outside it are marked, never silently picked.

The front is the Pareto front of four objectives: the three of :mod:`searcher.search.evaluate`
(cost, peak memory, quality) and "needs a package outside the stack" (0 or 1). It is computed
exactly as the union of two searches, cut by that 4-objective front:

- the search over the space narrowed to the stack (``problem.stack``): its members are marked
  only where a pin asked for something outside the stack;
- the unrestricted search (``stack=None``): its members outside the stack survive only where no
  plan inside it is as good in cost, memory and quality.

An in-stack plan is never dominated by an out-of-stack one under the fourth objective; the
narrowed space holds every in-stack configuration (attention ``sdpa`` standing for ``flash``,
which the models cost alike: search/stack.py) and is all on one side of the stack (only pins
keep a value outside it, and a pin is shared by the whole space), so its 3-objective front is
its 4-objective front and the union, cut once more, is the whole 4-objective front
(tests/search/test_stack.py checks it by brute force).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from constraints.errors import FitplanError
from searcher.search.evaluate import memory_step_bytes, objective_columns, usable_bytes
from searcher.search.members import FrontMember
from searcher.search.pareto import pareto_front
from searcher.search.run import SearchResult, run_search
from searcher.search.space import SearchProblem
from searcher.search.stack import FRAMEWORK_PACKAGES, missing_for
from searcher.search.strategies import Progress, Strategy


def run_stack_search(
    problem: SearchProblem,
    strategy: Strategy,
    progress: Progress | None = None,
    rank_by: str = "cost",
) -> SearchResult:
    """The 4-objective front (module docstring), with what each member needs beyond the stack
    (``SearchResult.stack_missing``)."""
    stack, framework = problem.stack, problem.framework
    full = run_search(dataclasses.replace(problem, stack=None), strategy, progress, rank_by=rank_by)
    if stack is None:
        return full
    outside = [m for m in full.front if missing_for(m.config, stack, framework)]
    if not outside:  # the unrestricted front already runs with the stack
        return dataclasses.replace(full, problem=problem)
    if not set(FRAMEWORK_PACKAGES[framework]) <= stack:  # every plan needs what the stack lacks
        marks = tuple(missing_for(m.config, stack, framework) for m in full.front)
        return dataclasses.replace(full, problem=problem, stack_missing=marks)
    narrowed_seconds = 0.0
    try:
        narrowed = run_search(problem, strategy, progress, rank_by=rank_by)
        local, narrowed_seconds = narrowed.front, narrowed.seconds
    except FitplanError:  # nothing of the narrowed space is left: only marked plans
        local = []
    pool = local + outside
    flags = np.array([1.0 if missing_for(m.config, stack, framework) else 0.0 for m in pool])
    objectives = np.column_stack([_objectives(problem, pool), flags])
    keep = pareto_front(objectives)
    speed = np.array([m.tokens_per_s for m in pool])
    needed = np.array([m.needed for m in pool], dtype=float)
    cost = objectives[keep, 0]
    if rank_by == "speed":
        order = np.lexsort((needed[keep], cost, -speed[keep]))
    else:
        order = np.lexsort((needed[keep], -speed[keep], cost))
    members = [pool[int(i)] for i in keep[order]]
    missing = tuple(missing_for(m.config, stack, framework) for m in members)
    return dataclasses.replace(
        full,
        problem=problem,
        front=members,
        stack_missing=missing,
        seconds=full.seconds + narrowed_seconds,  # both searches
    )


def _objectives(problem: SearchProblem, members: list[FrontMember]) -> np.ndarray:
    """The (n, 3) objectives of :func:`objective_columns`, from front members."""
    throughput = {
        "usd_per_mtok": np.array(
            [np.nan if m.usd_per_mtok is None else m.usd_per_mtok for m in members], dtype=float
        ),
        # a member without a speed (a card known only by its memory) holds 0: nan, as evaluated
        "tokens_per_s": np.array([m.tokens_per_s or np.nan for m in members], dtype=float),
    }
    needed = np.array([m.needed for m in members], dtype=float)
    fidelity = np.array([m.fidelity for m in members], dtype=float)
    step = memory_step_bytes(usable_bytes(problem))
    return objective_columns(throughput, needed, fidelity, step)
