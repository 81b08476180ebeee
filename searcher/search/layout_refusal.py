"""Why a search has no layout row: the pin or the launch format that rules every one out, named
before any work (``space.checked_layout_rows``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from searcher.search.space import SearchProblem


def sharding_reason(problem: SearchProblem) -> str | None:
    """A --zero / --offload pair no engine runs (offloading needs ZeRO sharding to offload)."""
    from searcher.search.space import SHARDING_MULTI, SHARDING_SINGLE

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
    from constraints.backends import backend as backend_entry
    from constraints.backends import searched_by_default
    from searcher.search.space import layouts, sharding_options

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
    from constraints.backends import searched_by_default

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
