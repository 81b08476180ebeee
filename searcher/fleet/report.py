"""``--report report.html``: one self-contained HTML file (tables and embedded PNG charts).

Charts (matplotlib, Agg backend; the optional extra ``fitplan[report]``):

- per placed job, the Pareto front of its search on its pool: cost of the job's token budget
  against peak memory per GPU, coloured by method, the chosen configuration starred and the
  pool's usable memory drawn as a line;
- the memory breakdown of each chosen configuration as stacked bars (weights, gradients,
  optimizer states, activations, overhead), with each pool's usable memory marked.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.units import GiB
from searcher.fleet.plan import FleetPlan

METHOD_COLOURS = {"full": "#d62728", "lora": "#1f77b4", "qlora": "#2ca02c"}
TERM_COLOURS = {
    "weights": "#4c72b0",
    "gradients": "#dd8452",
    "optimizer": "#c44e52",
    "activations": "#55a868",
    "overhead": "#8c8c8c",
}
DPI = 110


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise FitplanError("--report needs matplotlib", "pip install 'fitplan[report]'") from None


def check_report_path(path: str) -> None:
    p = Path(path)
    if p.is_dir():
        raise FitplanError(f"--report {p} is a directory", "give a file name such as report.html")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise FitplanError(f"--report: folder {parent} does not exist")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def pareto_figure(plan: FleetPlan) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    placed = plan.placed
    n = max(1, len(placed))
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    if not placed:
        ax = axes.flat[0]
        ax.set_visible(True)
        ax.text(0.5, 0.5, "no job placed", ha="center", va="center", transform=ax.transAxes)
        return fig
    from constraints.breakdown import usable_bytes

    for ax, pl in zip(axes.flat, placed, strict=False):
        pool = plan.fleet.pool(pl.option.pool)
        cell = plan.cell(pl.job.name, pool.name)
        front = [m for m in cell.front if m.usd_per_mtok is not None]
        for method, colour in METHOD_COLOURS.items():
            pts = [m for m in front if m.config.method == method]
            if pts:
                ax.scatter(
                    [m.usd_per_mtok * pl.job.tokens / 1e6 for m in pts],  # type: ignore[operator]
                    [m.needed / GiB for m in pts],
                    s=22,
                    c=colour,
                    alpha=0.75,
                    edgecolors="none",
                )
        chosen = pl.option
        ax.scatter(
            [chosen.usd],
            [chosen.member.needed / GiB],
            s=170,
            marker="*",
            c=METHOD_COLOURS[chosen.method],
            edgecolors="black",
            linewidths=1.0,
            zorder=5,
        )
        usable = usable_bytes(pool.gpu, pool.headroom)[0] / GiB
        ax.axhline(usable, color="black", lw=0.8, ls="--")
        xs = [chosen.usd] + [m.usd_per_mtok * pl.job.tokens / 1e6 for m in front]  # type: ignore[operator]
        if max(xs) > 8 * min(xs):  # costs over a decade or more: a log axis
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"${v:,.4g}"))
        ax.set_title(f"{pl.job.name} on {pool.name}", fontsize=10)
        ax.set_xlabel(f"cost of {pl.job.tokens:.3g} tokens ($)", fontsize=8)
        ax.set_ylabel("peak memory per GPU (GiB)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, which="both")
    handles = [
        Line2D([], [], marker="o", ls="", color=c, label=m) for m, c in METHOD_COLOURS.items()
    ]
    handles += [
        Line2D([], [], marker="*", ls="", color="grey", mec="black", ms=12, label="chosen"),
        Line2D([], [], ls="--", color="black", label="usable memory"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Pareto fronts (cost, peak memory, fidelity) of the placed jobs", fontsize=11)
    height = 3.6 * rows  # inches: keep the legend and the title a fixed half inch each
    fig.tight_layout(rect=(0, 0.45 / height, 1, 1 - 0.45 / height))
    return fig


def memory_figure(plan: FleetPlan) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from constraints.breakdown import usable_bytes

    placed = plan.placed
    fig, ax = plt.subplots(figsize=(min(16.0, max(5.0, 0.75 * len(placed) + 3.0)), 4.6))
    if not placed:
        ax.text(0.5, 0.5, "no job placed", ha="center", va="center", transform=ax.transAxes)
        return fig
    x = list(range(len(placed)))
    bottom = [0.0] * len(placed)
    for term, colour in TERM_COLOURS.items():
        vals = [getattr(pl.option.member.memory, term) / GiB for pl in placed]
        ax.bar(x, vals, bottom=bottom, color=colour, label=term, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    for i, pl in enumerate(placed):
        # the bars include the CUDA context, so the line is capacity − headroom
        pool = plan.fleet.pool(pl.option.pool)
        usable, context, _ = usable_bytes(pool.gpu, pool.headroom)
        ax.hlines((usable + context) / GiB, i - 0.4, i + 0.4, colors="black", ls="--", lw=1)
    ax.set_xticks(x)
    ax.set_xticklabels(
        [f"{pl.job.name}\n{pl.option.pool} ×{pl.option.gpus}" for pl in placed],
        fontsize=8,
        rotation=30 if len(placed) > 6 else 0,
        ha="right" if len(placed) > 6 else "center",
    )
    ax.set_ylabel("GiB per GPU at the peak")
    ax.set_title("Memory of the chosen configurations (dashes: capacity − headroom)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(plan: FleetPlan) -> str:
    from searcher.fleet.options import brief
    from searcher.fleet.render import cell_text, hours_text, usd_text

    f = plan.fleet
    esc = html.escape
    pools = "".join(f"<li><b>{esc(p.name)}</b>: {esc(p.describe())}</li>" for p in f.pools)
    matrix_rows = []
    for job in f.jobs:
        row = [f"<b>{esc(job.name)}</b><br><small>{esc(job.model.id)}</small>"]
        for p in f.pools:
            cell = plan.cell(job.name, p.name)
            best = cell.best
            row.append(
                f'<span class="ok">✓</span> {esc(cell_text(best))}'
                if best
                else f'<span class="no">✗</span> {esc(cell.reason or "")}'
            )
        matrix_rows.append(row)
    placement_rows = [
        [
            esc(pl.job.name),
            esc(pl.option.pool),
            str(pl.option.gpus),
            esc(brief(pl.option)),
            f"{pl.option.member.needed / GiB:.1f}",
            f"{pl.option.tokens_per_s:,.0f}",
            esc(hours_text(pl.option.hours)),
            esc(usd_text(pl.option.usd)),
        ]
        for pl in plan.placed
    ]
    unplaced = "".join(
        f'<li><span class="no">✗</span> <b>{esc(u.job.name)}</b>: {esc(u.reason)}</li>'
        for u in plan.unplaced
    )
    used = ", ".join(f"{esc(p.name)} {plan.used(p.name)}/{p.count}" for p in f.pools)
    from searcher.fleet.buy_rent import buy_vs_rent

    buy_rows = [
        [
            esc(r.pool),
            f"{r.utilization:.0%}",
            "never" if r.break_even > 1 else f"{r.break_even:.0%}",
            esc(usd_text(r.own_usd)),
            esc(usd_text(r.rent_usd)),
            r.verdict,
        ]
        for r in buy_vs_rent(plan)
    ]
    pareto = _png(pareto_figure(plan))
    memory = _png(memory_figure(plan))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>fitplan fleet: {esc(f.title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.35em 0.6em; vertical-align: top; text-align: left; }}
th {{ background: #f3f3f3; }}
.ok {{ color: #1a7f37; font-weight: bold; }} .no {{ color: #c62828; font-weight: bold; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{esc(f.title)}</h1>
<p><b>{len(plan.placed)} of {len(f.jobs)} jobs placed</b> · total {esc(usd_text(plan.total_usd))}
 · longest job {esc(hours_text(plan.makespan_hours))} · GPUs in use: {used}</p>
<h2>Pools</h2><ul>{pools}</ul>
<h2>Capacity matrix</h2>
<p>Each job alone on each pool: the cheapest option within its deadline and budget, or why none.</p>
{_table(["job · model"] + [f"{p.name} ({p.count} × {p.gpu.name})" for p in f.pools], matrix_rows)}
<h2>Placement</h2>
{_table(["job", "pool", "GPUs", "configuration", "peak GiB", "tokens/s", "time", "cost"], placement_rows)}
<ul>{unplaced}</ul>
<h2>Buy or rent</h2>
<p>Each pool's utilisation in this plan against the cost of owning its GPUs over the horizon.</p>
{_table(["pool", "utilisation", "break-even", "own (TCO)", "rent", "verdict"], buy_rows)}
<h2>Pareto fronts</h2>
<img id="pareto" alt="Pareto fronts: cost against peak memory, by method" src="data:image/png;base64,{pareto}">
<h2>Memory of the chosen configurations</h2>
<img id="memory" alt="stacked memory breakdown per chosen configuration" src="data:image/png;base64,{memory}">
<p><small>fitplan fleet · placement by the {esc(plan.assignment.solver)} solver (exact: most jobs
placed, then least total cost)</small></p>
</body></html>
"""


def write_report(plan: FleetPlan, path: str) -> Path:
    from searcher.files import atomic_write_text

    require_matplotlib()
    return atomic_write_text(path, render_html(plan))
