"""Assign jobs to pools: as many jobs as possible, then the least total cost. Exact.

The problem, over binary x[o] for every option o (a job, a pool, a GPU count, a cost):

    maximise   Σ x[o]                              (jobs placed)
    then minimise Σ cost[o] · x[o]                 with the number placed held at its maximum
    subject to Σ_{o of job j} x[o] ≤ 1             every job at most once
               Σ_{o on pool p} gpus[o] · x[o] ≤ N_p   the pool's GPUs (the placed jobs run at once)

Deadlines and budgets are per option and were applied before (``options.within_limits``).
The two objectives are solved lexicographically, each as a mixed-integer linear programme
with HiGHS (``scipy.optimize.milp``) at a relative gap of zero, so the answer is optimal, not
near-optimal. When a first-fit placement already seats every job that has an option, that count
is the maximum (no plan places a job without options), so the first programme is skipped and
the second asks for each such job exactly once (``Σ_{o of job j} x[o] = 1``: the same feasible
set as ``≤ 1`` with ``Σ x = most``, in a form HiGHS's presolve and cuts take faster — 1.5 s →
0.65 s on the 20 pools × 100 jobs of benchmarks/bench_scale.py). Ties in cost (a job's option
on two pools of the same GPU and price) are broken by HiGHS, deterministically for a given
input; the objective values are the optimum either way. ``exhaustive`` enumerates every assignment with branch and bound: the reference
the tests hold the MILP to on random fleets, and a solver for small fleets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from constraints.errors import FitplanError
from constraints.frozen import frozen

#: cost comparisons (dollars) within this are ties
COST_EPS = 1e-6
#: the exhaustive solver gives up after visiting this many partial assignments (use the MILP)
EXHAUSTIVE_NODE_LIMIT = 2_000_000


@frozen
class Item:
    """An option as the solver sees it."""

    job: int
    pool: int
    gpus: int
    cost: float


@frozen
class Assignment:
    chosen: tuple[int | None, ...]  # per job: the index into items, or None (unplaced)
    placed: int
    cost: float
    solver: str


def _check(items: Sequence[Item], n_jobs: int, capacity: Sequence[int]) -> None:
    for it in items:
        if not (0 <= it.job < n_jobs and 0 <= it.pool < len(capacity)):
            raise ValueError(f"option {it} refers to no job or pool")
        if it.gpus < 1 or not math.isfinite(it.cost) or it.cost < 0:
            raise ValueError(f"option {it} has no valid GPU count or cost")


def _total(items: Sequence[Item], chosen: Sequence[int | None]) -> tuple[int, float]:
    picked = [items[c] for c in chosen if c is not None]
    return len(picked), sum(it.cost for it in picked)


def all_placeable(items: Sequence[Item], n_jobs: int, capacity: Sequence[int]) -> bool:
    """Whether a first-fit placement seats every job that has an option: jobs by their
    smallest option, largest first; each at its fewest-GPU option that still fits (the pool
    with the most GPUs left among equals). True proves the most jobs placed is that count;
    False proves nothing (the MILP decides)."""
    per_job: list[list[Item]] = [[] for _ in range(n_jobs)]
    for it in items:
        per_job[it.job].append(it)
    free = list(capacity)
    jobs = [j for j in range(n_jobs) if per_job[j]]
    for j in sorted(jobs, key=lambda j: (-min(it.gpus for it in per_job[j]), j)):
        fits = [it for it in per_job[j] if free[it.pool] >= it.gpus]
        if not fits:
            return False
        pick = min(fits, key=lambda it: (it.gpus, -free[it.pool], it.pool))
        free[pick.pool] -= pick.gpus
    return True


def solve_milp(items: Sequence[Item], n_jobs: int, capacity: Sequence[int]) -> Assignment:
    """Exact lexicographic optimum with HiGHS: most jobs placed, then least cost."""
    _check(items, n_jobs, capacity)
    if not items:
        return Assignment(tuple([None] * n_jobs), 0, 0.0, "milp")
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    n = len(items)
    columns = np.arange(n)
    job_of = np.array([it.job for it in items])
    pool_of = np.array([it.pool for it in items])
    gpus = np.array([float(it.gpus) for it in items])
    a_job = csr_array((np.ones(n), (job_of, columns)), shape=(n_jobs, n))
    a_pool = csr_array((gpus, (pool_of, columns)), shape=(len(capacity), n))
    cost = np.array([it.cost for it in items])
    pool_rows = LinearConstraint(a_pool, 0, np.asarray(capacity, dtype=float))
    options = {"mip_rel_gap": 0.0, "disp": False}
    integrality = np.ones(n)
    bounds = Bounds(0, 1)
    scale = max(1.0, float(cost.max()))  # dollars scaled to O(1) for the solver's tolerances

    if all_placeable(items, n_jobs, capacity):
        # every job with an option placed: exactly once each, the least cost
        has_option = np.zeros(n_jobs, dtype=bool)
        has_option[job_of] = True
        once = np.where(has_option, 1.0, 0.0)
        constraints = [LinearConstraint(a_job, once, once), pool_rows]
    else:
        # 1. as many jobs as possible
        job_rows = LinearConstraint(a_job, 0, 1)
        first = milp(
            -np.ones(n),
            constraints=[job_rows, pool_rows],
            integrality=integrality,
            bounds=bounds,
            options=options,
        )
        if first.status != 0 or first.x is None:
            raise FitplanError(f"the placement solver failed: {first.message}")
        most = round(-first.fun)
        # 2. the least cost among placements of that many jobs
        constraints = [job_rows, pool_rows, LinearConstraint(np.ones((1, n)), most, most)]
    second = milp(
        cost / scale,
        constraints=constraints,
        integrality=integrality,
        bounds=bounds,
        options=options,
    )
    if second.status != 0 or second.x is None:
        raise FitplanError(f"the placement solver failed: {second.message}")
    chosen: list[int | None] = [None] * n_jobs
    for k in np.flatnonzero(second.x > 0.5).tolist():
        chosen[items[k].job] = k
    placed, total = _total(items, chosen)
    _verify(items, chosen, capacity)
    return Assignment(tuple(chosen), placed, total, "milp")


def _verify(items: Sequence[Item], chosen: Sequence[int | None], capacity: Sequence[int]) -> None:
    used = [0] * len(capacity)
    for c in chosen:
        if c is not None:
            used[items[c].pool] += items[c].gpus
    if any(u > cap for u, cap in zip(used, capacity, strict=True)):
        raise FitplanError("the placement solver returned a plan over a pool's capacity")


def solve_exhaustive(items: Sequence[Item], n_jobs: int, capacity: Sequence[int]) -> Assignment:
    """Every assignment (each job: one of its options or none), with branch and bound: a branch
    is cut only when even its best completion (every remaining job placed at its cheapest
    option, capacity ignored) cannot beat the best plan found."""
    _check(items, n_jobs, capacity)
    per_job: list[list[int]] = [[] for _ in range(n_jobs)]
    for k, it in enumerate(items):
        per_job[it.job].append(k)
    # jobs with fewer options first; cheapest option first inside a job (good bounds early)
    order = sorted(range(n_jobs), key=lambda j: len(per_job[j]))
    for j in order:
        per_job[j].sort(key=lambda k: items[k].cost)
    min_cost = [min((items[k].cost for k in per_job[j]), default=0.0) for j in range(n_jobs)]
    # best possible from position i on: every remaining job with an option, each at its cheapest
    can_place = [0] * (n_jobs + 1)
    cheapest = [0.0] * (n_jobs + 1)
    for i in range(n_jobs - 1, -1, -1):
        j = order[i]
        can_place[i] = can_place[i + 1] + (1 if per_job[j] else 0)
        cheapest[i] = cheapest[i + 1] + min_cost[j]
    free = list(capacity)
    chosen: list[int | None] = [None] * n_jobs
    best: dict[str, object] = {"placed": -1, "cost": math.inf, "chosen": list(chosen)}
    visited = [0]

    def better(placed: int, cost: float) -> bool:
        bp, bc = best["placed"], best["cost"]
        assert isinstance(bp, int) and isinstance(bc, float)
        return placed > bp or (placed == bp and cost < bc - COST_EPS)

    def visit(i: int, placed: int, cost: float) -> None:
        visited[0] += 1
        if visited[0] > EXHAUSTIVE_NODE_LIMIT:
            size = math.prod(len(o) + 1 for o in per_job)
            raise FitplanError(
                f"the exhaustive solver gave up after {EXHAUSTIVE_NODE_LIMIT:,} of up to "
                f"{size:,} partial assignments",
                "use --solver milp",
            )
        if i == n_jobs:
            if better(placed, cost):
                best.update(placed=placed, cost=cost, chosen=list(chosen))
            return
        bp, bc = best["placed"], best["cost"]
        assert isinstance(bp, int) and isinstance(bc, float)
        if placed + can_place[i] < bp:
            return
        if placed + can_place[i] == bp and cost + cheapest[i] >= bc - COST_EPS:
            # even placing every remaining job at its cheapest would not beat the best
            # (placing fewer cannot either)
            return
        j = order[i]
        for k in per_job[j]:
            it = items[k]
            if free[it.pool] >= it.gpus:
                free[it.pool] -= it.gpus
                chosen[j] = k
                visit(i + 1, placed + 1, cost + it.cost)
                chosen[j] = None
                free[it.pool] += it.gpus
        visit(i + 1, placed, cost)

    visit(0, 0, 0.0)
    final = best["chosen"]
    assert isinstance(final, list)
    placed, total = _total(items, final)
    return Assignment(tuple(final), placed, total, "exhaustive")


SOLVERS = {"milp": solve_milp, "exhaustive": solve_exhaustive}


def solve(
    items: Sequence[Item], n_jobs: int, capacity: Sequence[int], solver: str = "milp"
) -> Assignment:
    if solver not in SOLVERS:
        raise FitplanError(f"unknown solver '{solver}'", f"use one of {', '.join(SOLVERS)}")
    return SOLVERS[solver](items, n_jobs, capacity)
