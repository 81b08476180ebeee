"""Rich tables and JSON for people and scripts. Memory always in GB and GiB."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from constraints.memory import TERMS
from constraints.speed import StepTime
from constraints.units import GB, GiB, fmt_bytes, fmt_count
from searcher.cli.front_table import (
    WIDE_COLUMNS,
    alternatives_note,
    narrow_front,
    quality_tiers,
    wide_front,
)
from searcher.plain_text import Table
from searcher.search.briefs import config_brief
from searcher.terminal import console

if TYPE_CHECKING:
    from rich.console import Console

    from searcher.search.levers import AdvisedExplanation


def _gb(x: float) -> str:
    return f"{x / GB:,.2f}"


def _gib(x: float) -> str:
    return f"{x / GiB:,.2f}"


def overhead_split(b: Any) -> dict[str, int]:
    """The overhead's parts with the NCCL buffers as their own row: constraints gives them as
    ``nccl_buffers`` (or, before that term existed, inside ``cuda_context``)."""
    from constraints.constants import CUDA_CONTEXT_BYTES

    parts = dict(b.parts)
    if "nccl_buffers" not in parts and parts.get("cuda_context", 0) > CUDA_CONTEXT_BYTES:
        parts["nccl_buffers"] = parts["cuda_context"] - CUDA_CONTEXT_BYTES
        parts["cuda_context"] = CUDA_CONTEXT_BYTES
    return parts


def _term_rows(b: Any) -> list[tuple[str, int, bool]]:
    """(label, bytes, is a term) in the table's order; the NCCL buffers a row of the overhead."""
    parts = overhead_split(b)
    rows: list[tuple[str, int, bool]] = []
    for term, names in TERMS.items():
        rows.append((term, b.term(term), True))
        names = tuple(names) + (("nccl_buffers",) if term == "overhead" else ())
        present = [n for n in dict.fromkeys(names) if parts.get(n)]
        for name in present:
            if len(present) > 1 or name != term:
                rows.append((name.replace("_", " "), parts[name], False))
    return rows


def command_options(command: str) -> set[str]:
    """The option strings ``fitplan COMMAND`` accepts (advice prints only those)."""
    import argparse
    import importlib

    # looked up by name, as handlers are: the parser imports the command modules that print
    parser = importlib.import_module("searcher.cli.parser").current_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {o for a in sub.choices[command]._actions for o in a.option_strings}


def print_explanation(
    e: AdvisedExplanation,
    out: Console | None = None,
    *,
    detail: bool = False,
    command: str = "explain",
) -> None:
    """One configuration: a compact panel in GiB, or with ``detail`` bytes, GB, GiB, B/param
    (--json carries bytes too). One peak figure, named the same everywhere: what nvidia-smi
    shows; torch's max_memory_reserved / max_memory_allocated are labelled as such."""
    out = out or console()
    b, v = e.breakdown, e.verdict
    towers = (
        f" + {fmt_count(e.model.tower_params)} of other towers (frozen, not run)"
        if e.model.tower_params
        else ""
    )
    out.print(
        f"[bold]{e.model.name}[/] · {fmt_count(e.params_total)} parameters "
        f"({e.params_total:,}){towers}, {fmt_count(e.params_trainable)} trainable · {e.gpu.name}"
    )
    out.print(f"config: {config_brief(e.config)}")
    table = Table(title=f"memory per GPU at the peak ({b.phase}), GiB", title_justify="left")
    cols = (
        [("term", "left"), ("bytes", "right"), ("GB", "right"), ("GiB", "right")]
        if detail
        else [("term", "left"), ("GiB", "right")]
    )
    cols += [("% of peak", "right")] + ([("B/param", "right")] if detail else [])
    for col, justify in cols:
        table.add_column(col, justify=justify)
    params = max(e.params_total, 1)

    def cells(label: str, value: int) -> list[str]:
        row = [label] + ([f"{value:,}", _gb(value)] if detail else []) + [_gib(value)]
        row.append(f"{100 * value / max(b.total, 1):.1f}")
        return row + ([f"{value / params:.2f}"] if detail else [])

    for label, value, is_term in _term_rows(b):
        table.add_row(*cells(f"[bold]{label}[/]" if is_term else f"  {label}", value))
    table.add_section()
    table.add_row(*cells("[bold]peak (what nvidia-smi shows)[/]", b.total))
    out.print(table)
    size = fmt_bytes if detail else (lambda x: f"{x / GiB:,.2f} GiB")
    out.print(
        f"torch.cuda.max_memory_reserved would show {size(b.reserved)} (the peak less CUDA "
        f"context and NCCL buffers); max_memory_allocated {size(b.allocated)} (less the "
        f"allocator's slack too); static (weights + gradients + optimizer) {size(b.static)}"
    )
    out.print(_slack_line(e, size))
    if b.paged_optimizer:
        out.print(
            f"paged optimizer states (unified memory, beside the peak): {size(b.paged_optimizer)}"
        )
    if b.cpu_bytes:
        out.print(f"CPU RAM per GPU rank (offload / paged): {size(b.cpu_bytes)}")
    room = v.capacity - v.headroom
    out.print(
        f"room on {e.gpu.name}: {size(room)} = capacity {size(v.capacity)} − headroom "
        f"{size(v.headroom)}"
    )
    if v.fits:
        out.print(
            f"[green]fits[/]: peak {size(b.total)} of {size(room)}, {size(v.margin)} to spare"
        )
    else:
        for problem in v.problems:
            out.print(f"[red]cannot run[/]: {problem}")
        if v.margin < 0:
            out.print(
                f"[red]does not fit[/]: peak {size(b.total)} of {size(room)}, "
                f"{size(-v.margin)} over"
            )
    largest = max(TERMS, key=b.term)
    share = 100 * b.term(largest) / max(b.total, 1)
    out.print(
        f"largest term: [bold]{largest}[/] ({size(b.term(largest))}, {share:.0f} % of the peak)"
    )
    accepted = command_options(command)
    levers = [
        lv for lv in e.levers if all(w in accepted for w in lv.flags.split() if w.startswith("--"))
    ]
    if levers:
        top = levers[0]
        aim = (
            ""
            if top.term == largest
            else f"no lever shrinks the {largest} here; for the {top.term}: "
        )
        out.print(
            f"  lever: {aim}{top.change} ({top.flags}) saves "
            f"{size(top.saves)}{', then it fits' if top.fits and not v.fits else ''}"
        )
        for lv in levers[1:4]:
            out.print(
                f"  also: {lv.change} ({lv.flags}) saves {size(lv.saves)}{' → fits' if lv.fits and not v.fits else ''}"
            )
    if e.speed is not None:
        print_speed(e.speed, out)
    for note in e.notes:
        out.print(f"[dim]note: {note}[/]")


#: the decomposition's rows as the table names them
_PART_LABELS = {
    "gemm_s": "matmuls (GEMMs)",
    "lora_s": "LoRA adapters",
    "attention_s": "attention",
    "elementwise_s": "elementwise (norms, activations, adds)",
    "loss_s": "loss (logits)",
    "fp8_cast_s": "fp8 scaling and casts",
    "dequant_s": "dequantisation",
    "launch_s": "kernel launch (host-bound excess)",
    "bubble_s": "pipeline bubble",
    "dp_comm_s": "exposed data-parallel comm",
    "tp_comm_s": "exposed tensor-parallel comm",
    "pp_comm_s": "pipeline sends",
    "optimizer_s": "optimizer step",
    "offload_s": "offload streaming",
    "overhead_s": "fixed per-step overhead",
}


def print_speed(s: StepTime, out: Console) -> None:
    """The step time and its decomposition (one configuration, fits or not)."""
    table = Table(title="step time (per optimizer step, predicted)", title_justify="left")
    for col in ("part", "seconds", "% step"):
        table.add_column(col, justify="left" if col == "part" else "right")
    step = max(s.step_time_s, 1e-12)
    for key, label in _PART_LABELS.items():
        value = s.parts.get(key, 0.0)
        if not value:
            continue
        table.add_row(label, f"{value:.4f}", f"{100 * value / step:.1f}")
        if key == "gemm_s":
            for group, gv in sorted(s.gemm_groups.items(), key=lambda kv: -kv[1]):
                table.add_row(f"  {group}", f"{gv:.4f}", f"{100 * gv / step:.1f}")
    table.add_section()
    table.add_row("[bold]step[/]", f"{s.step_time_s:.4f}", "100.0")
    out.print(table)
    cost = f", ${s.usd_per_mtok:.2f} per million tokens" if s.usd_per_mtok is not None else ""
    out.print(
        f"throughput: {s.tokens_per_s_per_gpu:,.0f} tokens/s per GPU, {s.tokens_per_s:,.0f} in all; "
        f"MFU {100 * s.mfu:.1f} %{cost}"
    )


def print_search(
    result: Any,
    top: int,
    tokens: float | None = None,
    out: Console | None = None,
    pick: int = 1,
    detail: bool = False,
    wide: bool = False,
    notes: Sequence[str] = (),
) -> None:
    """The front and the one member ``pick`` (1-based) that ``--emit`` writes, named as such:
    the plan in one cell (fits 80 columns), or with ``wide`` every knob in its own column;
    ``notes``: lines under the table (what --emit does not write)."""
    from constraints.params import total_params
    from searcher.search.levers import advise

    out = out or console()
    p = result.problem
    out.print(
        f"[bold]{p.model.name}[/] ({fmt_count(total_params(p.model))} params) "
        f"on up to {p.max_gpus} × {p.gpu.name} · target batch {p.target_batch} × {p.seq_len} tokens · "
        f"{result.evaluated:,} configurations searched ({result.strategy}"
        + (
            f"; {result.evaluated - result.pruned:,} evaluated, the rest pruned exactly"
            if getattr(result, "pruned", 0)
            else ""
        )
        + f"), {result.feasible:,} of the evaluated fit, "
        f"{len(result.front)} on the Pareto front, {result.seconds:.2f} s"
    )
    if result.front:
        from constraints.breakdown import room_bytes

        order = (
            "fastest first" if getattr(result, "rank_by", "cost") == "speed" else "cheapest first"
        )
        room = room_bytes(p.gpu, p.headroom)
        tiers = quality_tiers(result.front)
        marks = getattr(result, "stack_missing", ())
        draw = wide_front if wide else narrow_front
        table = draw(result, top, tokens, pick, room, tiers, marks, order)
        if wide:  # asked for: as wide as its columns, never cut (a terminal wraps the lines)
            out.width = max(out.width, WIDE_COLUMNS)
        out.print(table)
        tier_note = (
            "; tier: "
            + " > ".join(
                f"{n} {name}" for n, name in sorted({tiers[m.fidelity] for m in result.front[:top]})
            )
            + " (the front's quality objective: full > LoRA by rank > QLoRA)"
            if wide
            else "; plan: method · precision optimizer · memory levers · micro-batch × "
            "accumulation (--wide: a column each)"
        )
        out.print(
            f"[dim]{'peak GiB' if wide else 'GiB'}: what nvidia-smi shows at the step's peak "
            f"(CUDA context and NCCL buffers included); {'of room' if wide else '% use'}: that "
            f"peak against the room, {room / GiB:.1f} GiB (capacity less headroom)"
            f"{'' if wide else '; tok/s: tokens per second, all GPUs; $/Mtok: $ per million tokens'}"
            f"{tier_note}[/]"
        )
        if any(m.alternatives for m in result.front[:top]):
            from searcher.search.evaluate import memory_step_bytes, usable_bytes

            out.print(f"[dim]{alternatives_note(memory_step_bytes(usable_bytes(p)))}[/]")
        if marks:
            from searcher.cli.stack import print_marked

            print_marked(marks, pick, out, p.framework)
        for note in notes:
            out.print(f"[yellow]{note}[/]")
        drawn = min(top, len(result.front)) + (1 if top < pick <= len(result.front) else 0)
        if len(result.front) > drawn:
            out.print(
                f"[dim]{len(result.front) - drawn} more on the front: --top {len(result.front)}, --json or --csv[/]"
            )
    for r in result.rejected:
        out.print(f"[red]✗[/] {r.reason}")
    if not result.front:
        out.print(
            "[red]nothing fits[/]: see the reasons above; more GPUs, a larger card, or a shorter sequence"
        )
        return
    chosen = result.front[min(pick, len(result.front)) - 1]
    out.print()
    order = "speed" if getattr(result, "rank_by", "cost") == "speed" else "cost"
    out.print(
        f"[bold]front member {pick} of {len(result.front)}[/] (ranked by {order}"
        + ("; the one --emit writes" if pick != 1 else "; --pick N for another")
        + "):"
    )
    used = chosen.config.gpus
    if used < p.max_gpus:
        out.print(
            f"uses {used} of the {p.max_gpus} GPUs offered: "
            + (
                f"ranked by cost, {used} GPUs train a token cheapest; `--rank-by speed` orders "
                "the front fastest first"
                if order == "cost"
                else "no faster configuration on more GPUs fits (tensor/pipeline degrees and "
                "the batch split limit it)"
            )
        )
    topology = {  # the problem's network, as the search costed the member
        "gpus_per_node": p.gpus_per_node,
        "inter_node_gb_s": p.inter_node_gb_s,
        "nvlink_domain": p.nvlink_domain,
    }
    explained = advise(p.model, chosen.config, p.gpu, p.headroom, **topology)
    print_explanation(explained, out, detail=detail, command="search")


def front_csv_text(result: Any, tokens: float | None = None) -> str:
    """The whole front as CSV text (one row per member, config and memory columns flattened;
    last, what each needs and what of that is outside the stack, as the table's needs column)."""
    import pandas as pd

    from searcher.search.views import member_json

    rows, marks = [], getattr(result, "stack_missing", ())
    for i, m in enumerate(result.front):
        j = member_json(m, result.problem, tokens)
        flat = {
            **{f"config.{k}": v for k, v in j["config"].items()},
            **{f"memory_bytes.{k}": v for k, v in j["memory_bytes"].items()},
        }
        for k in ("needed_bytes", "tokens_per_s", "step_time_s", "usd_per_mtok", "mfu", "fidelity"):
            flat[k] = j[k]
        if "budget" in j:
            flat.update({f"budget.{k}": v for k, v in j["budget"].items()})
        flat["needs_packages"] = " ".join(j["needs_packages"])  # appended: space-separated
        flat["needs_outside_stack"] = " ".join(marks[i]) if marks else ""
        rows.append(flat)
    text: str = pd.DataFrame(rows).to_csv(index=False)
    return text


def print_fits(rows: list[Any], gpu: Any, seq_len: int, out: Console | None = None) -> None:
    from constraints.breakdown import room_bytes
    from constraints.units import fmt_count

    out = out or console()
    room = room_bytes(gpu)
    table = Table(
        title=f"what fits on {gpu.name} (room {room / GiB:.1f} GiB = capacity − headroom; the "
        f"cells give each plan's peak), {seq_len}-token sequences",
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


def _slack_line(e: Any, size: Any) -> str:
    """What the allocator slack is a fraction of, and why that fraction."""
    from constraints.allocator import slack_basis
    from constraints.memory import DYNAMIC_PARTS

    fraction, why = slack_basis(e.config)
    dynamic = sum(e.breakdown.parts.get(k, 0) for k in DYNAMIC_PARTS)
    return (
        f"allocator slack: {fraction:.1%} of the {size(dynamic)} the step allocates and frees "
        f"({why})"
    )
