"""The search front as a table: the plan in one cell within 80 columns (default), or every knob
in its own column (``search --wide``); the one-line briefs of a configuration's knobs."""

from __future__ import annotations

from typing import Any

from constraints.units import GiB
from searcher.plain_text import Table
from searcher.search.briefs import recipe_label


def _bar(fraction: float, width: int = 12) -> str:
    filled = max(0, min(width, round(fraction * width)))
    colour = "green" if fraction <= 0.9 else "yellow" if fraction <= 1.0 else "red"
    return f"[{colour}]{'█' * filled}[/]{'░' * (width - filled)}"


def _money(x: float | None) -> str:
    return "—" if x is None else f"${x:,.3f}"


def quality_tiers(front: list[Any]) -> dict[float, tuple[int, str]]:
    """Each fidelity value on the front → (tier, 1 = best; its name): one tier per method name
    (full, lora r128, …, qlora r8 nf4-dq), ordered by the best fidelity it reaches."""
    best: dict[str, float] = {}
    for m in front:
        name = method_brief(m.config)
        best[name] = max(best.get(name, m.fidelity), m.fidelity)
    order = {name: i + 1 for i, name in enumerate(sorted(best, key=lambda n: -best[n]))}
    return {m.fidelity: (order[method_brief(m.config)], method_brief(m.config)) for m in front}


def driver_peak(needed: float, gpu: Any) -> float:
    """The peak nvidia-smi shows (constraints.breakdown.peak_bytes)."""
    from constraints.breakdown import peak_bytes

    return peak_bytes(needed, gpu)


def precision_brief(c: Any) -> str:
    """The recipe named by the dtype the run computes in (searcher.search.briefs.recipe_label)."""
    return recipe_label(c)


def method_brief(c: Any) -> str:
    if c.method == "full":
        return "full"
    return f"{c.method} r{c.lora_rank}" + (f" {c.quant}" if c.quant != "none" else "")


#: the backend as the front's table shows it
BACKEND_SHORT = {"deepspeed": "ds", "single": "1gpu"}


def levers_brief(c: Any) -> str:
    """The memory levers by their flags' names and values (--checkpointing full → ckpt=full)."""
    backend = getattr(c, "backend", None)
    parts = [BACKEND_SHORT.get(backend, backend)] if backend else []
    if c.checkpointing != "none":
        parts.append(f"ckpt={c.checkpointing}")
    if c.loss != "standard":
        parts.append(f"loss={c.loss}")
    if c.zero:
        parts.append(f"zero={c.zero}")
    if c.offload != "none":
        parts.append(f"offload={c.offload}")
    if c.optimizer_in_backward:
        parts.append("optimizer-in-backward")
    return " ".join(parts) or "—"


def _layout(c: Any) -> str:
    layout = f"{c.micro_batch}×{c.grad_accum} on {c.gpus} GPU" + ("s" if c.gpus > 1 else "")
    if c.tp > 1 or c.pp > 1:
        layout += f" (tp {c.tp}, pp {c.pp})"
    return layout


def _pieces(c: Any) -> dict[str, str]:
    """A plan cell's pieces by what they name (the memory levers one by one)."""
    pieces = {"method": method_brief(c), "precision": f"{precision_brief(c)} {c.optimizer}"}
    pieces.update({f"lever {i}": lever for i, lever in enumerate(levers_brief(c).split())})
    pieces["layout"] = _layout(c)
    return pieces


def alternative_brief(member: Any, alternative: Any) -> str:
    """What an alternative of a front member changes, in the plan cell's words (the knobs the
    cell does not show, as field=value, where it changes none of those)."""
    mine, theirs = _pieces(member), _pieces(alternative)
    same_adapter = (member.method, member.lora_rank) == (alternative.method, alternative.lora_rank)
    if same_adapter and member.quant != alternative.quant:
        theirs["method"] = alternative.quant
    levers = [v for k, v in theirs.items() if k.startswith("lever") and v not in mine.values()]
    levers += [
        f"no {v}" for k, v in mine.items() if k.startswith("lever") and v not in theirs.values()
    ]
    parts = [theirs[k] for k in ("method", "precision") if theirs[k] != mine[k]] + levers
    parts += [theirs["layout"]] if theirs["layout"] != mine["layout"] else []
    if not parts:
        old, new = member.model_dump(), alternative.model_dump()
        parts = [f"{k}={v}" for k, v in new.items() if old[k] != v]
    return " ".join(parts)


def alternatives_note(memory_step: float) -> str:
    """The legend of the alternatives a plan cell lists (``memory_step``: bytes per step of the
    front's memory objective)."""
    from searcher.search.alternatives import KEPT
    from searcher.search.evaluate import COST_RESOLUTION

    return (
        "≈: plans the front counts as this one (the same quality, cost in the same "
        f"{COST_RESOLUTION:.0%} step, peak in the same {memory_step / GiB:.2f} GiB step), ranked "
        f"after it by speed, and what each changes (--json: up to {KEPT} a member)"
    )


def alternatives_brief(member: Any, shown: int = 2) -> str:
    """``≈ nf4 | 2×16 on 1 GPU``: the member's alternatives, the first ``shown`` of them."""
    briefs = [alternative_brief(member.config, a) for a in member.alternatives]
    if not briefs:
        return ""
    more = f" +{len(briefs) - shown}" if len(briefs) > shown else ""
    return "≈ " + " | ".join(briefs[:shown]) + more


def shown_members(front: list[Any], top: int, pick: int) -> list[tuple[int, Any]]:
    """(rank, member) of the rows a front table draws: the first ``top``, and the pick after a
    (rank, None) gap row where it lies beyond them (the plan explained below is always in the
    table)."""
    rows: list[tuple[int, Any]] = list(enumerate(front[:top], start=1))
    if top < pick <= len(front):
        if pick > top + 1:
            rows.append((0, None))
        rows.append((pick, front[pick - 1]))
    return rows


#: the width ``search --wide`` draws its table at, whatever the terminal
WIDE_COLUMNS = 400


def _budget_cells(m: Any, tokens: float, p: Any) -> list[str]:
    hours, usd = (
        m.budget(tokens, p.gpu.usd_per_gpu_hour) if m.tokens_per_s else (float("nan"), None)
    )
    return [f"{hours:,.1f}", "—" if usd is None else f"${usd:,.0f}"]


def narrow_front(result, top, tokens, pick, room, tiers, marks, order) -> Table:
    """The front within 80 columns: rank, the plan in one cell (wrapped, never cut; what it needs
    beyond the stack at its end), the peak and its share of the room (capacity less headroom),
    speed, price."""
    p = result.problem
    table = Table(title=f"Pareto-optimal configurations, {order}", title_justify="left")
    cols = ["#", "plan", "GiB", "% use", "tok/s", "$/Mtok"]
    cols += ["hours", "cost"] if tokens else []
    for c in cols:
        table.add_column(c, justify="left" if c == "plan" else "right", no_wrap=c != "plan")
    for rank, m in shown_members(result.front, top, pick):
        if m is None:
            table.add_row("…", *[""] * (len(cols) - 1))
            continue
        c = m.config
        parts = [
            method_brief(c),
            f"{precision_brief(c)} {c.optimizer}",
            levers_brief(c),
            _layout(c),
        ]
        if m.alternatives:
            parts.append(alternatives_brief(m))
        if marks and marks[rank - 1]:
            parts.append("✗ needs " + ", ".join(marks[rank - 1]))
        row = [
            f"▶{rank}" if rank == pick else str(rank),
            " · ".join(parts),
            f"{driver_peak(m.needed, p.gpu) / GiB:.1f}",
            f"{100 * driver_peak(m.needed, p.gpu) / room:.0f}",
            f"{m.tokens_per_s:,.0f}" if m.tokens_per_s else "—",
            _money(m.usd_per_mtok),
        ]
        row += _budget_cells(m, tokens, p) if tokens else []
        table.add_row(*row)
    return table


def wide_front(result, top, tokens, pick, room, tiers, marks, order) -> Table:
    """Every knob in its own column (``search --wide``)."""
    p = result.problem
    table = Table(title=f"Pareto-optimal configurations, {order}", title_justify="left")
    cols = ["#", "method", "recipe · optimizer", "memory levers", "mb×acc×dp", "tp·pp"]
    cols += ["peak GiB", "of room", "tokens/s", "step s", "$/1M tok", "tier"]
    cols += ["hours", "cost"] if tokens else []
    cols += ["needs"] if marks else []
    alternatives = any(m.alternatives for m in result.front[:top])
    cols += ["≈ also"] if alternatives else []
    left = {"method", "recipe · optimizer", "memory levers", "of room", "mb×acc×dp", "tp·pp"}
    left |= {"≈ also"}
    for c in cols:
        table.add_column(c, justify="left" if c in left | {"needs"} else "right", no_wrap=True)
    for rank, m in shown_members(result.front, top, pick):
        if m is None:
            table.add_row("…", *[""] * (len(cols) - 1))
            continue
        c = m.config
        row = [
            f"▶{rank}" if rank == pick else str(rank),
            method_brief(c),
            f"{precision_brief(c)} · {c.optimizer}",
            levers_brief(c),
            f"{c.micro_batch}×{c.grad_accum}×{c.dp}",
            f"{c.tp}·{c.pp}",
            f"{driver_peak(m.needed, p.gpu) / GiB:.1f}",
            _bar(driver_peak(m.needed, p.gpu) / room, 8),
            f"{m.tokens_per_s:,.0f}" if m.tokens_per_s else "—",
            f"{m.step_time_s:.2f}" if m.tokens_per_s else "—",
            _money(m.usd_per_mtok),
            str(tiers[m.fidelity][0]),
        ]
        row += _budget_cells(m, tokens, p) if tokens else []
        if marks:
            row.append("✗ " + ", ".join(marks[rank - 1]) if marks[rank - 1] else "")
        if alternatives:
            row.append(" | ".join(alternative_brief(c, a) for a in m.alternatives))
        table.add_row(*row)
    return table
