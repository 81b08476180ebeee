"""``fitplan trace``, the command: which modes to trace, and the report (text or ``--json``).

The tracing itself is :mod:`searcher.truth.trace`.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from searcher.truth.trace import MODES, TraceResult, trace


def result_json(r: TraceResult) -> dict[str, Any]:
    return {
        "model": r.model,
        "params": {"traced": r.params_traced, "inventory": r.params_inventory},
        "traced_layers": r.traced_layers,
        "batch": r.batch,
        "seq_len": r.seq_len,
        "dtype": r.dtype,
        "modes": [
            {
                "attention": m.attention,
                "checkpointing": m.checkpointing,
                "bytes_per_token_per_layer": {
                    block: {
                        "traced": m.layer_bytes[block],
                        "analytic": m.analytic_bytes[block],
                        "error": m.error(block),
                    }
                    for block in m.layer_bytes
                },
                "model_level_bytes_per_token": m.model_level_bytes,
                "loss_bytes_per_token": m.loss_bytes,
                "note": m.note,
                "tensors": {block: [vars(t) for t in ts] for block, ts in m.tensors.items()},
            }
            for m in r.modes
        ],
    }


def _trace_for_cli(args: Any, modes: tuple[tuple[str, str], ...]) -> TraceResult:
    return trace(
        args.model,
        modes=modes,
        layers=args.layers,
        batch=args.batch,
        seq_len=args.seq_len,
        dtype=args.dtype,
        keep_tensors=args.tensors,
    )


def cmd_trace(args: Any) -> int:
    import json
    import sys

    modes = MODES
    if args.attention or args.checkpointing:
        modes = tuple(
            (a, c)
            for a, c in MODES
            if (not args.attention or a == args.attention)
            and (not args.checkpointing or c == args.checkpointing)
        )
        if not modes:
            raise FitplanError(
                f"no traced mode has --attention {args.attention} --checkpointing "
                f"{args.checkpointing}",
                "flash: none or full; eager: none, selective or full",
            )
    from searcher.truth.hf_build import quiet_transformers, require_torch

    require_torch()
    quiet_transformers()
    r = _trace_for_cli(args, modes)
    if args.json:
        sys.stdout.write(json.dumps(result_json(r), indent=2) + "\n")
        return 0
    same = "equal" if r.params_traced == r.params_inventory else "DIFFER"
    lines = [
        f"{r.spec.name}: parameters {r.params_traced:,} traced on the meta device, "
        f"{r.params_inventory:,} by fitplan's inventory ({same})",
        f"saved for backward, bytes per token per layer ({r.dtype} model, batch {r.batch}, "
        f"sequence {r.seq_len}, {r.traced_layers} layers traced):",
        f"  {'attention':9s} {'checkpoint':10s} {'block':8s} {'traced':>12s} {'fitplan':>12s} "
        f"{'error':>8s}",
    ]
    for m in r.modes:
        if not m.layer_bytes:
            lines.append(f"  {m.attention:9s} {m.checkpointing:10s} skipped: {m.note}")
            continue
        for block in m.layer_bytes:
            lines.append(
                f"  {m.attention:9s} {m.checkpointing:10s} {block:8s} "
                f"{m.layer_bytes[block]:12,.1f} {m.analytic_bytes[block]:12,.1f} "
                f"{m.error(block):+8.2%}"
            )
        for tensors in m.tensors.values():
            for t in tensors:
                lines.append(
                    f"      {t.nbytes / (r.batch * r.seq_len):10,.1f} B/token  {t.dtype:15s} "
                    f"{t.shape}"
                )
    first = next((m for m in r.modes if m.layer_bytes), None)
    if first is not None:
        lines.append(
            f"outside the layers: {first.model_level_bytes:,.0f} B/token (final norm, head input); "
            f"the loss saves {first.loss_bytes:,.0f} B/token "
            f"({first.loss_bytes / max(r.spec.vocab, 1):.2f} B per vocabulary entry)"
        )
    notes = {m.note for m in r.modes if m.note and m.layer_bytes}
    lines += [f"note: {n}" for n in sorted(notes)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
