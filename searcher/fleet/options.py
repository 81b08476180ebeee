"""What a job can do on a pool: the search over the pool's whole nodes, reduced to options.

For a (job, pool) pair the exhaustive search runs with the pool's GPU (its price and intra-node
link), its node size, inter-node bandwidth and CPU RAM, and the GPU counts a job may take there
(:meth:`Pool.gpu_counts`). At each GPU count the fastest configuration that fits is that count's
option: time = tokens / tokens_per_s, cost = GPUs × $/GPU-hour × time (at a fixed count the
fastest is also the cheapest). Options beyond the job's deadline or budget are dropped, and so
is any option another option beats on both GPUs and cost (it can never be part of a cheapest
placement). When nothing is left the cell says why, in numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from constraints.errors import FitplanError
from constraints.frozen import frozen
from searcher.fleet.schema import Job, Pool
from searcher.search.briefs import knobs_brief
from searcher.search.run import FAMILY_NAMES, FrontMember, member_at, run_search
from searcher.search.space import SearchProblem
from searcher.search.strategies import ExhaustiveStrategy


@frozen
class Option:
    """One way to run a job on a pool: a GPU count and the fastest configuration at it."""

    job: str
    pool: str
    gpus: int
    member: FrontMember
    hours: float
    usd: float

    @property
    def method(self) -> str:
        return self.member.config.method

    @property
    def tokens_per_s(self) -> float:
        return self.member.tokens_per_s


@dataclass
class Cell:
    """The search of one job on one pool and what is left of it after deadline and budget."""

    job: str
    pool: str
    all_options: list[Option] = field(default_factory=list)  # the fastest per GPU count
    options: list[Option] = field(default_factory=list)  # within deadline and budget, pruned
    reason: str | None = None  # why there is no option, in numbers
    evaluated: int = 0
    seconds: float = 0.0
    #: the Pareto front, built when first read (the HTML report reads it; the plan does not)
    front_of: Callable[[], list[FrontMember]] | None = field(default=None, repr=False)
    _front: list[FrontMember] | None = field(default=None, repr=False)

    @property
    def front(self) -> list[FrontMember]:
        if self._front is None:
            self._front = self.front_of() if self.front_of is not None else []
        return self._front

    @front.setter
    def front(self, members: list[FrontMember]) -> None:
        self._front = members

    @property
    def best(self) -> Option | None:
        """The cheapest option (fewest GPUs on a tie): what the job would take alone."""
        return min(self.options, key=lambda o: (o.usd, o.gpus), default=None)


def problem_for(job: Job, pool: Pool) -> SearchProblem:
    pins: dict[str, object] = {"lora_rank": job.lora_rank}
    if len(job.methods) == 1:
        pins["method"] = job.methods[0]
    elif len(job.methods) < 3:
        pins["method"] = job.methods
    return SearchProblem(
        model=job.model,
        gpu=pool.gpu,
        max_gpus=pool.count,
        target_batch=job.target_batch,
        seq_len=job.seq_len,
        headroom=pool.headroom,
        cpu_ram_per_node=pool.cpu_ram_per_node,
        gpus_per_node=pool.gpus_per_node,
        inter_node_gb_s=pool.inter_node_gb_s,
        nvlink_domain=pool.nvlink_domain,
        pins=pins,
        gpu_counts=pool.gpu_counts(),
        stack=job.stack,
    )


def fastest_per_count(job: Job, pool: Pool, ev) -> list[Option]:
    """At each GPU count, the fastest feasible configuration (then higher fidelity, less memory)."""
    ok = np.flatnonzero(ev.feasible)
    if not ok.size:
        return []
    speed = ev.throughput["tokens_per_s"][ok]
    order = np.lexsort((ev.needed[ok], -ev.fidelity[ok], -speed, ev.batch.gpus[ok]))
    ranked = ok[order]
    gpus = ev.batch.gpus[ranked]
    firsts = ranked[np.flatnonzero(np.r_[True, gpus[1:] != gpus[:-1]])]
    out = []
    for i in firsts:
        m = member_at(ev, int(i))
        hours = job.tokens / m.tokens_per_s / 3600.0
        out.append(Option(job.name, pool.name, m.gpus, m, hours, m.gpus * pool.price * hours))
    return out


def prune(options: list[Option]) -> list[Option]:
    """Drop every option that another beats or equals on both GPUs and cost (keeping the first
    of equals): a cheapest placement never needs it."""
    kept: list[Option] = []
    for o in sorted(options, key=lambda o: (o.gpus, o.usd, -o.tokens_per_s)):
        if all(o.usd < k.usd for k in kept):
            kept.append(o)
    return kept


def money(x: float) -> str:
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"


def duration(h: float) -> str:
    return f"{h:,.1f} h" if h >= 0.1 else f"{h * 60:.1f} min"


def brief(o: Option) -> str:
    """'LoRA, ZeRO-3, AdamW, r=16, full checkpointing, micro-batch 4, 16 GPUs'."""
    one = ", 1 GPU" if o.gpus == 1 else ""
    return f"{FAMILY_NAMES[o.method]}, {knobs_brief(o.member.config)}{one}"


def within_limits(job: Job, options: list[Option]) -> tuple[list[Option], str | None]:
    """The options that meet the deadline and the budget, or the reason none does."""
    if not options:
        return [], None
    timely = [o for o in options if job.deadline_hours is None or o.hours <= job.deadline_hours]
    if not timely:
        fastest = min(options, key=lambda o: o.hours)
        return [], (
            f"fastest option takes {duration(fastest.hours)} ({brief(fastest)}) "
            f"> deadline {job.deadline_hours:g} h"
        )
    budget = job.budget_usd
    affordable = [o for o in timely if budget is None or o.usd <= budget]
    if budget is not None and not affordable:
        cheapest = min(timely, key=lambda o: o.usd)
        within = " within the deadline" if len(timely) < len(options) else ""
        return [], (
            f"cheapest option{within} costs {money(cheapest.usd)} ({brief(cheapest)}, "
            f"{duration(cheapest.hours)}) > budget {money(budget)}"
        )
    return prune(affordable), None


def search_cell(job: Job, pool: Pool) -> Cell:
    """Search one job on one pool (runs in a worker process for large fleets)."""
    start = time.perf_counter()
    cell = Cell(job.name, pool.name)
    if pool.name not in job.pools:
        cell.reason = "not among the job's pools"
        return cell
    try:
        result = run_search(problem_for(job, pool), ExhaustiveStrategy(), keep_evaluation=True)
    except FitplanError as err:  # e.g. no layout divides the target batch
        cell.reason = str(err)
        cell.seconds = time.perf_counter() - start
        return cell
    ev = result.evaluation
    assert ev is not None
    cell.evaluated = result.evaluated
    cell.front = result.front
    cell.all_options = fastest_per_count(job, pool, ev)
    if not cell.all_options:
        reasons = [r.reason.replace("(--cpu-ram)", "(cpu_ram_per_node)") for r in result.rejected]
        cell.reason = "; ".join(reasons) or "no configuration fits"
    else:
        cell.options, cell.reason = within_limits(job, cell.all_options)
    cell.seconds = time.perf_counter() - start
    return cell


def _cell_problem_key(job: Job, pool: Pool, reprs: dict[int, str] | None = None) -> str:
    """What a cell's evaluation depends on besides its GPU counts: cells that agree here share
    one search (jobs differing only in name, tokens, deadline or budget; pools differing only in
    name and size). The price stays in: it is the front's cost objective.

    ``reprs`` remembers the text of the model and GPU objects by identity (the same object
    recurs in every cell of its job or pool; the caller keeps them alive): a model's repr is
    ~80 fields, and 2,000 cells spent a second on them."""
    p = problem_for(job, pool)
    memo = {} if reprs is None else reprs

    def text(v: object) -> str:
        if id(v) not in memo:
            memo[id(v)] = repr(v)
        return memo[id(v)]

    fields = sorted(
        (k, text(v) if k in ("model", "gpu") else repr(v))
        for k, v in p.__dict__.items()
        if k not in ("max_gpus", "gpu_counts")
    )
    return "[" + ", ".join(f"({k!r}, {v})" for k, v in fields) + "]"


def _search_group(pairs: list[tuple[Job, Pool]], fronts: bool = True) -> list[Cell]:
    """One streamed search for cells that share a problem but for their GPU counts: the union
    of their counts is searched once, and each cell's sinks keep its own counts' answers (a
    GPU count's configurations do not depend on which other counts are searched)."""
    from searcher.search.factors import Factors
    from searcher.search.sinks import BestPerSink, FrontSink, RejectionSink
    from searcher.search.stream import stream_search

    start = time.perf_counter()
    job0, pool0 = pairs[0]
    counts = sorted({g for _, pool in pairs for g in pool.gpu_counts()})
    base = problem_for(job0, pool0)
    union = SearchProblem(
        **{**base.__dict__, "max_gpus": max(p.count for _, p in pairs), "gpu_counts": tuple(counts)}
    )
    try:
        factors = Factors(union)
    except FitplanError:  # no layout at all: each cell says why in its own terms
        return [search_cell(job, pool) for job, pool in pairs]
    sizes = factors.size_by_gpus()
    sinks: dict[tuple[int, ...], tuple[BestPerSink, FrontSink, RejectionSink]] = {}
    for _, pool in pairs:
        c = pool.gpu_counts()
        if c not in sinks and sum(sizes.get(g, 0) for g in c) > 0:
            sinks[c] = (
                BestPerSink(lambda ev: ev.batch.gpus, lambda b: b.gpus, gpu_counts=c),
                FrontSink(union, gpu_counts=c),
                RejectionSink(union, gpu_counts=c),
            )
    used = [x for trio in sinks.values() for x in trio if fronts or not isinstance(x, FrontSink)]
    # unpruned: bounding a row costs a throughput evaluation, about what evaluating it does
    # (searcher/search/stream.py), and 20 pools × 100 jobs ran 9.4 s pruned, 5.4 s not
    stream_search(union, used, factors=factors, prune=False)
    # each GPU count's fastest as a member, once per sink: the jobs sharing it share them
    members = {
        c: [(g, member_at(row, 0)) for g, row in trio[0].rows()] for c, trio in sinks.items()
    }
    share = (time.perf_counter() - start) / len(pairs)
    cells = []
    for job, pool in pairs:
        c = pool.gpu_counts()
        if c not in sinks:  # none of this pool's counts has a layout: its own error message
            cells.append(search_cell(job, pool))
            continue
        _, front, rejections = sinks[c]
        cell = Cell(job.name, pool.name, evaluated=sum(sizes.get(g, 0) for g in c))
        cell.front_of = front.cached_members if fronts else None
        for _, m in members[c]:
            hours = job.tokens / m.tokens_per_s / 3600.0
            cell.all_options.append(
                Option(job.name, pool.name, m.gpus, m, hours, m.gpus * pool.price * hours)
            )
        if not cell.all_options:
            reasons = [
                r.reason.replace("(--cpu-ram)", "(cpu_ram_per_node)")
                for r in rejections.rejections()
            ]
            cell.reason = "; ".join(reasons) or "no configuration fits"
        else:
            cell.options, cell.reason = within_limits(job, cell.all_options)
        cell.seconds = share
        cells.append(cell)
    return cells


def search_cells(
    jobs: tuple[Job, ...],
    pools: tuple[Pool, ...],
    workers: int | None = None,
    progress=None,
    fronts: bool = True,
) -> dict[tuple[str, str], Cell]:
    """Every (job, pool) cell, one streamed search per group of cells that share a problem.
    ``fronts=False`` skips each cell's Pareto front (only the HTML report shows it).

    One process by default: measured on a loaded 2-core machine, worker processes (pickling
    every result back) were slower than one process (benchmarks/bench_scale.py); ``workers``
    spreads the groups over that many processes."""
    cells: dict[tuple[str, str], Cell] = {}
    groups: dict[str, list[tuple[Job, Pool]]] = {}
    reprs: dict[int, str] = {}  # the jobs' and pools' models and GPUs, alive in jobs/pools
    total = len(jobs) * len(pools)
    for j in jobs:
        for p in pools:
            if p.name not in j.pools:
                cells[(j.name, p.name)] = Cell(j.name, p.name, reason="not among the job's pools")
            else:
                groups.setdefault(_cell_problem_key(j, p, reprs), []).append((j, p))
    done = len(cells)
    n_workers = workers or 1
    if n_workers > 1 and len(groups) > 1:
        from concurrent.futures import ProcessPoolExecutor

        try:
            with ProcessPoolExecutor(max_workers=n_workers) as pool_exec:
                searches = pool_exec.map(
                    _search_group, groups.values(), [fronts] * len(groups), chunksize=1
                )
                for group in searches:
                    for cell in group:
                        cells[(cell.job, cell.pool)] = cell
                    done += len(group)
                    if progress:
                        progress(done, total)
            return _in_order(cells, jobs, pools)
        except (OSError, NotImplementedError):
            pass  # no process support here (a sandbox without /dev/shm): search in this one
    for group_pairs in groups.values():
        for cell in _search_group(group_pairs, fronts):
            cells[(cell.job, cell.pool)] = cell
        done += len(group_pairs)
        if progress:
            progress(done, total)
    return _in_order(cells, jobs, pools)


def _in_order(
    cells: dict[tuple[str, str], Cell], jobs: tuple[Job, ...], pools: tuple[Pool, ...]
) -> dict[tuple[str, str], Cell]:
    return {(j.name, p.name): cells[(j.name, p.name)] for j in jobs for p in pools}
