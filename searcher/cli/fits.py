"""'What fits on my card': for each model, the best inference, QLoRA, LoRA and full fine-tune."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from constraints.breakdown import peak_bytes, room_bytes, usable_bytes
from constraints.config import CODE
from constraints.constants import DEFAULT_HEADROOM
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.inference import inference_memory
from constraints.models import ModelSpec
from constraints.params import total_params
from constraints.record import Record
from constraints.units import GiB
from searcher.search.briefs import knobs_brief
from searcher.search.run import run_search
from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE, SearchProblem
from searcher.search.stack import KNOWN_PACKAGES, QUANT_PACKAGE, missing_for, rows_missing
from searcher.search.strategies import ExhaustiveStrategy, Progress

FAMILIES = ("qlora", "lora", "full")


@frozen(slots=True, kw_only=True)
class FitsCell(Record):
    ok: bool
    summary: str
    needed_bytes: int | None = None
    tokens_per_s: float | None = None
    config: dict[str, object] | None = None
    #: what this cell's plan needs beyond the stack (only where nothing inside it fits)
    needs_outside_stack: tuple[str, ...] = ()


@frozen(slots=True, kw_only=True)
class FitsRow(Record):
    model: str
    name: str
    params: int
    seq_len: int
    inference: FitsCell
    qlora: FitsCell
    lora: FitsCell
    full: FitsCell


def _inference_cell(
    spec: ModelSpec,
    gpu: GpuSpec,
    seq_len: int,
    headroom: float,
    stack: frozenset[str] | None = None,
) -> FitsCell:
    """The first of 16-bit, int8, NF4 weights that fits; the quantised ones load through
    transformers' BitsAndBytesConfig (bitsandbytes), said where the stack lacks it."""
    usable, _, _ = usable_bytes(gpu, headroom)
    half = "bf16" if gpu.supports_bf16 or gpu.custom else "fp16"
    best = None
    for label, kw in (
        (half, {"weight_dtype": half}),
        ("int8", {"quant": "int8", "weight_dtype": half}),
        ("nf4", {"quant": "nf4", "weight_dtype": half}),
    ):
        b = inference_memory(spec, gpu, batch=1, context=seq_len, **kw)  # type: ignore[arg-type]
        needed = b.total - b.cuda_context
        if best is None or needed < best[1]:
            best = (label, needed)
        if needed <= usable:
            package = QUANT_PACKAGE.get(kw.get("quant", "none"))
            missing = (package,) if package and stack is not None and package not in stack else ()
            return FitsCell(
                ok=True,
                summary=f"{label}, {b.total / GiB:.1f} GiB (KV {b.kv_cache / GiB:.2f} GiB at {seq_len} tokens)"
                + _needs_text(missing),
                needed_bytes=needed,
                config={"weights": label, "context": seq_len},
                needs_outside_stack=missing,
            )
    assert best is not None
    return FitsCell(
        ok=False,
        summary=f"peaks at {peak_bytes(best[1], gpu) / GiB:.1f} GiB at best ({best[0]}); room "
        f"{room_bytes(gpu, headroom) / GiB:.1f} GiB",
        needed_bytes=best[1],
    )


def _needs_text(missing: tuple[str, ...]) -> str:
    return f"; needs {', '.join(missing)} (outside the stack)" if missing else ""


def _family_cells(
    problem: SearchProblem, families: tuple[str, ...], stack: frozenset[str] | None
) -> tuple[dict[str, FitsCell], str | None]:
    """Each family's plan in ``problem``'s space that needs the fewest packages beyond
    ``stack``, the fastest of those, marked with them (a failed search: no cells, its reason)."""
    try:
        result = run_search(problem, ExhaustiveStrategy(), keep_evaluation=True)
    except FitplanError as err:
        return {}, str(err)
    ev = result.evaluation
    assert ev is not None
    rejected = {r.family: r.reason for r in result.rejected}
    cells: dict[str, FitsCell] = {}
    for family in families:
        sel = ev.feasible & (ev.batch.method == CODE["method"][family])
        if not sel.any():
            reason = rejected.get(family, "not searched")
            cells[family] = FitsCell(ok=False, summary=reason.split(": ", 1)[-1])
            continue
        idx = np.flatnonzero(sel)
        speed = np.nan_to_num(ev.throughput["tokens_per_s"][idx], nan=0.0)
        lacking = np.array([len(m) for m in rows_missing(ev.batch, idx, stack)])
        # the fastest; on a custom card (no compute figures) the highest fidelity, least memory
        i = int(idx[np.lexsort((ev.needed[idx], -ev.fidelity[idx], -speed, lacking))[0]])
        cfg = ev.batch.config(i)
        missing = missing_for(cfg, stack)
        tps = float(ev.throughput["tokens_per_s"][i])
        rate = "" if np.isnan(tps) else f", {tps:,.0f} tok/s"
        cells[family] = FitsCell(
            ok=True,
            summary=f"{knobs_brief(cfg)}; {peak_bytes(float(ev.needed[i]), problem.gpu) / GiB:.1f} "
            f"GiB{rate}{_needs_text(missing)}",
            needed_bytes=round(float(ev.needed[i])),
            tokens_per_s=None if np.isnan(tps) else tps,
            config=cfg.model_dump(),
            needs_outside_stack=missing,
        )
    return cells, None


def fits_row(
    spec: ModelSpec,
    gpu: GpuSpec,
    *,
    seq_len: int = 2048,
    target_batch: int = 8,
    gpus: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    cpu_ram: int | None = None,
    stack: frozenset[str] | None = None,
) -> FitsRow:
    """The row of one model. With a ``stack``, each family's plan is the fastest that runs with
    it; a family with none there shows the plan of the whole space that needs the fewest
    packages beyond it (the fastest of those), marked with them (never silently chosen)."""
    seq = min(seq_len, spec.max_position) if spec.max_position else seq_len
    if stack is not None and stack >= set(KNOWN_PACKAGES):
        stack = None  # every package: the stack narrows nothing
    problem = SearchProblem(
        model=spec,
        gpu=gpu,
        max_gpus=gpus,
        target_batch=target_batch,
        seq_len=seq,
        headroom=headroom,
        cpu_ram_per_node=cpu_ram or DEFAULT_CPU_RAM_PER_NODE,
        stack=stack,
    )
    cells, error = _family_cells(problem, FAMILIES, stack)
    empty = [f for f in FAMILIES if f not in cells or not cells[f].ok]
    if stack is not None and empty:  # outside the stack: the whole space, for those families
        pins: dict[str, object] = {"method": empty[0] if len(empty) == 1 else tuple(empty)}
        if "flash-attn" not in stack:
            pins["attention"] = "sdpa"  # costed as flash (search/stack.py): needs nothing
        whole = replace(problem, stack=None, pins=pins)
        outside, _ = _family_cells(whole, tuple(empty), stack)
        cells.update({family: cell for family, cell in outside.items() if cell.ok})
    if error is not None and not cells:
        cells = {f: FitsCell(ok=False, summary=error) for f in FAMILIES}
    return FitsRow(
        model=spec.id,
        name=spec.name,
        params=total_params(spec),
        seq_len=seq,
        inference=_inference_cell(spec, gpu, seq, headroom, stack),
        **{
            f: cells.get(f) or FitsCell(ok=False, summary=error or "not searched") for f in FAMILIES
        },
    )


def fits_table(
    specs: Sequence[ModelSpec],
    gpu: GpuSpec,
    *,
    seq_len: int = 2048,
    target_batch: int = 8,
    gpus: int = 1,
    headroom: float = DEFAULT_HEADROOM,
    cpu_ram: int | None = None,
    progress: Progress | None = None,
    stack: frozenset[str] | None = None,
) -> list[FitsRow]:
    rows = []
    for k, spec in enumerate(specs):
        rows.append(
            fits_row(
                spec,
                gpu,
                seq_len=seq_len,
                target_batch=target_batch,
                gpus=gpus,
                headroom=headroom,
                cpu_ram=cpu_ram,
                stack=stack,
            )
        )
        if progress:
            progress(k + 1, len(specs))
    return rows
