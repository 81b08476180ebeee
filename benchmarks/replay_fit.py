"""The analytic allocator slack against the replayed caching allocator (benchmarks/replay_sweep.py).

    PYTHONPATH=. python benchmarks/replay_sweep.py report

For every stored replay the analytic model's step is recomputed as traced (single GPU, PEFT's fp32
adapters, no cuBLAS workspace) and its slack — a fraction of the bytes the step allocates and
frees (``constraints.allocator``) — is compared with the replay's reserved − allocated. The
fraction is fitted per regime (attention kernel, checkpointing, QLoRA; default or expandable
segments) to the replays, and the residuals are written to docs/replay_sweep.md.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_sweep import stored_rows
from trace_sweep import _model

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "replay_sweep.md"
TABLE = ROOT / "constraints" / "data" / "allocator_slack.json"
GRID = np.round(np.arange(0.0, 0.801, 0.005), 3)
#: the flat fractions the table replaced (fitted to 21 and 2 measured rows by tools/calibrate.py)
FLAT = {"reserved": 0.15, "reserved_expandable": 0.16}


def regime(cfg: dict[str, Any]) -> str:
    """The cell a row's slack is fitted in: constraints.allocator's regime of the analytic
    model's own view of the configuration."""
    from constraints.allocator import batch_regime, regime_name
    from constraints.config import TrainConfig
    from constraints.config_batch import ConfigBatch

    flags = batch_regime(ConfigBatch.from_configs([TrainConfig(**cfg)]))
    return regime_name(*(bool(f[0]) for f in flags))


def analytic_side(spec: Any, cfg: dict[str, Any], gpu: Any) -> dict[str, float]:
    """The analytic step as traced: allocated peak (less the workspace), the bytes allocated and
    freed during the step (``constraints.memory.DYNAMIC_PARTS``) and today's slack."""
    from constraints.breakdown import explain
    from constraints.config import TrainConfig
    from constraints.memory import DYNAMIC_PARTS

    as_traced = {**cfg, "adapter_dtype": "fp32"} if cfg["method"] != "full" else dict(cfg)
    as_traced["backend"] = "single"
    b = explain(spec, TrainConfig(**as_traced), gpu).breakdown
    return {
        "allocated": b.allocated - b.parts["workspace"],
        "dynamic": sum(b.parts.get(k, 0) for k in DYNAMIC_PARTS),
        "slack": b.parts["allocator_slack"],
    }


def joined() -> list[dict[str, Any]]:
    from constraints.gpus import resolve_gpu

    gpu = resolve_gpu("h100")
    specs: dict[str, Any] = {}
    out = []
    for r in stored_rows():
        if r["error"]:
            continue
        cfg = json.loads(r["config"])
        if r["model"] not in specs:
            specs[r["model"]] = _model(r["model"])[1]
        out.append(
            {
                "model": r["model"],
                "cfg": cfg,
                "regime": regime(cfg),
                "allocated": int(r["allocated"]),
                "reserved": int(r["reserved"]),
                "reserved_expandable": int(r["reserved_expandable"]),
                **{f"a_{k}": v for k, v in analytic_side(specs[r["model"]], cfg, gpu).items()},
            }
        )
    return out


def _errors(rows: list[dict[str, Any]], fraction: float, column: str) -> np.ndarray:
    """Relative error of reserved when the slack is ``fraction`` × the analytic dynamic bytes,
    on the replay's own allocated peak (the slack alone is judged)."""
    allocated = np.array([r["allocated"] for r in rows], dtype=float)
    dynamic = np.array([r["a_dynamic"] for r in rows], dtype=float)
    reserved = np.array([r[column] for r in rows], dtype=float)
    return (allocated + fraction * dynamic) / reserved - 1.0


def fit(rows: list[dict[str, Any]], column: str) -> float:
    """The fraction with the least median absolute error of reserved (grid step 0.005)."""
    scores = [float(np.median(np.abs(_errors(rows, f, column)))) for f in GRID]
    return float(GRID[int(np.argmin(scores))])


def _summary(errors: np.ndarray) -> tuple[float, float]:
    worst = float(errors[np.argmax(np.abs(errors))]) if len(errors) else 0.0
    return float(np.median(np.abs(errors))) if len(errors) else 0.0, worst


def report(write_table: bool = False) -> int:
    rows = joined()
    table: dict[str, dict[str, float]] = {}
    lines = [
        "# The analytic allocator slack against the replayed caching allocator",
        "",
        f"{len(rows)} single-GPU steps traced at every layer on fake tensors (two real steps; "
        "benchmarks/replay_sweep.py) and replayed through constraints/allocator_replay.py. "
        "Error = (the replay's allocated peak + the analytic slack) / the replay's reserved "
        "peak − 1: the slack model alone is judged. Fitted fraction: of the bytes the analytic "
        "step allocates and frees (constraints.memory.DYNAMIC_PARTS), least median |error|, "
        "per regime; leave-one-out: each row predicted by the fraction fitted without it.",
        "",
    ]
    for column, label in (("reserved", "default segments"), ("reserved_expandable", "expandable")):
        by: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            by[r["regime"]].append(r)
        table[column] = {}
        lines += [
            f"## {label}",
            "",
            "| regime | rows | replay slack, median % of allocated | fitted fraction | "
            "median / worst error | leave-one-out median / worst | flat fraction (before) median / worst |",
            "|---|---|---|---|---|---|---|",
        ]
        every: dict[str, list[np.ndarray]] = defaultdict(list)
        for name in sorted(by):
            cell = by[name]
            f = fit(cell, column)
            table[column][name] = f
            med, worst = _summary(_errors(cell, f, column))
            loo = np.array(
                [
                    _errors(
                        [r], fit(cell[:i] + cell[i + 1 :], column) if len(cell) > 1 else f, column
                    )[0]
                    for i, r in enumerate(cell)
                ]
            )
            lmed, lworst = _summary(loo)
            tmed, tworst = _summary(_errors(cell, FLAT[column], column))
            every["fit"].append(_errors(cell, f, column))
            every["loo"].append(loo)
            every["flat"].append(_errors(cell, FLAT[column], column))
            share = statistics.median((r[column] - r["allocated"]) / r["allocated"] for r in cell)
            lines.append(
                f"| {name} | {len(cell)} | {share:.1%} | {f:.3f} | {med:.1%} / {worst:+.1%} | "
                f"{lmed:.1%} / {lworst:+.1%} | {tmed:.1%} / {tworst:+.1%} |"
            )
        (fm, fw), (lm, lw), (tm, tw) = (
            _summary(np.concatenate(every[k])) for k in ("fit", "loo", "flat")
        )
        lines += [
            f"| **all** | {len(rows)} | | | {fm:.1%} / {fw:+.1%} | {lm:.1%} / {lw:+.1%} | "
            f"{tm:.1%} / {tw:+.1%} |",
            "",
        ]
    DOC.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if write_table:
        from constraints.allocator import regime_names

        for column in table:
            for name in regime_names():
                # no row: an fp32 QLoRA step does not run (bitsandbytes computes in 16 bits);
                # the mixed cell stands in
                table[column].setdefault(
                    name, table[column].get(name.replace("fp32", "mixed"), 0.15)
                )
            table[column] = dict(sorted(table[column].items()))
        data = {
            "source": "benchmarks/replay_fit.py: fitted to the caching-allocator replays of "
            f"benchmarks/results/replay_sweep*.csv ({len(rows)} traced steps); residuals in "
            "docs/replay_sweep.md",
            "default": table["reserved"],
            "expandable": table["reserved_expandable"],
        }
        TABLE.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
