"""Plan a fleet: search every (job, pool) cell, place the jobs, say why the others stay out."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from constraints.frozen import frozen
from searcher.fleet.buy_rent import buy_rent_json, buy_vs_rent
from searcher.fleet.options import Cell, Option, brief, money, search_cells
from searcher.fleet.placement import Assignment, Item, solve
from searcher.fleet.schema import Fleet, Job


@frozen
class Placed:
    job: Job
    option: Option


@frozen
class Unplaced:
    job: Job
    reason: str
    per_pool: dict[str, str]


@dataclass
class FleetPlan:
    fleet: Fleet
    cells: dict[tuple[str, str], Cell]
    placed: list[Placed]
    unplaced: list[Unplaced]
    assignment: Assignment
    search_seconds: float
    solve_seconds: float

    @property
    def total_usd(self) -> float:
        return sum(p.option.usd for p in self.placed)

    @property
    def makespan_hours(self) -> float:
        return max((p.option.hours for p in self.placed), default=0.0)

    def used(self, pool: str) -> int:
        return sum(p.option.gpus for p in self.placed if p.option.pool == pool)

    def cell(self, job: str, pool: str) -> Cell:
        return self.cells[(job, pool)]

    def placement_of(self, job: str) -> Placed | None:
        return next((p for p in self.placed if p.job.name == job), None)


def plan_fleet(
    fleet: Fleet,
    *,
    solver: str = "milp",
    workers: int | None = None,
    progress=None,
    fronts: bool = False,
) -> FleetPlan:
    """Search every cell, place the jobs. ``fronts``: keep each cell's Pareto front too (what
    the HTML report plots; the plan itself needs only each GPU count's fastest)."""
    start = time.perf_counter()
    cells = search_cells(fleet.jobs, fleet.pools, workers=workers, progress=progress, fronts=fronts)
    searched = time.perf_counter()
    items, options = _items(fleet, cells)
    assignment = solve(items, len(fleet.jobs), [p.count for p in fleet.pools], solver)
    solved = time.perf_counter()
    placed: list[Placed] = []
    unplaced: list[Unplaced] = []
    for j, job in enumerate(fleet.jobs):
        k = assignment.chosen[j]
        if k is not None:
            o = options[k]
            placed.append(Placed(job, o))
    for j, job in enumerate(fleet.jobs):
        if assignment.chosen[j] is None:
            unplaced.append(_why_unplaced(fleet, job, cells, placed))
    return FleetPlan(
        fleet=fleet,
        cells=cells,
        placed=placed,
        unplaced=unplaced,
        assignment=assignment,
        search_seconds=searched - start,
        solve_seconds=solved - searched,
    )


def _items(fleet: Fleet, cells: dict[tuple[str, str], Cell]) -> tuple[list[Item], list[Option]]:
    """The solver's view of every option, and the options in the same order."""
    pool_index = {p.name: i for i, p in enumerate(fleet.pools)}
    items: list[Item] = []
    options: list[Option] = []
    for j, job in enumerate(fleet.jobs):
        for pool in fleet.pools:
            for o in cells[(job.name, pool.name)].options:
                items.append(Item(j, pool_index[pool.name], o.gpus, o.usd))
                options.append(o)
    return items, options


def items_of(plan: FleetPlan) -> list[Item]:
    return _items(plan.fleet, plan.cells)[0]


def _why_unplaced(
    fleet: Fleet, job: Job, cells: dict[tuple[str, str], Cell], placed: list[Placed]
) -> Unplaced:
    per_pool = {
        p.name: cells[(job.name, p.name)].reason or "" for p in fleet.pools if p.name in job.pools
    }
    options = [o for p in fleet.pools for o in cells[(job.name, p.name)].options]
    if not options:
        if len(per_pool) == 1:
            ((name, why),) = per_pool.items()
            return Unplaced(job, f"{name}: {why}", per_pool)
        return Unplaced(
            job, "fits no pool: " + " | ".join(f"{k}: {v}" for k, v in per_pool.items()), per_pool
        )
    # it fits alone somewhere, but not beside the jobs placed
    parts = []
    for pool in fleet.pools:
        mine = [o for o in options if o.pool == pool.name]
        if not mine:
            continue
        least = min(mine, key=lambda o: o.gpus)
        used = sum(p.option.gpus for p in placed if p.option.pool == pool.name)
        per_pool[pool.name] = (
            f"needs at least {least.gpus} GPUs; {pool.count - used} of {pool.count} free"
        )
        parts.append(f"{pool.name} needs ≥ {least.gpus} GPUs, {pool.count - used} free")
    cheapest = min(options, key=lambda o: o.usd)
    return Unplaced(
        job,
        f"fits alone (cheapest: {cheapest.pool}, {cheapest.gpus} GPUs, {money(cheapest.usd)}) "
        f"but not beside the placed jobs: {'; '.join(parts)}",
        per_pool,
    )


# ---------------------------------------------------------------- JSON


def option_json(o: Option, job: Job) -> dict[str, Any]:
    from searcher.search.stack import missing_for
    from searcher.search.views import breakdown_json

    cfg = o.member.config
    return {
        "job": o.job,
        "pool": o.pool,
        "gpus": o.gpus,
        "method": cfg.method,
        "config": {**cfg.model_dump(), "gpus": o.gpus},
        "summary": brief(o),
        "memory_bytes": breakdown_json(o.member.memory),
        "needed_bytes": o.member.needed,
        "tokens_per_s": o.tokens_per_s,
        "step_time_s": o.member.step_time_s,
        "mfu": o.member.mfu,
        "hours": o.hours,
        "usd": o.usd,
        "tokens": job.tokens,
        "needs_outside_stack": list(missing_for(cfg, job.stack)),  # a pin outside it
    }


def matrix_json(plan: FleetPlan) -> list[dict[str, Any]]:
    out = []
    for job in plan.fleet.jobs:
        for pool in plan.fleet.pools:
            cell = plan.cell(job.name, pool.name)
            best = cell.best
            row: dict[str, Any] = {
                "job": job.name,
                "model": job.model.id,
                "pool": pool.name,
                "gpu": pool.gpu.id,
                "ok": best is not None,
            }
            if best is not None:
                row.update(
                    method=best.method,
                    gpus=best.gpus,
                    tokens_per_s=best.tokens_per_s,
                    hours=best.hours,
                    usd=best.usd,
                )
            else:
                row["reason"] = cell.reason
            out.append(row)
    return out


def plan_json(plan: FleetPlan) -> dict[str, Any]:
    f = plan.fleet
    stack = f.jobs[0].stack if f.jobs else None
    return {
        "title": f.title,
        "stack": None if stack is None else sorted(stack),
        "pools": [
            {
                "name": p.name,
                "gpu": p.gpu.id,
                "gpu_name": p.gpu.name,
                "count": p.count,
                "gpus_per_node": p.gpus_per_node,
                "nodes": p.nodes,
                "link": p.link,
                "inter_node_gb_s": p.inter_node_gb_s,
                "usd_per_gpu_hour": p.price,
                "cpu_ram_per_node_bytes": p.cpu_ram_per_node,
                "used_gpus": plan.used(p.name),
            }
            for p in f.pools
        ],
        "jobs": [
            {
                "name": j.name,
                "model": j.model.id,
                "methods": list(j.methods),
                "lora_rank": j.lora_rank,
                "target_batch": j.target_batch,
                "seq_len": j.seq_len,
                "tokens": j.tokens,
                "deadline_hours": j.deadline_hours,
                "budget_usd": j.budget_usd,
                "pools": list(j.pools),
            }
            for j in f.jobs
        ],
        "matrix": matrix_json(plan),
        "buy_vs_rent": buy_rent_json(buy_vs_rent(plan)),
        "placement": [option_json(p.option, p.job) for p in plan.placed],
        "unplaced": [
            {"job": u.job.name, "reason": u.reason, "per_pool": u.per_pool} for u in plan.unplaced
        ],
        "totals": {
            "usd": plan.total_usd,
            "placed": len(plan.placed),
            "unplaced": len(plan.unplaced),
            "makespan_hours": plan.makespan_hours,
            "gpus_used": {p.name: plan.used(p.name) for p in f.pools},
        },
        "solver": {
            "name": plan.assignment.solver,
            "options": sum(len(c.options) for c in plan.cells.values()),
            "configurations_evaluated": sum(c.evaluated for c in plan.cells.values()),
            "search_seconds": plan.search_seconds,
            "solve_seconds": plan.solve_seconds,
        },
    }
