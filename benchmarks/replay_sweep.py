"""The allocator sweep: the caching allocator replayed over traced steps, for the analytic slack.

    PYTHONPATH=. python benchmarks/replay_sweep.py run --rows 200 [--shard 0/2] [--seed 34]
    PYTHONPATH=. python benchmarks/replay_sweep.py report     # docs/replay_sweep.md + summary

``run`` draws single-GPU configurations as the trace sweep does (benchmarks/trace_sweep.py, its
families and knobs), restricted to models whose every layer traces in well under a minute, traces
both steps for real at full depth (``searcher.truth.step_trace._run``, ``seeded=False``) and
replays the recorded allocations and frees (``constraints.allocator_replay``) twice: default
segments and ``expandable_segments:True``. One CSV row per configuration goes to
``benchmarks/results/replay_sweep[.N].csv`` (resumable). The analytic side is recomputed by
``report``, so a physics change is re-judged against the stored replays without tracing again.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_sweep import _key, _model, csv_rows, draw_configs

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
RESULTS = RESULTS_DIR / "replay_sweep.csv"
#: models whose full-depth trace is quick (≤ 28 layers, dense)
MODELS = frozenset(
    {
        "llama-3.2-1b",
        "qwen2.5-0.5b",
        "qwen2.5-1.5b",
        "gemma-2-2b",
        "phi-3-mini-4k",
        "gpt2",
        "gpt2-medium",
        "opt-1.3b",
    }
)
FIELDS = (
    "key",
    "family",
    "model",
    "config",
    "traced_bytes",
    "allocated",
    "reserved",
    "reserved_expandable",
    "segments",
    "events",
    "wall_s",
    "error",
)


def _files() -> list[Path]:
    return sorted(RESULTS_DIR.glob("replay_sweep*.csv"))


def stored_rows() -> list[dict[str, Any]]:
    return csv_rows(_files())


def replay_row(model: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Trace ``cfg`` on ``model`` at full depth and replay its allocations both ways."""
    from constraints.allocator_replay import AllocatorSettings, replay
    from constraints.config import TrainConfig
    from searcher.truth.step_trace import _run

    hf, _spec = _model(model)
    raw = _run(hf, TrainConfig(**cfg), "fused", 2, seeded=False, keep_events=True)
    events = raw.events or []
    default = replay(events, AllocatorSettings())
    expandable = replay(events, AllocatorSettings(expandable_segments=True))
    return {
        "traced_bytes": max(p for p, _m, _c in raw.segments.values()),
        "allocated": default.peak_allocated,
        "reserved": default.peak_reserved,
        "reserved_expandable": expandable.peak_reserved,
        "segments": len(default.segments_at_peak),
        "events": len(events),
    }


def run(rows: int, seed: int, shard: tuple[int, int], budget_s: float) -> int:
    """Replay this shard's rows not yet stored, until ``budget_s`` seconds have passed."""
    from searcher.truth.hf_build import quiet_transformers

    quiet_transformers()
    start = time.perf_counter()
    done = {r["key"] for r in stored_rows()}
    index, count = shard
    path = RESULTS if index == 0 else RESULTS_DIR / f"replay_sweep.{index}.csv"
    new = not path.exists()
    drawn = [
        c
        for c in draw_configs(rows * 4, seed)
        if c[1] in MODELS and not (c[1].startswith("gemma-2") and c[2]["attention"] != "eager")
    ][:rows]
    with path.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for i, (family, model, cfg) in enumerate(drawn):
            key = _key(model, cfg)
            if i % count != index or key in done:
                continue
            if time.perf_counter() - start > budget_s:
                break
            t0 = time.perf_counter()
            row: dict[str, Any] = {"key": key, "family": family, "model": model}
            row["config"] = json.dumps(cfg, sort_keys=True)
            try:
                row.update(replay_row(model, cfg), error="")
            except Exception as e:  # a row per failure: the sweep goes on
                row["error"] = repr(e)[:300]
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            w.writerow(row)
            f.flush()
            print(
                f"{i:4d} {model:14s} {row['config']} {row.get('reserved', '')} {row['error'][:60]}"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--rows", type=int, default=200)
    r.add_argument("--seed", type=int, default=34)
    r.add_argument("--shard", default="0/1")
    r.add_argument("--budget-s", type=float, default=240.0, help="stop starting rows after this")
    rep = sub.add_parser("report")
    rep.add_argument(
        "--write-table",
        action="store_true",
        help="also write constraints/data/allocator_slack.json",
    )
    a = p.parse_args(argv)
    if a.cmd == "run":
        index, count = (int(x) for x in a.shard.split("/"))
        return run(a.rows, a.seed, (index, count), a.budget_s)
    from replay_fit import report  # type: ignore[import-not-found]

    return report(a.write_table)


if __name__ == "__main__":
    raise SystemExit(main())
