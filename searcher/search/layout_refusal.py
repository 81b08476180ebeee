"""The layout rows of a search, or why it has none: the pin or the launch format that rules
every one out, named before any work."""

from __future__ import annotations

from constraints.backends import backend as backend_entry
from constraints.backends import searched_by_default
from constraints.errors import FitplanError
from searcher.search.space import (
    SHARDING_MULTI,
    SHARDING_SINGLE,
    SearchProblem,
    layout_rows,
    layouts,
    sharding_options,
)


def checked_layout_rows(problem: SearchProblem) -> list[dict[str, int | str]]:
    """The layout rows, or one clear error saying which rule left none."""
    unwritable = format_reason(problem)
    if unwritable:
        raise FitplanError(unwritable, "pin a backend the format writes, or choose another --emit")
    rows = layout_rows(problem)
    if rows:
        return rows
    reason = sharding_reason(problem) or (backend_reason(problem) if layouts(problem) else None)
    if reason:
        raise FitplanError(
            f"no plan of up to {problem.max_gpus} GPU(s) can run: {reason}",
            "change that pin (or --emit / --backend)",
        )
    spec = problem.model
    pinned = ", ".join(
        f"--{k} {problem.pins[k]}" for k in ("tp", "pp", "micro_batch", "gpus") if k in problem.pins
    )
    raise FitplanError(
        f"no parallel layout of up to {problem.max_gpus} GPU(s) meets the rules"
        + (f" with {pinned}" if pinned else "")
        + f": data-parallel degree must divide the target batch {problem.target_batch}, tensor "
        f"parallel must divide the {spec.heads} heads and fit a node of {problem.gpus_per_node}, "
        f"pipeline parallel must divide the {spec.layers} layers",
        "change the pins, --gpus or --target-batch",
    )


def sharding_reason(problem: SearchProblem) -> str | None:
    """A --zero / --offload pair no engine runs (offloading needs ZeRO sharding to offload)."""
    if "offload" not in problem.pins:
        return None
    offload = str(problem.pins["offload"])
    pairs = set(SHARDING_MULTI) | set(SHARDING_SINGLE)
    zeros = sorted({z for z, o in pairs if o == offload})
    if "zero" in problem.pins and int(problem.pins["zero"]) not in zeros:
        stages = " or ".join(f"ZeRO-{z}" for z in zeros)
        what = "the optimizer" if offload == "optimizer" else "parameters and optimizer"
        return (
            f"--offload {offload} with --zero {problem.pins['zero']}: the engines offload {what} "
            f"only under {stages}"
        )
    return None


def backend_reason(problem: SearchProblem) -> str | None:
    """What every candidate backend lacks for the layouts the pins leave (tensor or pipeline
    parallelism, a ZeRO stage, offload, one GPU or several)."""
    pinned = "backend" in problem.pins
    names = (str(problem.pins["backend"]),) if pinned else searched_by_default(problem.emit_format)
    lacks: dict[str, None] = {}
    for lay in layouts(problem):
        for zero, offload in sharding_options(problem, lay.dp):
            for name in names:
                b = backend_entry(name)
                if lay.tp > 1 and not b["tp"]:
                    lacks[f"tensor parallelism (--tp {lay.tp})"] = None
                elif lay.pp > 1 and not b["pp"]:
                    lacks[f"pipeline parallelism (--pp {lay.pp})"] = None
                elif zero not in b["zero"]:
                    lacks[f"ZeRO-{zero}"] = None
                elif offload not in b["offload"]:
                    lacks[f"offload {offload}"] = None
    if not lacks:
        return None
    who = (
        f"--backend {problem.pins['backend']}"
        if pinned
        else f"the backends the --emit {problem.emit_format} files run"
        if problem.emit_format
        else "the backends fitplan searches"
    )
    return f"{who} {'does' if pinned else 'do'} not run {' or '.join(lacks)}"


def format_reason(problem: SearchProblem) -> str | None:
    """A pinned backend the --emit format does not write (its plans could not be emitted)."""
    if not problem.emit_format or "backend" not in problem.pins:
        return None
    written = searched_by_default(problem.emit_format)
    backend = str(problem.pins["backend"])
    if backend in written:
        return None
    return (
        f"--emit {problem.emit_format} cannot express --backend {backend}: the format writes "
        f"{', '.join(written)}"
    )
