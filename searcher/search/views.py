"""JSON and one-line views of search results, explanations and configurations (no printing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from constraints.breakdown import MemoryBreakdown
from constraints.memory import TERMS
from constraints.speed import StepTime
from searcher.search.levers import AdvisedExplanation
from searcher.search.stack import config_needs

if TYPE_CHECKING:  # types only: explain need not import the search
    from searcher.search.run import FrontMember, SearchResult
    from searcher.search.space import SearchProblem


def breakdown_json(b: MemoryBreakdown) -> dict[str, Any]:
    out: dict[str, Any] = {t: b.term(t) for t in TERMS}
    out["total"] = b.total
    out.update(b.parts)
    out.update(
        static=b.static,
        static_weights=b.static_weights,
        static_gradients=b.static_gradients,
        static_optimizer=b.static_optimizer,
        paged_optimizer=b.paged_optimizer,
        cpu_ram=b.cpu_bytes,
        peak_allocated=b.allocated,
        peak_reserved=b.reserved,
    )
    return out


def explanation_json(e: AdvisedExplanation) -> dict[str, Any]:
    return {
        "model": {"id": e.model.id, "name": e.model.name, "family": e.model.family},
        "params": {
            "total": e.params_total,
            "trainable": e.params_trainable,
            "other_towers": e.model.tower_params,
        },
        "config": e.config.model_dump(),
        "memory_bytes": breakdown_json(e.breakdown),
        "peak_phase": e.breakdown.phase,
        "largest_term": max(TERMS, key=e.breakdown.term),
        "gpu": {
            "id": e.gpu.id,
            "name": e.gpu.name,
            "capacity_bytes": e.verdict.capacity,
            "cuda_context_bytes": e.verdict.cuda_context,
            "headroom_bytes": e.verdict.headroom,
            "usable_bytes": e.verdict.usable,
        },
        "needed_bytes": e.verdict.needed,
        "fits": e.verdict.fits,
        "margin_bytes": e.verdict.margin,
        "problems": list(e.verdict.problems),
        "levers": [
            {
                "term": lv.term,
                "change": lv.change,
                "flags": lv.flags,
                "saves_bytes": lv.saves,
                "total_bytes": lv.total,
                "fits": lv.fits,
            }
            for lv in e.levers
        ],
        "notes": list(e.notes),
        "speed": speed_json(e.speed) if e.speed is not None else None,
    }


def speed_json(s: StepTime) -> dict[str, Any]:
    """Step time, tokens/s (per GPU and in all), MFU and the decomposition, seconds per step."""
    return {
        "step_time_s": s.step_time_s,
        "tokens_per_step": s.tokens_per_step,
        "tokens_per_s": s.tokens_per_s,
        "tokens_per_s_per_gpu": s.tokens_per_s_per_gpu,
        "mfu": s.mfu,
        "usd_per_mtok": s.usd_per_mtok,
        "decomposition_s": dict(s.parts),
        "gemm_groups_s": dict(s.gemm_groups),
        "topology": {
            "gpus_per_node": s.gpus_per_node,
            "inter_node_gb_s": s.inter_node_gb_s,
            "nvlink_domain": s.nvlink_domain,
        },
    }


def member_json(
    m: FrontMember, problem: SearchProblem, tokens: float | None = None
) -> dict[str, Any]:
    from searcher.search.views import breakdown_json

    cfg = m.config.model_dump()
    cfg["gpus"] = m.gpus
    cfg["rank"] = cfg["lora_rank"] if m.config.method != "full" else None
    out: dict[str, Any] = {
        "config": cfg,
        "memory_bytes": breakdown_json(m.memory),
        "needed_bytes": m.needed,
        "tokens_per_s": m.tokens_per_s,
        "step_time_s": m.step_time_s,
        "usd_per_mtok": m.usd_per_mtok,
        "mfu": m.mfu,
        "fidelity": m.fidelity,
        # what each configuration the front counts as this one changes (search/alternatives.py)
        "alternatives": [
            {k: v for k, v in a.model_dump().items() if v != cfg[k]} for a in m.alternatives
        ],
        "gpu": problem.gpu.id,
        "model": problem.model.id,
        "needs_packages": list(config_needs(m.config, problem.framework)),
    }
    if tokens:
        hours, usd = m.budget(tokens, problem.gpu.usd_per_gpu_hour)
        out["budget"] = {"tokens": tokens, "hours": hours, "usd": usd}
    return out


def result_json(r: SearchResult, tokens: float | None = None) -> dict[str, Any]:
    return {
        "model": r.problem.model.id,
        # where the model came from: a Hub id's resolved commit, a catalog source, a file
        "model_source": r.problem.model.source or r.problem.model.name,
        "gpu": r.problem.gpu.id,
        "target_batch": r.problem.target_batch,
        "seq_len": r.problem.seq_len,
        "strategy": r.strategy,
        "evaluated": r.evaluated,
        "pruned": r.pruned,
        "feasible": r.feasible,
        # the optional packages the search kept to (None: any) and, per member, what it needs
        # beyond them (searcher/search/stack.py)
        "stack": None if r.problem.stack is None else sorted(r.problem.stack),
        "front": [
            {
                **member_json(m, r.problem, tokens),
                "needs_outside_stack": list(r.stack_missing[i]) if r.stack_missing else [],
            }
            for i, m in enumerate(r.front)
        ],
        "rejected": [
            {
                "family": x.family,
                "reason": x.reason,
                "best_needed_bytes": x.best_needed,
                "best_config": x.best_config.model_dump() if x.best_config else None,
            }
            for x in r.rejected
        ],
    }
