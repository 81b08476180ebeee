"""``fitplan trace-step`` and ``fitplan explain --exact``: the traced step beside the analytic model.

Both take explain's flags. The trace runs two real training steps on fake tensors
(:func:`searcher.truth.step_trace.trace_step`) and prints its peak allocated bytes, the moment and
the composition at the peak beside the analytic model's peak allocated (``total − overhead``),
its phase and its terms. Without torch: one line naming the extra, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from constraints.errors import FitplanError

GIB = 2**30


def _traced(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(explanation, step trace, config) for explain's arguments; input checked before the trace."""
    from searcher.inputs import explain_config
    from searcher.search.levers import advise
    from searcher.truth.hf_build import config_of, quiet_transformers, require_torch

    spec, gpu, cfg, headroom, _notes, _assumed = explain_config(args)
    cfg = cfg.as_planned()
    if spec.arch == "raw":
        raise FitplanError(
            "the step tracer needs an architecture, not --params",
            "give --model a catalog id or a config.json",
        )
    require_torch()
    quiet_transformers()
    hf_cfg, _ = config_of(args.model)
    from searcher.truth.step_build import check_supported
    from searcher.truth.step_trace import trace_step

    check_supported(spec, cfg)
    e = advise(spec, cfg, gpu, headroom)  # what fitplan explain prints (with the levers)
    # every layer, so that the allocator replays the step's real order of requests
    full_depth = not getattr(args, "fast", False)
    t = trace_step(
        spec,
        cfg,
        hf_config_dict=hf_cfg,
        full_depth=full_depth,
        adamw_impl=getattr(args, "adamw_impl", None) or "fused",
        autocast=getattr(args, "autocast", None),
        allocator=allocator_settings(args, cfg, e, full_depth),
    )
    return e, t, cfg


def allocator_settings(args: argparse.Namespace, cfg: Any, e: Any, full_depth: bool) -> Any:
    """The caching allocator the trace replays: the plan's segment mode, --max-split-size-mb,
    and (every layer traced) the card's memory less the CUDA context as what cudaMalloc can
    get, so that the replay releases its cache before an OOM as torch does."""
    from constraints.allocator_replay import AllocatorSettings
    from constraints.units import MiB

    mb = getattr(args, "max_split_size_mb", None)
    capacity = e.gpu.memory_bytes - e.breakdown.cuda_context if full_depth else None
    return AllocatorSettings(
        expandable_segments=bool(cfg.expandable_segments),
        max_split_size=mb * MiB if mb is not None else None,
        capacity=capacity,
    )


def comparison_json(e: Any, t: Any) -> dict[str, Any]:
    b = e.breakdown
    return {
        "traced": t.as_json(),
        "analytic": {
            "peak_allocated_bytes": b.allocated,
            "peak_reserved_bytes": b.reserved,
            "phase": b.phase,
            "terms": {k: b.term(k) for k in ("weights", "gradients", "optimizer", "activations")},
            "parts": b.parts,
        },
        "error": b.allocated / t.peak_bytes - 1.0 if t.peak_bytes else None,
    }


def comparison_lines(e: Any, t: Any) -> list[str]:
    b = e.breakdown
    err = b.allocated / t.peak_bytes - 1.0 if t.peak_bytes else float("nan")
    traced_rows = [(k, v) for k, v in t.composition.items() if v]
    analytic_rows = [(k, v) for k, v in b.parts.items() if v and k not in ("cuda_context",)]
    analytic_rows = [(k, v) for k, v in analytic_rows if k != "allocator_slack"]
    lines = [
        f"{e.model.name}: peak allocated, traced step vs fitplan's model "
        f"({t.layers} layers; traced at {', '.join(map(str, t.traced_layers))}, "
        f"{t.wall_s:.1f} s)",
        f"  {'traced (2nd step)':38s} {'fitplan (analytic)':38s}",
        f"  {'peak ' + f'{t.peak_bytes / GIB:,.3f} GiB':38s} "
        f"{'peak ' + f'{b.allocated / GIB:,.3f} GiB':38s} error {err:+.1%}",
        f"  {'at the ' + t.moment:38s} {'at the ' + b.phase:38s}",
    ]
    for i in range(max(len(traced_rows), len(analytic_rows))):
        left = right = ""
        if i < len(traced_rows):
            k, v = traced_rows[i]
            left = f"{k:22s} {v / GIB:10.3f} GiB"
        if i < len(analytic_rows):
            k, v = analytic_rows[i]
            right = f"{k:24s} {v / GIB:8.3f} GiB"
        lines.append(f"    {left:36s}   {right}")
    lines += reserved_lines(e, t)
    if t.per_layer_bytes:
        lines.append(f"  per decoder layer at the peak: {t.per_layer_bytes / 2**20:,.1f} MiB")
    if t.paged_bytes:
        lines.append(
            f"  paged optimizer states (unified memory, not allocated): {t.paged_bytes:,} B"
        )
    lines += [f"  note: {n}" for n in t.notes]
    if t.largest:
        lines.append(f"  largest blocks at the peak ({t.traced_layers[-1]}-layer trace):")
        for nbytes, category, phase, what in t.largest[:8]:
            lines.append(f"    {nbytes / 2**20:10,.1f} MiB  {category:18s} {phase:15s} {what}")
    return lines


def reserved_lines(e: Any, t: Any) -> list[str]:
    """The replayed caching allocator beside the analytic reserved peak: what
    torch.cuda.max_memory_reserved (and nvidia-smi, with the CUDA context) would show."""
    if t.peak_reserved_bytes is None:
        return []
    b = e.breakdown
    if t.oom_request_bytes:
        return [
            f"  the caching allocator replayed ({t.allocator or 'default settings'}; torch 2.13 "
            "rules) runs out of memory:",
            f"  {t.oom_request_bytes / 2**20:,.1f} MiB asked with "
            f"{t.peak_reserved_bytes / GIB:,.3f} GiB reserved, of the "
            f"{(e.gpu.memory_bytes - b.cuda_context) / GIB:,.3f} GiB it can hold",
            "  (the card less the CUDA context; its cached blocks were released first)",
        ]
    traced_slack = t.peak_reserved_bytes - t.peak_bytes
    analytic_slack = b.allocator_slack
    err = b.reserved / t.peak_reserved_bytes - 1.0 if t.peak_reserved_bytes else float("nan")
    mode = t.allocator or "default settings"
    return [
        f"  peak reserved, the caching allocator replayed ({mode}; torch 2.13 rules):",
        f"  {'reserved ' + f'{t.peak_reserved_bytes / GIB:,.3f} GiB':38s} "
        f"{'reserved ' + f'{b.reserved / GIB:,.3f} GiB':38s} error {err:+.1%}",
        f"  {'slack ' + f'{traced_slack / GIB:,.3f} GiB ({_share(traced_slack, t.peak_bytes)})':38s} "
        f"{'slack ' + f'{analytic_slack / GIB:,.3f} GiB ({_share(analytic_slack, b.allocated)})':38s}",
        f"  + CUDA context {b.cuda_context / GIB:,.3f} GiB (outside the allocator) = "
        f"{(t.peak_reserved_bytes + b.cuda_context) / GIB:,.3f} GiB at nvidia-smi, traced",
    ]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%} of allocated" if whole else "—"


def cmd_trace_step(args: argparse.Namespace) -> int:
    e, t, _cfg = _traced(args)
    if args.json:
        sys.stdout.write(json.dumps(comparison_json(e, t), indent=2, default=str) + "\n")
    else:
        sys.stdout.write("\n".join(comparison_lines(e, t)) + "\n")
    return 0


def cmd_explain_exact(args: argparse.Namespace) -> int:
    """``explain --exact``: the explanation, then the traced step beside it."""
    from searcher.cli.render import print_explanation
    from searcher.search.views import explanation_json

    e, t, _cfg = _traced(args)
    if args.json:
        out = explanation_json(e)
        out["exact"] = comparison_json(e, t)
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
    else:
        print_explanation(e)
        sys.stdout.write("\n".join(comparison_lines(e, t)) + "\n")
    return 0 if e.verdict.fits else 1
