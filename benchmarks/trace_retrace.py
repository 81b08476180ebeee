"""Re-trace stored trace-sweep rows in place after a tracer fix, keeping their keys.

    PYTHONPATH=. python benchmarks/trace_retrace.py --worst 40
    PYTHONPATH=. python benchmarks/trace_retrace.py --where recipe=bf16-master,method=full
    PYTHONPATH=. python benchmarks/trace_retrace.py --sample 20 --seed 3     # a control sample

``trace_sweep.py drop`` forgets whole (model prefix, method) slices; this re-traces chosen rows:
the ``--worst`` N by |analytic / traced − 1| under the current analytic model, the rows matching
``--where`` (config knobs, ``family`` or ``model``; ``;`` between alternatives), and ``--sample`` N others drawn at random.
Each row's traced bytes, moment and composition are replaced in the CSV that holds it, one row
at a time (an interrupted run keeps what it re-traced), and old → new is appended to
``benchmarks/results/trace_retrace_log.jsonl`` (the record of what a tracer fix moved).
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import json
import random
import time
from pathlib import Path
from typing import Any

from benchmarks import trace_sweep as ts

LOG = ts.RESULTS_DIR / "trace_retrace_log.jsonl"
LOCK = ts.RESULTS_DIR / ".trace_retrace.lock"


def _matches(row: dict[str, Any], where: dict[str, str]) -> bool:
    cfg = json.loads(row["config"])
    for k, v in where.items():
        have = row[k] if k in ("family", "model") else cfg.get(k)
        if str(have) != v:
            return False
    return True


def select(worst: int, where: list[dict[str, str]], sample: int, seed: int) -> list[str]:
    """Keys of the stored rows to re-trace, worst first, then the matches, then the sample."""
    rows = [r for r in ts._all_rows() if r["traced_bytes"]]
    keys: list[str] = []
    if worst:
        errors = ts.analytic_errors(rows)
        keys += [r["key"] for r in sorted(errors, key=lambda r: -abs(r["error"]))[:worst]]
    for alternative in where:
        keys += [r["key"] for r in rows if _matches(r, alternative) and r["key"] not in keys]
    if sample:
        rest = [r["key"] for r in rows if r["key"] not in keys]
        keys += random.Random(seed).sample(rest, min(sample, len(rest)))
    return keys


def retrace(keys: list[str]) -> int:
    from constraints.config import TrainConfig
    from searcher.truth.hf_build import quiet_transformers
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    where_is = {}
    for path in ts._shard_files():
        with path.open(encoding="utf-8") as f:
            for r in csv.DictReader(f):
                where_is[r["key"]] = path
    for n, key in enumerate(keys):
        path = where_is[key]
        with path.open(encoding="utf-8") as f:
            row = next(r for r in csv.DictReader(f) if r["key"] == key)
        cfg = json.loads(row["config"])
        hf, spec = ts._model(row["model"])
        start = time.perf_counter()
        t = trace_step(spec, TrainConfig(**cfg), hf_config_dict=hf)
        old = int(row["traced_bytes"])
        new = {
            "traced_bytes": t.peak_bytes,
            "moment": t.moment,
            "composition": json.dumps(t.composition),
            "wall_s": round(time.perf_counter() - start, 2),
        }
        with LOCK.open("w") as lock:  # runs in parallel share the CSVs: read-modify-write locked
            fcntl.flock(lock, fcntl.LOCK_EX)
            with path.open(encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            next(r for r in rows if r["key"] == key).update(new)
            with path.open("w", newline="", encoding="utf-8") as f:
                w = csv.DictWriter(f, fieldnames=ts.FIELDS)
                w.writeheader()
                w.writerows(rows)
            with LOG.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "old": old, "new": t.peak_bytes}) + "\n")
        change = t.peak_bytes / old - 1
        print(f"{n + 1:3d}/{len(keys)} {row['model']:14s} {old:>15,} → {t.peak_bytes:>15,} "
              f"({change:+.2%}) {row['config']}", flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worst", type=int, default=0, help="the N rows of largest |error|")
    p.add_argument(
        "--where", default="", help="knob=value[,knob=value…][;…]: every row matching one"
    )
    p.add_argument("--sample", type=int, default=0, help="N other rows drawn at random")
    p.add_argument("--keys", type=Path, help="a file of row keys (one JSON string a line)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dry-run", action="store_true", help="list the rows, trace nothing")
    a = p.parse_args(argv)
    where = [dict(kv.split("=", 1) for kv in alt.split(",") if kv) for alt in a.where.split(";")]
    where = [w for w in where if w]
    keys = select(a.worst, where, a.sample, a.seed)
    if a.keys:
        lines = a.keys.read_text(encoding="utf-8").splitlines()
        keys += [k for k in (json.loads(line) for line in lines if line) if k not in keys]
    if a.dry_run:
        print("\n".join(keys))
        return 0
    return retrace(keys)


if __name__ == "__main__":
    raise SystemExit(main())
