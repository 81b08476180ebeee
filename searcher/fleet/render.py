"""The fleet plan for people: the capacity matrix, the placement table, the totals."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from constraints.units import GiB
from searcher.fleet.options import Option, duration, money
from searcher.fleet.plan import FleetPlan
from searcher.search.briefs import knobs_brief
from searcher.search.run import FAMILY_NAMES

METHOD_SHORT = {"full": "full", "lora": "LoRA", "qlora": "QLoRA"}


def hours_text(h: float) -> str:
    return duration(h) if h < 48 else f"{h:,.0f} h ({h / 24:,.1f} d)"


usd_text = money


def cell_text(o: Option) -> str:
    return (
        f"{METHOD_SHORT[o.method]} · {o.gpus} GPU{'s' if o.gpus > 1 else ''} · "
        f"{o.tokens_per_s:,.0f} tok/s · {hours_text(o.hours)} · {usd_text(o.usd)}"
    )


def print_plan(plan: FleetPlan, out: Console | None = None) -> None:
    from searcher.terminal import console

    out = out or console()
    f = plan.fleet
    out.print(f"[bold]{f.title}[/]")
    for p in f.pools:
        out.print(f"  pool [bold]{p.name}[/]: {p.describe()}")

    matrix = Table(
        title="Capacity matrix: each job alone on each pool (cheapest option within its deadline and budget)",
        title_justify="left",
        show_lines=True,
    )
    matrix.add_column("job · model", no_wrap=True)
    for p in f.pools:
        matrix.add_column(f"{p.name}\n{p.count} × {p.gpu.name}", overflow="fold")
    for job in f.jobs:
        row = [f"{job.name}\n{job.model.id}"]
        for p in f.pools:
            cell = plan.cell(job.name, p.name)
            best = cell.best
            row.append(
                f"[green]✓[/] {cell_text(best)}" if best else f"[red]✗[/] {cell.reason or ''}"
            )
        matrix.add_row(*row)
    out.print(matrix)

    if plan.placed:
        table = Table(title="Placement (all placed jobs run at once)", title_justify="left")
        for col in ("job", "pool", "GPUs", "configuration", "peak GiB", "tokens/s", "time", "cost"):
            table.add_column(
                col,
                justify="right"
                if col in ("GPUs", "peak GiB", "tokens/s", "time", "cost")
                else "left",
                overflow="fold",
            )
        for pl in plan.placed:
            o, pool = pl.option, f.pool(pl.option.pool)
            nodes = o.gpus // pool.gpus_per_node
            where = f"{o.gpus}" + (f" ({nodes} nodes)" if nodes > 1 else "")
            limits = []
            if pl.job.deadline_hours:
                limits.append(f"≤ {pl.job.deadline_hours:g} h")
            if pl.job.budget_usd:
                limits.append(f"≤ ${pl.job.budget_usd:,.0f}")
            table.add_row(
                pl.job.name,
                o.pool,
                where,
                f"{FAMILY_NAMES[o.method]}: {knobs_brief(o.member.config)}",
                f"{o.member.needed / GiB:.1f}",
                f"{o.tokens_per_s:,.0f}",
                hours_text(o.hours) + (f"\n{limits[0]}" if pl.job.deadline_hours else ""),
                usd_text(o.usd) + (f"\n{limits[-1]}" if pl.job.budget_usd else ""),
            )
        out.print(table)
    for u in plan.unplaced:
        out.print(f"[red]✗ {u.job.name}[/] not placed: {u.reason}")

    print_buy_rent(plan, out)
    used = ", ".join(f"{p.name} {plan.used(p.name)}/{p.count}" for p in f.pools)
    out.print(
        f"[bold]{len(plan.placed)} of {len(f.jobs)} jobs placed[/] · total {usd_text(plan.total_usd)}"
        f" · longest job {hours_text(plan.makespan_hours)} · GPUs in use: {used}"
    )
    evaluated = sum(c.evaluated for c in plan.cells.values())
    n_options = sum(len(c.options) for c in plan.cells.values())
    out.print(
        f"[dim]{len(plan.cells)} job × pool searches, {evaluated:,} configurations in "
        f"{plan.search_seconds:.2f} s; {n_options} options placed by the {plan.assignment.solver} "
        f"solver (exact: most jobs, then least cost) in {plan.solve_seconds:.2f} s[/]"
    )


def print_buy_rent(plan: FleetPlan, out: Console) -> None:
    from searcher.fleet.buy_rent import buy_vs_rent

    rows = buy_vs_rent(plan)
    if not rows:
        return
    years = rows[0].ownership.years
    table = Table(
        title=f"Buy or rent: {years:g}-year cost of each pool at its utilisation in this plan",
        title_justify="left",
    )
    for col in ("pool", "utilisation", "break-even", "own (TCO)", "rent", "verdict"):
        table.add_column(col, justify="left" if col in ("pool", "verdict") else "right")
    for r in rows:
        even = "never" if r.break_even > 1 else f"{r.break_even:.0%}"
        table.add_row(
            r.pool,
            f"{r.utilization:.0%}",
            even,
            usd_text(r.own_usd),
            usd_text(r.rent_usd),
            "[green]buy[/]" if r.verdict == "buy" else "rent",
        )
    out.print(table)
    o = rows[0].ownership
    out.print(
        f"[dim]TCO = purchase + hosting ${o.hosting_usd_per_gpu_year:,.0f}/GPU-year + power × PUE "
        f"{o.pue:g} × ${o.usd_per_kwh:g}/kWh while busy (constraints/data/gpu_ownership.csv; "
        "override with purchase_usd / power_w per pool and an ownership: block)[/]"
    )
