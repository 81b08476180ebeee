"""Rich tables and JSON for people and scripts. Memory always in GB and GiB."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from constraints.breakdown import Explanation, MemoryBreakdown
from constraints.memory import PART_DOC, TERMS
from constraints.units import GB, GiB, fmt_bytes, fmt_count


def console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=120)
    return c


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


def explanation_json(e: Explanation) -> dict[str, Any]:
    return {
        "model": {"id": e.model.id, "name": e.model.name, "family": e.model.family},
        "params": {"total": e.params_total, "trainable": e.params_trainable},
        "config": e.config.model_dump(),
        "memory_bytes": breakdown_json(e.breakdown),
        "peak_phase": e.breakdown.phase,
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
    }


def _gb(x: float) -> str:
    return f"{x / GB:,.2f}"


def _gib(x: float) -> str:
    return f"{x / GiB:,.2f}"


def config_brief(cfg: Any) -> str:
    parts = [cfg.method]
    if cfg.method != "full":
        parts.append(f"r={cfg.lora_rank} {cfg.lora_targets}")
    if cfg.quant != "none":
        parts.append(cfg.quant)
    parts += [
        cfg.recipe,
        cfg.optimizer,
        f"mb={cfg.micro_batch}×{cfg.seq_len}",
        f"accum={cfg.grad_accum}",
    ]
    if cfg.checkpointing != "none":
        parts.append(f"ckpt={cfg.checkpointing}")
    parts.append(cfg.attention)
    if cfg.loss != "standard":
        parts.append(f"{cfg.loss}-CE")
    if cfg.zero:
        parts.append(f"zero{cfg.zero}")
    if cfg.offload != "none":
        parts.append(f"offload={cfg.offload}")
    if cfg.tp > 1 or cfg.pp > 1 or cfg.dp > 1:
        parts.append(f"tp{cfg.tp}·pp{cfg.pp}·dp{cfg.dp}")
    return " ".join(parts)


def print_explanation(e: Explanation, out: Console | None = None) -> None:
    out = out or console()
    b, v = e.breakdown, e.verdict
    out.print(
        f"[bold]{e.model.name}[/] · {fmt_count(e.params_total)} parameters "
        f"({e.params_total:,}), {fmt_count(e.params_trainable)} trainable · {e.gpu.name}"
    )
    out.print(f"config: {config_brief(e.config)}")
    table = Table(title=f"memory per GPU at the peak ({b.phase})", title_justify="left")
    for col, justify in (
        ("term", "left"),
        ("bytes", "right"),
        ("GB", "right"),
        ("GiB", "right"),
        ("% total", "right"),
        ("B/param", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    params = max(e.params_total, 1)
    for term, parts in TERMS.items():
        value = b.term(term)
        table.add_row(
            f"[bold]{term}[/]",
            f"{value:,}",
            _gb(value),
            _gib(value),
            f"{100 * value / max(b.total, 1):.1f}",
            f"{value / params:.2f}",
        )
        for part in parts:
            pv = b.parts[part]
            if pv and (len([p for p in parts if b.parts[p]]) > 1 or part != term):
                table.add_row(
                    f"  {part.replace('_', ' ')}",
                    f"{pv:,}",
                    _gb(pv),
                    _gib(pv),
                    f"{100 * pv / max(b.total, 1):.1f}",
                    f"{pv / params:.2f}",
                )
    table.add_section()
    table.add_row(
        "[bold]total[/]",
        f"{b.total:,}",
        _gb(b.total),
        _gib(b.total),
        "100.0",
        f"{b.total / params:.2f}",
    )
    out.print(table)
    out.print(
        f"static (weights + gradients + optimizer, per GPU): {fmt_bytes(b.static)}; "
        f"peak allocated {fmt_bytes(b.allocated)}; peak reserved {fmt_bytes(b.reserved)}"
    )
    if b.paged_optimizer:
        out.print(
            f"paged optimizer states (unified memory, beside the total): {fmt_bytes(b.paged_optimizer)}"
        )
    if b.cpu_bytes:
        out.print(f"CPU RAM per GPU rank (offload / paged): {fmt_bytes(b.cpu_bytes)}")
    out.print(
        f"usable on {e.gpu.name}: {fmt_bytes(v.usable)} = capacity {fmt_bytes(v.capacity)} − CUDA context "
        f"{fmt_bytes(v.cuda_context)} − headroom {fmt_bytes(v.headroom)}"
    )
    if v.fits:
        out.print(
            f"[green]fits[/]: needs {fmt_bytes(v.needed)} (peak reserved), {fmt_bytes(v.margin)} to spare"
        )
    else:
        for problem in v.problems:
            out.print(f"[red]cannot run[/]: {problem}")
        if v.margin < 0:
            out.print(
                f"[red]does not fit[/]: needs {fmt_bytes(v.needed)}, {fmt_bytes(-v.margin)} over"
            )
    if e.levers:
        top = e.levers[0]
        out.print(
            f"largest term: [bold]{top.term}[/] → lever: {top.change} ({top.flags}) saves "
            f"{fmt_bytes(top.saves)}{', then it fits' if top.fits and not v.fits else ''}"
        )
        for lv in e.levers[1:4]:
            out.print(
                f"  also: {lv.change} ({lv.flags}) saves {fmt_bytes(lv.saves)}{' → fits' if lv.fits and not v.fits else ''}"
            )
    for note in e.notes:
        out.print(f"[dim]note: {note}[/]")


def part_doc(name: str) -> str:
    return PART_DOC.get(name, name)
