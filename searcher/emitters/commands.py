"""Handlers: ``fitplan launch`` and the ``--emit`` part of ``fitplan search``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from constraints.errors import FitplanError

if TYPE_CHECKING:
    from searcher.emitters.base import Emission, EmitOptions
    from searcher.emitters.plan import Plan
    from searcher.files import Output
    from searcher.search.run import SearchResult


def check_emit_args(args: argparse.Namespace) -> None:
    """Before searching: --emit and --out go together, and the format exists."""
    emit, out = getattr(args, "emit", None), getattr(args, "out", None)
    if out and not emit:
        raise FitplanError("--out needs --emit FORMAT", "e.g. --emit deepspeed --out run/")
    if emit and not out:
        raise FitplanError(f"--emit {emit} needs --out DIR", "the folder for the files")
    if getattr(args, "pick", None) is not None and not emit and args.command == "search":
        raise FitplanError("--pick needs --emit FORMAT --out DIR")
    if getattr(args, "pick", None) is not None and args.pick < 1:
        raise FitplanError(f"--pick must be at least 1, got {args.pick}")
    if emit:
        from searcher.emitters import get_emitter

        get_emitter(emit)
    if getattr(args, "lora_alpha", None) is not None and getattr(args, "method", None) == "full":
        raise FitplanError("--lora-alpha does nothing with --method full (no adapter to scale)")
    if out:
        check_out_folder(out, bool(getattr(args, "force", False)))


def check_out_folder(out: str, force: bool) -> None:
    """--out before any work: a folder (or a new name), and not one with files unless --force."""
    from pathlib import Path

    from constraints.limits import excerpt

    p = Path(out)
    shown = out if len(out) <= 80 else excerpt(out, 80)[1:-1]
    try:
        if p.exists() and not p.is_dir():
            raise FitplanError(f"--out {shown} is a file, not a folder", "give --out a folder")
        if p.is_dir() and any(p.iterdir()) and not force:
            raise FitplanError(
                f"--out {shown} exists and is not empty",
                "pass --force to write into it (files of the same name are replaced), or "
                "choose a new folder",
            )
        # the folder, or the nearest folder that exists and would hold it, must take new files
        existing = next(q for q in (p, *p.absolute().parents) if q.exists())
        if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
            raise FitplanError(
                f"--out {shown}: cannot write in {existing}", "choose a folder you can write to"
            )
    except OSError as err:
        raise FitplanError(f"--out {shown}: {err.strerror or err}") from None
    except ValueError as err:
        raise FitplanError(f"--out {shown}: {err}") from None


#: the HF-Trainer formats' sharding choice (hf_settings.choose_backend) for a plan's backend
_HF_BACKEND = {"deepspeed": "deepspeed", "fsdp2": "fsdp", "fsdp1": "fsdp"}


def emit_options(args: argparse.Namespace, plan: Plan) -> EmitOptions:
    """The options of an emission; the sharding backend is the one the plan was modelled with."""
    from searcher.emitters.base import EmitOptions

    return EmitOptions(
        out=args.out,
        lora_alpha=args.lora_alpha,
        backend=_HF_BACKEND.get(str(plan.config.backend), "auto"),
        gpus_per_node=plan.gpus_per_node,
    )


def check_backend(emitter: object, plan: Plan) -> None:
    """Refuse a plan whose backend the format does not write (one line, exit 2)."""
    from searcher.emitters.base import refuse

    written = getattr(emitter, "backends", ())
    if plan.config.backend not in written:
        raise refuse(
            str(getattr(emitter, "name", "?")),
            "backend",
            plan.config.backend,
            f"the format writes {', '.join(written)}",
            "pin --backend to one of those in the search, or choose another --emit format",
        )


def write_emission(
    emission: Emission,
    out: str,
    force: bool,
    stream: IO[str],
    also: Sequence[Output] = (),
    heading: str = "",
) -> None:
    """The launch files into ``out`` and the ``also`` files (the search's CSV), all or none;
    ``heading`` is printed first, once they are written (a refusal prints nothing on stdout)."""
    from searcher.files import atomic_write_files

    paths = atomic_write_files(
        out, [(f.name, f.text, f.executable) for f in emission.files], force=force, also=also
    )
    if heading:
        stream.write(heading)
    for o in also:
        stream.write(f"wrote {o.path}\n")
    for p in paths:
        stream.write(f"wrote {p}\n")
    for note in emission.notes:
        stream.write(f"note: {note}\n")
    stream.write(f"launch: {emission.command}\n")
    if emission.smoke:
        stream.write(f"smoke test (CPU, offline): {emission.smoke}\n")


def emit_plan(
    plan: Plan,
    args: argparse.Namespace,
    stream: IO[str],
    also: Sequence[Output] = (),
    member: str = "",
) -> int:
    """Write the files of ``plan`` (and ``also``, all or none); ``member`` names it
    (``front member 5 of 41``)."""
    from searcher.emitters import get_emitter
    from searcher.search.briefs import config_brief

    emitter = get_emitter(args.emit)
    if args.lora_alpha is not None and plan.config.method == "full":
        raise FitplanError("--lora-alpha does nothing: the plan is a full fine-tune (no adapter)")
    check_backend(emitter, plan)
    emission = emitter.emit(plan, emit_options(args, plan))
    heading = f"{member or 'plan'}: {config_brief(plan.config)}\n"
    write_emission(emission, args.out, args.force, stream, also, heading=heading)
    return 0


def _member_label(path: str, pick: int | None) -> str:
    """``front member N of M`` when PLAN.json is a whole search result, else ``plan``."""
    import json

    try:
        from pathlib import Path

        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return "plan"
    if isinstance(data, dict) and isinstance(data.get("front"), list) and "config" not in data:
        return f"front member {pick or 1} of {len(data['front'])} in {path}"
    return f"plan {path}"


def cmd_launch(args: argparse.Namespace) -> int:
    from searcher.emitters.plan import load_plan

    check_emit_args(args)
    plan = load_plan(args.plan, pick=args.pick, model=args.model, gpus_per_node=args.gpus_per_node)
    try:
        return emit_plan(plan, args, sys.stdout, member=_member_label(args.plan, args.pick))
    except FitplanError as err:
        if "cannot express" not in err.message:
            raise
        # a plan is fixed: the pins the refusal advises are flags of the search that makes one
        raise FitplanError(
            err.message,
            f"{err.hint + ': ' if err.hint else ''}those are flags of `fitplan search`; search "
            f"again with them and --emit {args.emit} --out {args.out}, or --emit another format",
        ) from None


def _expressible(result: SearchResult, args: argparse.Namespace, limit: int = 3) -> list[int]:
    """1-based front members the format can express (for the refusal's hint)."""
    found = []
    for i in range(len(result.front)):
        if not _expresses(result, i, args):
            continue
        found.append(i + 1)
        if len(found) >= limit:
            break
    return found


def default_emit_pick(result: SearchResult, args: argparse.Namespace) -> int:
    """1-based: the first front member ``--emit`` writes, those that run with the stack first;
    the stack's default pick when none can be written."""
    return first_written(result, args) or result.default_pick()


def first_written(result: SearchResult, args: argparse.Namespace) -> int | None:
    """1-based: the first front member the format writes, those that run with the stack first
    (None: the format writes none of them)."""
    missing = result.stack_missing or ((),) * len(result.front)
    order = [result.default_pick()]
    order += [i for i in range(1, len(result.front) + 1) if not missing[i - 1]]
    order += range(1, len(result.front) + 1)
    seen: set[int] = set()
    for n in order:
        if n in seen:
            continue
        seen.add(n)
        if _expresses(result, n - 1, args):
            return n
    return None


def unwritten_line(result: SearchResult, args: argparse.Namespace, shown: int) -> str | None:
    """One line under the front: the shown members ``--emit`` does not write (the front is
    numbered as without --emit; None when it writes every one shown)."""
    upto = min(shown, len(result.front))
    unwritten = [n for n in range(1, upto + 1) if not _expresses(result, n - 1, args)]
    if not unwritten:
        return None
    return (
        f"--emit {args.emit} does not write front member{'s' if len(unwritten) > 1 else ''} "
        f"{', '.join(map(str, unwritten))} (the front is numbered as without --emit; "
        "--pick N names another)"
    )


def _expresses(result: SearchResult, index: int, args: argparse.Namespace) -> bool:
    from searcher.emitters import get_emitter

    emitter = get_emitter(args.emit)
    try:
        plan = _plan_of(result, index, args)
        check_backend(emitter, plan)
        emitter.emit(plan, emit_options(args, plan))
    except FitplanError:
        return False
    return True


def _plan_of(result: SearchResult, index: int, args: argparse.Namespace) -> Plan:
    from searcher.emitters.plan import make_plan, model_ref_for
    from searcher.search.views import member_json

    problem = result.problem
    member = result.front[index]
    config = member.config
    if config.method != "full" and "lora_dropout" in problem.pins:
        # the search keeps only whether dropout is on; the pinned value is the plan's
        config = config.model_copy(update={"lora_dropout": float(problem.pins["lora_dropout"])})
    return make_plan(
        config,
        problem.model,
        model_ref=model_ref_for(problem.model, getattr(args, "model", None)),
        gpu=problem.gpu.id,
        gpus_per_node=problem.gpus_per_node,
        member=member_json(member, problem),
    )


def emit_from_search(
    args: argparse.Namespace, result: SearchResult, also: Sequence[Output] = ()
) -> int:
    """After ``fitplan search``: write the launch files of the pick (exit 0), or say why not."""
    stream = sys.stderr if getattr(args, "json", False) else sys.stdout
    if not result.front:
        sys.stderr.write("fitplan: nothing fits: no launch config written\n")
        return 1
    n = args.pick or 1
    if n > len(result.front):
        raise FitplanError(f"--pick {n} is out of range: the front has {len(result.front)} members")
    plan = _plan_of(result, n - 1, args)
    try:
        return emit_plan(
            plan, args, stream, also, member=f"front member {n} of {len(result.front)}"
        )
    except FitplanError as err:
        if "cannot express" not in err.message:
            raise
        others = [i for i in _expressible(result, args) if i != n]
        hint = (
            f"front member(s) {', '.join(map(str, others))} can be expressed: --pick {others[0]}"
            if others
            else "no front member can be: pin the knob in the search"
        )
        raise FitplanError(
            f"pick {n}: {err.message}", f"{err.hint + '; ' if err.hint else ''}{hint}"
        ) from None
