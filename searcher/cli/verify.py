"""``fitplan search --verify K``: the top K members of the front traced on fake tensors.

Each member's configuration runs two real training steps under the step tracer
(:func:`searcher.truth.step_trace.trace_step`); its traced peak allocated bytes are printed beside
the analytic peak allocated the search ranked it by (``total − overhead − paged``). Members the
tracer cannot run (multi-GPU, ZeRO, selective checkpointing, …) get a one-line reason instead.
Without torch: one line naming the extra, exit 2, before the search runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen

GIB = 2**30


@frozen
class Verified:
    """One front member: rank (1-based), its analytic and traced peak allocated bytes."""

    rank: int
    config: Any
    analytic_bytes: int
    traced_bytes: int | None
    moment: str = ""
    seconds: float = 0.0
    note: str = ""

    @property
    def error(self) -> float | None:
        """analytic / traced − 1 (None when not traced)."""
        if not self.traced_bytes:
            return None
        return self.analytic_bytes / self.traced_bytes - 1.0


def check_verify_args(args: argparse.Namespace) -> None:
    """Before any search: the tracer needs an architecture and the measure extra."""
    if getattr(args, "verify", None) is None:
        return
    if args.params is not None:
        raise FitplanError(
            "--verify traces the model's architecture, not --params",
            "give --model a catalog id or a config.json",
        )
    from searcher.truth.hf_build import require_torch

    require_torch()


def verify_front(args: argparse.Namespace, result: Any) -> list[Verified]:
    """Trace the first ``args.verify`` members of ``result.front`` (the order printed)."""
    from searcher.truth.hf_build import config_of, quiet_transformers
    from searcher.truth.step_build import check_supported
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    spec = result.problem.model
    hf_cfg, _ = config_of(args.model)
    out = []
    for rank, member in enumerate(result.front[: args.verify], start=1):
        cfg = member.config.as_planned()
        analytic = int(member.memory.allocated)
        try:
            check_supported(spec, cfg)
        except FitplanError as err:
            out.append(Verified(rank, cfg, analytic, None, note=err.message))
            continue
        t = trace_step(spec, cfg, hf_config_dict=hf_cfg)
        out.append(Verified(rank, cfg, analytic, t.peak_bytes, t.moment, t.wall_s))
    return out


def verified_json(rows: list[Verified]) -> list[dict[str, Any]]:
    return [
        {
            "rank": r.rank,
            "config": r.config.model_dump(exclude_defaults=True),
            "analytic_peak_allocated_bytes": r.analytic_bytes,
            "traced_peak_allocated_bytes": r.traced_bytes,
            "traced_moment": r.moment or None,
            "error": r.error,
            "trace_seconds": round(r.seconds, 2),
            "not_traced": r.note or None,
        }
        for r in rows
    ]


def verified_lines(rows: list[Verified]) -> list[str]:
    """The table: one row per member, analytic and traced GiB side by side."""
    lines = [
        "verified on fake tensors (two training steps traced, the second measured; "
        "peak allocated, GiB):",
        f"  {'#':>3s} {'analytic':>9s} {'traced':>9s} {'error':>7s}  configuration",
    ]
    for r in rows:
        what = _short(r.config)
        if r.traced_bytes is None:
            lines.append(
                f"  {r.rank:3d} {r.analytic_bytes / GIB:9.2f} {'—':>9s} {'':>7s}  {what}"
                f" (not traced: {r.note})"
            )
            continue
        lines.append(
            f"  {r.rank:3d} {r.analytic_bytes / GIB:9.2f} {r.traced_bytes / GIB:9.2f} "
            f"{r.error:+7.1%}  {what} (peak at the {r.moment}, {r.seconds:.1f} s)"
        )
    return lines


def _short(cfg: Any) -> str:
    keys = (
        "method",
        "recipe",
        "optimizer",
        "micro_batch",
        "grad_accum",
        "attention",
        "checkpointing",
        "lora_rank",
        "quant",
        "loss",
    )
    d = cfg.model_dump(exclude_defaults=True)
    return " ".join(f"{k}={d[k]}" for k in keys if k in d)


def print_verified(rows: list[Verified]) -> None:
    sys.stdout.write("\n".join(verified_lines(rows)) + "\n")
