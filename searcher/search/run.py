"""Run a strategy, keep the feasible Pareto front ranked by throughput cost, say why families failed."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from constraints.breakdown import MemoryBreakdown
from constraints.config import CODE, METHODS, TrainConfig
from constraints.errors import FitplanError
from constraints.hardware import describe
from constraints.memory import PARTS, PHASES, TERMS
from constraints.units import GiB
from searcher.search.briefs import knobs_brief
from searcher.search.evaluate import Evaluation
from searcher.search.pareto import pareto_front
from searcher.search.space import SearchProblem, knob_values
from searcher.search.strategies import Progress, Strategy

FAMILY_NAMES = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}


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
class Rejection:
    family: str
    reason: str
    best_needed: int | None = None
    best_config: TrainConfig | None = None


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


def _rejections(problem: SearchProblem, ev: Evaluation) -> list[Rejection]:
    out: list[Rejection] = []
    feasible = ev.feasible
    usable_gib = ev.usable / GiB
    for family in knob_values(problem)["method"]:
        sel = ev.batch.method == CODE["method"][family]
        if not sel.any() or (feasible & sel).any():
            continue
        name = FAMILY_NAMES[family]
        hw_ok = sel & (ev.hardware == 0)
        if not hw_ok.any():
            masks = np.unique(ev.hardware[sel])
            problems = sorted(
                {p for m in masks for p in describe(int(m), problem.model, problem.gpu)}
            )
            out.append(
                Rejection(
                    family, f"{name}: cannot run on {problem.gpu.name}: {'; '.join(problems)}"
                )
            )
            continue
        mem_ok = hw_ok & ev.fits
        if mem_ok.any() and not (mem_ok & ev.cpu_ok).any():
            i = int(np.flatnonzero(mem_ok)[np.argmin(ev.memory["cpu_bytes"][mem_ok])])
            cfg = ev.batch.config(i)
            need = ev.memory["cpu_bytes"][i] * min(cfg.gpus, problem.gpus_per_node) / GiB
            out.append(
                Rejection(
                    family,
                    f"{name}: fits the GPU only with CPU offload, which needs {need:.1f} GiB of CPU RAM per node "
                    f"({knobs_brief(cfg)}); {problem.cpu_ram_per_node / GiB:.1f} GiB available (--cpu-ram)",
                    round(float(ev.needed[i])),
                    cfg,
                )
            )
            continue
        i = int(np.flatnonzero(hw_ok)[np.argmin(ev.needed[hw_ok])])
        cfg = ev.batch.config(i)
        out.append(
            Rejection(
                family,
                f"{name}: needs {ev.needed[i] / GiB:.1f} GiB per GPU at best ({knobs_brief(cfg)}); {usable_gib:.1f} GiB usable",
                round(float(ev.needed[i])),
                cfg,
            )
        )
    return out


def run_search(
    problem: SearchProblem,
    strategy: Strategy,
    progress: Progress | None = None,
    keep_evaluation: bool = False,
    rank_by: str = "cost",
) -> SearchResult:
    """The feasible Pareto front, ranked by throughput cost (``rank_by="speed"``: tokens/s first)."""
    if rank_by not in ("cost", "speed"):
        raise FitplanError(f"--rank-by {rank_by}: use cost or speed")
    start = time.perf_counter()
    ev = strategy.run(problem, progress)
    feasible_idx = np.flatnonzero(ev.feasible)
    front: list[FrontMember] = []
    if feasible_idx.size:
        # among configurations with equal objectives, keep the fastest, then the fewest GPUs
        speed = np.nan_to_num(ev.throughput["tokens_per_s"], nan=0.0)
        pref = np.lexsort((ev.batch.gpus[feasible_idx], -speed[feasible_idx]))
        feasible_idx = feasible_idx[pref]
        objectives = ev.objectives()
        keep = feasible_idx[pareto_front(objectives[feasible_idx])]
        # ranked by throughput cost, then speed, then memory (or speed first)
        if rank_by == "speed":
            order = np.lexsort((ev.needed[keep], objectives[keep, 0], -speed[keep]))
        else:
            order = np.lexsort((ev.needed[keep], -speed[keep], objectives[keep, 0]))
        front = [member_at(ev, int(i)) for i in keep[order]]
    return SearchResult(
        problem=problem,
        strategy=strategy.name,
        front=front,
        rejected=_rejections(problem, ev),
        evaluated=len(ev.batch),
        feasible=int(feasible_idx.size),
        seconds=time.perf_counter() - start,
        evaluation=ev if keep_evaluation else None,
        rank_by=rank_by,
    )


def methods_of(result: SearchResult) -> list[str]:
    return [m for m in METHODS if any(f.config.method == m for f in result.front)]
