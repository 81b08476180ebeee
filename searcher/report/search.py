"""Page data for ``fitplan search --report`` (the Pareto front) and ``fitplan explain --report``
(one configuration): x = peak memory per GPU, y = $ per million tokens (GPU-seconds where the
card has no price), bars = the five memory terms against capacity − headroom."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from constraints.breakdown import MemoryBreakdown, usable_bytes
from constraints.memory import TERMS
from constraints.units import GiB
from searcher.search.briefs import knobs_brief
from searcher.search.levers import AdvisedExplanation
from searcher.search.run import FAMILY_NAMES, SearchResult

#: Flags of the search command that do not belong in the emit command shown for a member.
DROPPED_FLAGS = {"--report": 1, "--force": 0, "--json": 0, "--csv": 1, "--emit": 1, "--out": 1}
DROPPED_FLAGS |= {"--pick": 1, "--top": 1}


def _terms(b: MemoryBreakdown) -> dict[str, int]:
    return {t: b.term(t) for t in TERMS}


def _base_command(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = 0
    for a in argv:
        if skip:
            skip -= 1
            continue
        key = a.split("=", 1)[0]
        if key in DROPPED_FLAGS:
            skip = DROPPED_FLAGS[key] if "=" not in a else 0
            continue
        out.append(a)
    return out


def _usable_line(gpu: Any, headroom: float) -> int:
    usable, context, _ = usable_bytes(gpu, headroom)
    return usable + context  # the bars include the CUDA context (overhead)


def search_page_data(result: SearchResult, argv: Sequence[str]) -> dict[str, Any]:
    p = result.problem
    priced = bool(p.gpu.usd_per_gpu_hour)
    base = shlex.join(["fitplan", *_base_command(argv)])
    members = []
    marks = result.stack_missing or tuple(() for _ in result.front)
    for i, m in enumerate(result.front):
        cfg = m.config
        needs = ", ".join(marks[i])  # outside the stack: the table's needs column
        cost = m.usd_per_mtok if priced and m.usd_per_mtok else m.gpus * 1e6 / m.tokens_per_s
        label = f"{FAMILY_NAMES[cfg.method]}: {knobs_brief(cfg)}, {m.gpus} GPU{'s' * (m.gpus > 1)}"
        members.append(
            {
                "label": label,
                "method": cfg.method,
                "x": m.memory.total / GiB,
                "y": cost,
                "y_text": f"${cost:,.3f}" if priced else f"{cost:,.0f} GPU-s",
                "hover": (
                    f"#{i + 1} {label}<br>{m.memory.total / GiB:.2f} GiB · {m.tokens_per_s:,.0f} tokens/s"
                    f" · MFU {m.mfu:.0%}" + (f"<br>✗ needs {needs}" if needs else "")
                ),
                "needs": list(marks[i]),
                "terms": _terms(m.memory),
                "command": f"{base} --pick {i + 1} --emit hf --out run-{i + 1}/",
                "details": {
                    "tokens/s (all GPUs)": f"{m.tokens_per_s:,.0f}",
                    "step time": f"{m.step_time_s:.3f} s",
                    "MFU": f"{m.mfu:.1%}",
                    "peak phase": m.memory.phase,
                    "needs (outside the stack)": needs or "nothing",
                },
            }
        )
    rejected = [f"{FAMILY_NAMES.get(r.family, r.family)}: {r.reason}" for r in result.rejected]
    return {
        "title": f"fitplan search: {p.model.name} on {p.gpu.name}",
        "subtitle": (
            f"{len(result.front)} Pareto-optimal configurations of {result.evaluated:,} "
            f"evaluated ({result.feasible:,} fit); target batch {p.target_batch} × "
            f"{p.seq_len} tokens, up to {p.max_gpus} GPU{'s' * (p.max_gpus > 1)}"
        ),
        "facts": {
            "command": base,
            "GPU memory": f"{p.gpu.memory_bytes / GiB:.1f} GiB",
            **({} if p.stack is None else {"stack": ", ".join(sorted(p.stack)) or "none"}),
        },
        "members": members,
        "scatter_title": "Pareto front: cost against peak memory",
        "x_title": "peak memory per GPU (GiB)",
        "y_title": "$ per million tokens" if priced else "GPU-seconds per million tokens",
        "y_log": True,
        "usable_bytes": _usable_line(p.gpu, p.headroom),
        "usable_label": f"capacity − {p.headroom:.0%} headroom",
        "notes": [f"rejected: {r}" for r in rejected],
    }


def explain_page_data(
    e: AdvisedExplanation, argv: Sequence[str], headroom: float
) -> dict[str, Any]:
    cfg = e.config
    base = shlex.join(["fitplan", *_base_command(argv)])
    b = e.breakdown
    label = f"{FAMILY_NAMES[cfg.method]}: {knobs_brief(cfg)}"
    members = [
        {
            "label": label,
            "method": cfg.method,
            "x": b.total / GiB,
            "y": b.total / GiB,
            "y_text": f"{b.total / GiB:.2f} GiB",
            "hover": f"{label}<br>{b.total / GiB:.2f} GiB ({'fits' if e.verdict.fits else 'does not fit'})",
            "terms": _terms(b),
            "command": base,
            "details": {"peak phase": b.phase, "fits": "yes" if e.verdict.fits else "no"},
        }
    ]
    for lv in e.levers:
        members.append(
            {
                "label": f"lever: {lv.change}",
                "method": cfg.method if lv.fits else "does not fit",
                "x": lv.total / GiB,
                "y": lv.total / GiB,
                "y_text": f"{lv.total / GiB:.2f} GiB",
                "hover": f"{lv.change}<br>saves {lv.saves / GiB:.2f} GiB on {lv.term}",
                "terms": {"total": lv.total},
                "command": f"{base} {lv.flags}",
                "details": {"saves": f"{lv.saves / GiB:.2f} GiB ({lv.term})"},
            }
        )
    return {
        "title": f"fitplan explain: {e.model.name} on {e.gpu.name}",
        "subtitle": f"{label}: {b.total / GiB:.2f} GiB per GPU at the peak ({b.phase})",
        "facts": {"command": base, "fits": "yes" if e.verdict.fits else "no"},
        "members": members,
        "scatter_title": "This configuration and its levers: peak memory",
        "x_title": "peak memory per GPU (GiB)",
        "y_title": "peak memory per GPU (GiB)",
        "y_log": False,
        "usable_bytes": _usable_line(e.gpu, headroom),
        "usable_label": f"capacity − {headroom:.0%} headroom",
        "notes": list(e.notes),
    }
