"""Rich tables and JSON for people and scripts. Memory always in GB and GiB."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from constraints.memory import TERMS
from constraints.units import GB, GiB, fmt_bytes, fmt_count
from searcher.search.briefs import config_brief
from searcher.terminal import console

if TYPE_CHECKING:
    from searcher.search.levers import AdvisedExplanation


def _gb(x: float) -> str:
    return f"{x / GB:,.2f}"


def _gib(x: float) -> str:
    return f"{x / GiB:,.2f}"


def print_explanation(e: AdvisedExplanation, out: Console | None = None) -> None:
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
    largest = max(TERMS, key=b.term)
    share = 100 * b.term(largest) / max(b.total, 1)
    out.print(
        f"largest term: [bold]{largest}[/] ({fmt_bytes(b.term(largest))}, {share:.0f} % of the peak)"
    )
    if e.levers:
        top = e.levers[0]
        aim = (
            ""
            if top.term == largest
            else f"no lever shrinks the {largest} here; for the {top.term}: "
        )
        out.print(
            f"  lever: {aim}{top.change} ({top.flags}) saves "
            f"{fmt_bytes(top.saves)}{', then it fits' if top.fits and not v.fits else ''}"
        )
        for lv in e.levers[1:4]:
            out.print(
                f"  also: {lv.change} ({lv.flags}) saves {fmt_bytes(lv.saves)}{' → fits' if lv.fits and not v.fits else ''}"
            )
    for note in e.notes:
        out.print(f"[dim]note: {note}[/]")


def _bar(fraction: float, width: int = 12) -> str:
    filled = max(0, min(width, round(fraction * width)))
    colour = "green" if fraction <= 0.9 else "yellow" if fraction <= 1.0 else "red"
    return f"[{colour}]{'█' * filled}[/]{'░' * (width - filled)}"


def _money(x: float | None) -> str:
    return "—" if x is None else f"${x:,.3f}"


def print_search(
    result: Any, top: int, tokens: float | None = None, out: Console | None = None
) -> None:
    from constraints.params import total_params
    from searcher.search.levers import advise

    out = out or console()
    p = result.problem
    out.print(
        f"[bold]{p.model.name}[/] ({fmt_count(total_params(p.model))} params) "
        f"on up to {p.max_gpus} × {p.gpu.name} · target batch {p.target_batch} × {p.seq_len} tokens · "
        f"{result.evaluated:,} configurations evaluated ({result.strategy}), {result.feasible:,} fit, "
        f"{len(result.front)} on the Pareto front, {result.seconds:.2f} s"
    )
    if result.front:
        cap = p.gpu.memory_bytes
        order = (
            "fastest first" if getattr(result, "rank_by", "cost") == "speed" else "cheapest first"
        )
        table = Table(title=f"Pareto-optimal configurations, {order}", title_justify="left")
        cols = [
            "#",
            "method",
            "precision · optimizer",
            "memory levers",
            "mb×acc×dp",
            "tp·pp",
            "peak GiB",
            "",
            "tokens/s",
            "step s",
            "$/1M tok",
            "fid.",
        ]
        if tokens:
            cols += ["hours", "cost"]
        left = {"method", "precision · optimizer", "memory levers", "", "mb×acc×dp", "tp·pp"}
        for c in cols:
            table.add_column(c, justify="left" if c in left else "right", no_wrap=True)
        for rank, m in enumerate(result.front[:top], start=1):
            c = m.config
            row = [
                str(rank),
                method_brief(c),
                f"{precision_brief(c)} · {OPT_SHORT.get(c.optimizer, c.optimizer)}",
                levers_brief(c),
                f"{c.micro_batch}×{c.grad_accum}×{c.dp}",
                f"{c.tp}·{c.pp}",
                f"{m.needed / GiB:.1f}",
                _bar(m.needed / cap, 8),
                f"{m.tokens_per_s:,.0f}" if m.tokens_per_s else "—",
                f"{m.step_time_s:.2f}" if m.tokens_per_s else "—",
                _money(m.usd_per_mtok),
                f"{m.fidelity:.2f}",
            ]
            if tokens:
                hours, usd = (
                    m.budget(tokens, p.gpu.usd_per_gpu_hour)
                    if m.tokens_per_s
                    else (float("nan"), None)
                )
                row += [f"{hours:,.1f}", "—" if usd is None else f"${usd:,.0f}"]
            table.add_row(*row)
        out.print(table)
        if len(result.front) > top:
            out.print(
                f"[dim]{len(result.front) - top} more on the front: --top {len(result.front)}, --json or --csv[/]"
            )
    for r in result.rejected:
        out.print(f"[red]✗[/] {r.reason}")
    if not result.front:
        out.print(
            "[red]nothing fits[/]: see the reasons above; more GPUs, a larger card, or a shorter sequence"
        )
        return
    best = result.front[0]
    out.print()
    out.print("[bold]top pick[/]:")
    print_explanation(advise(p.model, best.config, p.gpu, p.headroom), out)


def precision_brief(c: Any) -> str:
    """'bf16+master', 'fp16', 'fp32+autocast': the weight dtype, as the recipe resolves it."""
    weight, _grad, master, state, compute, autocast = c.resolved_recipe()
    text = weight
    if master:
        text += "+master"
    if autocast:
        text += f"→{compute}"
    if state is None and weight != "fp32" and "8bit" not in c.optimizer:
        text += f" ({weight} states)"
    return text


OPT_SHORT = {
    "adamw": "AdamW",
    "adamw-8bit": "AdamW8bit",
    "paged-adamw-8bit": "PagedAdamW8bit",
    "sgd": "SGD",
    "sgd-momentum": "SGD+mom",
    "adafactor": "Adafactor",
    "lion": "Lion",
}


def method_brief(c: Any) -> str:
    if c.method == "full":
        return "full"
    return f"{c.method} r{c.lora_rank}" + (f" {c.quant}" if c.quant != "none" else "")


def levers_brief(c: Any) -> str:
    parts = []
    if c.checkpointing != "none":
        parts.append("ckpt" if c.checkpointing == "full" else "sel-ckpt")
    if c.loss != "standard":
        parts.append(f"{c.loss}CE")
    if c.zero:
        parts.append(f"Z{c.zero}")
    if c.offload != "none":
        parts.append(f"off:{'opt' if c.offload == 'optimizer' else 'all'}")
    if c.optimizer_in_backward:
        parts.append("opt-in-bwd")
    return " ".join(parts) or "—"


def write_front_csv(result: Any, path: str, tokens: float | None = None) -> None:
    import pandas as pd

    from searcher.search.views import member_json

    rows = []
    for m in result.front:
        j = member_json(m, result.problem, tokens)
        flat = {
            **{f"config.{k}": v for k, v in j["config"].items()},
            **{f"memory_bytes.{k}": v for k, v in j["memory_bytes"].items()},
        }
        for k in ("needed_bytes", "tokens_per_s", "step_time_s", "usd_per_mtok", "mfu", "fidelity"):
            flat[k] = j[k]
        if "budget" in j:
            flat.update({f"budget.{k}": v for k, v in j["budget"].items()})
        rows.append(flat)
    from searcher.files import atomic_write_text

    atomic_write_text(path, pd.DataFrame(rows).to_csv(index=False))


def print_fits(rows: list[Any], gpu: Any, seq_len: int, out: Console | None = None) -> None:
    from constraints.breakdown import usable_bytes
    from constraints.units import fmt_count

    out = out or console()
    usable = usable_bytes(gpu)[0]
    table = Table(
        title=f"what fits on {gpu.name} ({usable / GiB:.1f} GiB usable), {seq_len}-token sequences",
        title_justify="left",
        show_lines=True,
    )
    for col in ("model", "params", "inference", "QLoRA", "LoRA", "full fine-tune"):
        table.add_column(col, justify="right" if col == "params" else "left", overflow="fold")
    for r in rows:
        cells = [
            f"[green]✓[/] {c.summary}" if c.ok else f"[red]✗[/] {c.summary}"
            for c in (r.inference, r.qlora, r.lora, r.full)
        ]
        table.add_row(r.model, fmt_count(r.params), *cells)
    out.print(table)
