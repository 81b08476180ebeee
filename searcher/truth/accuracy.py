"""``fitplan accuracy``: predictions against measurements, summarised and printed.

The rows are mapped to cases by :mod:`searcher.truth.memory_rows` and
:mod:`searcher.truth.throughput_rows` (formats in :mod:`searcher.truth.cases`) and predicted by
:mod:`searcher.truth.predict`; this module summarises the errors (median and worst, per source)
and writes the report (text or ``--json``). The calibration (``tools/calibrate.py``) reads the same
reports.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.units import GiB
from searcher.truth.cases import (
    MEMORY_CSV,
    THROUGHPUT_CSV,
    MemoryCase,
    OomCase,
    ThroughputCase,
    read_rows,
)
from searcher.truth.memory_rows import load_memory_cases, oom_cases
from searcher.truth.predict import (
    MemoryResult,
    ThroughputResult,
    predict_memory,
    predict_throughput,
)
from searcher.truth.regimes import regime_scores
from searcher.truth.throughput_rows import load_throughput_cases


@frozen
class Summary:
    used: int
    excluded: int
    median_abs_error: float
    worst_abs_error: float
    worst_row: str
    by_source: dict[str, tuple[int, float, float]] = field(default_factory=dict)


def summarize(errors: Sequence[tuple[str, str, float]], excluded: int) -> Summary:
    """(row id, source, signed error) → median and worst absolute error, per source too."""
    import numpy as np

    if not errors:
        return Summary(0, excluded, math.nan, math.nan, "")
    abs_err = np.abs([e for _, _, e in errors])
    worst = int(np.argmax(abs_err))
    by: dict[str, list[float]] = {}
    for _, src, e in errors:
        by.setdefault(src, []).append(abs(e))
    return Summary(
        used=len(errors),
        excluded=excluded,
        median_abs_error=float(np.median(abs_err)),
        worst_abs_error=float(abs_err[worst]),
        worst_row=errors[worst][0],
        by_source={
            s: (len(v), float(np.median(v)), float(np.max(v))) for s, v in sorted(by.items())
        },
    )


def memory_report(
    paths: Sequence[str | Path] | None = None,
) -> tuple[list[MemoryResult], list[MemoryCase], Summary]:
    cases = load_memory_cases(paths)
    results: list[MemoryResult] = []
    excluded = [c for c in cases if c.excluded is not None]
    for c in cases:
        if c.excluded is None:
            try:
                results.append(predict_memory(c))
            except FitplanError as err:  # e.g. LoRA targets that match no module
                excluded.append(MemoryCase(c.row_id, c.source, excluded=str(err)))
    summary = summarize([(r.case.row_id, r.case.source, r.error) for r in results], len(excluded))
    return results, excluded, summary


def throughput_report(
    paths: Sequence[str | Path] | None = None,
) -> tuple[list[ThroughputResult], list[ThroughputCase], Summary]:
    cases = load_throughput_cases(paths)
    used = [c for c in cases if c.excluded is None]
    excluded = [c for c in cases if c.excluded is not None]
    results = predict_throughput(used)
    summary = summarize([(r.case.row_id, r.case.source, r.error) for r in results], len(excluded))
    return results, excluded, summary


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _kind_of(path: str | Path) -> str:
    """'memory' or 'throughput', from the CSV header."""
    read_rows(path, ())  # one clear error for a missing or unreadable file
    with Path(path).open(encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    if "peak_memory" in header:
        return "memory"
    if "tokens_per_sec_per_gpu" in header or "tokens_per_sec_total" in header:
        return "throughput"
    raise FitplanError(
        f"{path} is neither a memory CSV (peak_memory column) nor a throughput CSV "
        "(tokens_per_sec_per_gpu column)",
        "see constraints/data/calibration/README.md for the formats",
    )


def accuracy_json(
    mem: tuple[list[MemoryResult], list[MemoryCase], Summary] | None,
    thr: tuple[list[ThroughputResult], list[ThroughputCase], Summary] | None,
    ooms: list[tuple[OomCase, bool]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mem is not None:
        results, excluded, s = mem
        out["memory"] = {
            "summary": vars(s),
            "rows": [
                {
                    "id": r.case.row_id,
                    "source": r.case.source,
                    "metric": r.case.metric,
                    "measured_bytes": r.case.measured_bytes,
                    "predicted_bytes": r.predicted_bytes,
                    "error": r.error,
                    "phase": r.phase,
                    "fits_predicted": r.fits_predicted,
                    "fits_predicted_no_headroom": r.fits_predicted_no_headroom,
                    "assumptions": list(r.case.assumptions),
                }
                for r in results
            ],
            "excluded": [{"id": c.row_id, "reason": c.excluded} for c in excluded],
            "oom_checks": [
                {"id": o.row_id, "what": o.what, "fitplan_says_fits": fits} for o, fits in ooms
            ],
        }
    if thr is not None:
        results_t, excluded_t, st = thr
        out["throughput"] = {
            "summary": vars(st),
            "by_regime": [vars(r) for r in regime_scores(results_t)],
            "rows": [
                {
                    "id": r.case.row_id,
                    "source": r.case.source,
                    "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                    "predicted_tokens_per_s_per_gpu": r.predicted_tokens_per_s_per_gpu,
                    "error": r.error,
                    "assumptions": list(r.case.assumptions),
                }
                for r in results_t
            ],
            "excluded": [{"id": c.row_id, "reason": c.excluded} for c in excluded_t],
        }
    return out


def cmd_accuracy(args: Any) -> int:
    import sys

    from constraints.breakdown import explain

    files = list(args.csv or [])
    mem_paths = [f for f in files if _kind_of(f) == "memory"]
    thr_paths = [f for f in files if f not in mem_paths]
    if not files:
        mem_paths, thr_paths = [str(MEMORY_CSV)], [str(THROUGHPUT_CSV)]
    mem = memory_report(mem_paths) if mem_paths else None
    thr = throughput_report(thr_paths) if thr_paths else None
    ooms = (
        [(o, explain(o.spec, o.config, o.gpu).verdict.fits) for o in oom_cases()]
        if not files
        else []
    )
    if args.json:
        sys.stdout.write(json.dumps(accuracy_json(mem, thr, ooms), indent=2, default=str) + "\n")
        return 0
    lines: list[str] = []
    if mem is not None:
        results, excluded, s = mem
        lines.append(
            "Peak memory: predicted vs measured, on the metric each row reports "
            "(allocated = max_memory_allocated, reserved = max_memory_reserved, nvml = device used)"
        )
        lines.append(
            f"  {'row':16s} {'metric':9s} {'measured GiB':>12s} {'predicted GiB':>13s} "
            f"{'error':>7s}  fits at its GPU (10 % / 0 % headroom)"
        )
        for r in results:
            c = r.case
            verdict = f"{'yes' if r.fits_predicted else 'NO'} / {'yes' if r.fits_predicted_no_headroom else 'NO'}"
            lines.append(
                f"  {c.row_id:16s} {c.metric:9s} {c.measured_bytes / GiB:12.2f} "
                f"{r.predicted_bytes / GiB:13.2f} {r.error:+7.1%}  {verdict}"
            )
        lines.append(_summary_line("memory", s))
        for src, (n, med, worst) in s.by_source.items():
            lines.append(f"    {src}: {n} rows, median {med:.1%}, worst {worst:.1%}")
        ran = len(results)
        said_fit = sum(r.fits_predicted_no_headroom for r in results)
        lines.append(
            f"  fit verdicts: fitplan says {said_fit} of the {ran} measured runs fit their GPU "
            f"(0 % headroom); {sum(r.fits_predicted for r in results)} with the default 10 %"
        )
        for o, fits in ooms:
            lines.append(
                f"  out-of-memory check {o.row_id}: {o.what}: fitplan says "
                f"{'it fits (WRONG)' if fits else 'it does not fit (right)'}"
            )
        if args.excluded:
            lines += [f"  excluded {c.row_id}: {c.excluded}" for c in excluded]
    if thr is not None:
        results_t, excluded_t, st = thr
        lines.append("Throughput: tokens/s per GPU, predicted vs measured")
        shown = results_t if args.all else sorted(results_t, key=lambda r: -abs(r.error))[:10]
        if not args.all and len(results_t) > len(shown):
            lines.append(f"  the {len(shown)} largest errors (--all for every row):")
        for rt in shown:
            ct = rt.case
            assert ct.spec is not None and ct.gpu is not None and ct.config is not None
            lines.append(
                f"  {ct.row_id:8s} {ct.spec.name[:18]:18s} {ct.gpu.id:10s} x{ct.config.gpus:<5d} "
                f"{ct.measured_tokens_per_s_per_gpu:10.0f} "
                f"{rt.predicted_tokens_per_s_per_gpu:10.0f} {rt.error:+7.1%}"
            )
        lines.append(_summary_line("throughput", st))
        for src, (n, med, worst) in st.by_source.items():
            lines.append(f"    {src}: {n} rows, median {med:.1%}, worst {worst:.1%}")
        for rs in regime_scores(results_t):
            lines.append(
                f"    regime {rs.regime}: {rs.rows} rows, median {rs.median_abs_error:.1%}, "
                f"bias {rs.bias:+.1%}"
            )
        if args.excluded:
            lines += [f"  excluded {c.row_id}: {c.excluded}" for c in excluded_t]
    if not args.excluded:
        lines.append("(--excluded lists the rows left out and why)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _summary_line(what: str, s: Summary) -> str:
    if not s.used:
        return f"  {what}: no usable rows ({s.excluded} excluded)"
    return (
        f"  {what}: {s.used} rows used, {s.excluded} excluded; median absolute error "
        f"{s.median_abs_error:.1%}, worst {s.worst_abs_error:.1%} ({s.worst_row})"
    )
