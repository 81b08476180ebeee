"""``fitplan check CONFIG…``: will this config fit, and if not (or after an OOM), what to change.

Reads the user's training config (axolotl, torchtune, LLaMA-Factory, TrainingArguments + PEFT +
DeepSpeed, accelerate, or fitplan's own plan.json), says which keys it read, ignored and could
not map, explains the memory on the GPU, and writes each suggested change as a unified diff of
the user's own files — every diff re-read and re-checked before it is shown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from searcher.validate import integer, number


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="will my training config fit? the breakdown, and the edits that make it fit",
        description="Read a training config (axolotl, torchtune, LLaMA-Factory, HF TrainingArguments "
        "+ PEFT adapter_config.json + DeepSpeed JSON, accelerate, or fitplan's plan.json), map it "
        "to fitplan's knobs, and say whether it fits; when it does not (or with --oom), the "
        "smallest changes that make it fit, ranked by throughput lost, as diffs of your files.",
    )
    p.add_argument("configs", nargs="+", metavar="CONFIG", help="config files (or a folder)")
    p.add_argument(
        "--model", metavar="NAME|PATH|ORG/NAME", help="override the model the config names"
    )
    p.add_argument("--gpu", help="catalog id or a size (default: the card in --oom, or the plan's)")
    p.add_argument(
        "--gpus",
        type=integer(L.GPU_COUNT),
        help="number of GPUs (default: what the config says, or 1)",
    )
    p.add_argument(
        "--headroom", type=number(L.FRACTION), default=None, help="fraction kept free (default 0.1)"
    )
    p.add_argument(
        "--seq-len", type=integer(L.SEQ_LEN), help="sequence length when the config sets none"
    )
    p.add_argument(
        "--oom", metavar="MESSAGE", help='the "CUDA out of memory. Tried to allocate …" text'
    )
    p.add_argument("--top", type=integer(L.ROWS), default=5, help="suggestions to show (default 5)")
    p.add_argument(
        "--keys", action="store_true", help="list every key with what fitplan did with it"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from searcher.cli.stack import add_stack_arg

    add_stack_arg(p)
    p.set_defaults(handler="searcher.cli.check:cmd_check")


def gpu_for_capacity(capacity: int) -> tuple[Any, str | None]:
    """The catalog card whose driver-reported memory holds this CUDA-reported capacity (within
    5 %: cudaMemGetInfo's total is the driver number minus what the driver reserves), with the
    capacity set to what CUDA reported; a custom card of that size otherwise. Where several
    cards hold it (a 23.6 GiB total: RTX 3090, RTX 4090, RTX A5000), a card of exactly that size,
    and a note that names them and asks for --gpu (their speeds differ)."""
    from constraints.gpus import custom_gpu, gpu_catalog
    from constraints.units import GiB

    size = f"{capacity / GiB:.2f}GiB"
    near = [
        g
        for g in gpu_catalog().values()
        if 0.95 * g.memory_bytes <= capacity <= 1.005 * g.memory_bytes
    ]
    if not near:
        return custom_gpu(size), None
    if len(near) > 1:
        names = ", ".join(g.name for g in near)
        note = (
            f"the OOM message's {capacity / GiB:.2f} GiB could be any of {names}: memory is "
            "checked on a card of exactly that size, without speeds; add --gpu NAME to say which"
        )
        return custom_gpu(size), note
    best = near[0]
    card = best.model_copy(
        update={"memory_bytes": capacity, "name": f"{best.name} (as CUDA reports it)"}
    )
    return card, None


def _verified_edits(reading, cfg, new, overrides, gpus):
    """({path: (new text, diff)}, the config the edited files mean) when the edits re-read into
    ``new`` up to what the format fixes itself (the adapter dtype); None otherwise."""
    from searcher.check.doc import unified_diff
    from searcher.check.load import apply_edits, read_configs, train_config

    if reading.writer is None:
        return None
    edits = reading.writer(reading, cfg, new)
    if not edits:
        return None
    texts = apply_edits(reading, edits)
    try:
        again = read_configs(
            [str(d.path) for d in reading.docs if d in reading.docs[:1] or d.path.suffix],
            overlay=texts,
        )
        back = train_config(again, overrides, gpus)
    except (FitplanError, ValueError):  # the edited files mean no valid configuration
        return None
    if back.model_copy(update={"adapter_dtype": new.adapter_dtype}) != new:
        return None
    docs = {d.path.resolve(): d for d in reading.docs}
    return {p: (t, unified_diff(docs[p], t)) for p, t in texts.items()}, back


def cmd_check(args: argparse.Namespace) -> int:
    from searcher.check.load import read_configs, train_config
    from searcher.check.oom import diagnosis, parse_oom
    from searcher.check.suggest import KIND_NAMES, suggest
    from searcher.hub import resolve_any_model
    from searcher.inputs import headroom_from_args
    from searcher.search.levers import advise as explain

    if args.top < 1:
        raise FitplanError(f"--top must be at least 1, got {args.top}")
    if args.gpus is not None and args.gpus < 1:
        raise FitplanError(f"--gpus must be at least 1, got {args.gpus}")
    if args.seq_len is not None and args.seq_len < 1:
        raise FitplanError(f"--seq-len must be positive, got {args.seq_len}")
    from searcher.cli.stack import stack_of
    from searcher.search.stack import with_stack_kernels

    stack = stack_of(args)  # a bad --stack is refused before any file is read
    oom = parse_oom(args.oom) if args.oom else None
    headroom = headroom_from_args(args)
    gpu = None
    if args.gpu:
        from constraints.gpus import resolve_gpu

        gpu = resolve_gpu(args.gpu)
    card_note = None
    if gpu is None and oom is not None:
        gpu, card_note = gpu_for_capacity(oom.capacity)
    reading = read_configs(args.configs, gpu_bf16=gpu.supports_bf16 if gpu else True)
    if card_note:
        reading.notes.append(card_note)
    if gpu is None and reading.gpu:
        from constraints.gpus import resolve_gpu

        gpu = resolve_gpu(reading.gpu)
    if gpu is None:
        raise FitplanError(
            "no GPU given", "add --gpu NAME (see `fitplan gpus`), --gpu 24GiB, or --oom MESSAGE"
        )
    model_ref = args.model or reading.model
    if not model_ref:
        raise FitplanError(
            reading.no_model or f"{args.configs[0]} names no model",
            "add --model NAME, a config.json path or org/name",
        )
    try:
        spec = with_stack_kernels(resolve_any_model(model_ref), stack)
    except FitplanError as err:
        if args.model or not err.message.startswith(f"--model {model_ref}"):
            raise
        # the model came from the file, not from --model: say where it was named
        where = next((u for u in reading.uses if u.field == "model"), None)
        origin = f"{Path(where.file).name}: {where.key}" if where else str(args.configs[0])
        raise FitplanError(
            err.message.replace("--model ", f"{origin} names ", 1),
            f"{err.hint}; or check with --model NAME from `fitplan models`"
            if err.hint
            else "pass --model NAME from `fitplan models`",
        ) from None
    overrides: dict[str, Any] = {}
    if args.seq_len is not None:
        overrides["seq_len"] = args.seq_len
    elif "seq_len" not in reading.fields:
        from searcher.inputs import default_seq_len

        overrides["seq_len"] = default_seq_len(spec)
        reading.notes.append(
            f"the config sets no sequence length: {overrides['seq_len']} assumed (--seq-len)"
        )
    cfg = train_config(reading, overrides, args.gpus)
    e = explain(spec, cfg, gpu, headroom)
    suggestions: list[tuple[Any, dict[Path, tuple[str, str]]]] = []
    if not e.verdict.fits or oom is not None:
        from searcher.check.suggest import Suggestion, evaluate

        cache: dict[Any, Any] = {}

        def accept(new) -> bool:
            if new not in cache:
                got = _verified_edits(reading, cfg, new, overrides, args.gpus)
                if got is not None and got[1] != new:  # the file means a slightly other config
                    need, fits, _tps, room = evaluate(spec, [got[1]], gpu, headroom)
                    got = got if fits[0] and need[0] + reserve <= room else None
                cache[new] = got
            return cache[new] is not None

        reserve = 0
        if oom is not None and oom.in_use > e.verdict.needed:
            # the run held more than fitplan predicts for its peak: keep the difference free
            reserve = oom.in_use - e.verdict.needed
            reading.notes.append(
                f"the failed run held {oom.in_use / 2**30:.2f} GiB, more than the predicted peak of "
                f"{e.verdict.needed / 2**30:.2f} GiB: the suggestions keep the "
                f"{reserve / 2**30:.2f} GiB difference free"
            )
        for s in suggest(spec, cfg, gpu, headroom, accept=accept, limit=args.top, reserve=reserve):
            edits, back = cache[s.config]
            if back != s.config:
                needed, _fits, tps, usable = evaluate(spec, [back], gpu, headroom)
                s = Suggestion(
                    s.changes, s.kind, back, needed[0], usable, tps[0], s.tokens_per_s_before
                )
            suggestions.append((s, edits))
    from searcher.search.stack import framework_of, missing_for

    framework = framework_of(reading.format)  # torchtune's QLoRA needs torchao, not bitsandbytes

    def needs(c: Any) -> tuple[str, ...]:
        return missing_for(c, stack.packages, framework)

    # the edits the stack can apply first, each group in its own order (least throughput lost)
    suggestions.sort(key=lambda pair: bool(needs(pair[0].config)))

    from searcher.search.stack_profile import StackProfile, assumed_lines

    read = frozenset(reading.fields) | frozenset(overrides) | {"backend"}  # the files launch it
    assumed = assumed_lines(StackProfile.resolve(framework), cfg, gpu, spec, (), read)
    if args.json:
        out = _json(reading, spec, cfg, e, oom, suggestions, KIND_NAMES)
        out["assumed"] = assumed
        out["stack"] = sorted(stack.packages)
        out["needs_outside_stack"] = list(needs(cfg))
        for entry, (s, _edits) in zip(out["suggestions"], suggestions, strict=True):
            entry["needs_outside_stack"] = list(needs(s.config))
        sys.stdout.write(json.dumps(out, indent=2, default=str) + "\n")
    else:
        from searcher.cli.stack import needs_line, print_assumed, print_stack_line

        print_stack_line(stack)
        print_assumed(assumed)
        _print(reading, spec, cfg, e, oom, suggestions, KIND_NAMES, args.keys, diagnosis, needs)
        line = needs_line(needs(cfg), "this configuration", framework)
        if line:
            from searcher.terminal import console

            console().print(f"[yellow]{line}[/]")
    return 0 if e.verdict.fits else 1


def _config_json(cfg) -> dict[str, Any]:
    out: dict[str, Any] = cfg.model_dump()
    out["gpus"] = cfg.gpus
    out["rank"] = cfg.lora_rank if cfg.method != "full" else None
    return out


def _json(reading, spec, cfg, e, oom, suggestions, kinds) -> dict[str, Any]:
    from dataclasses import asdict

    from searcher.search.views import explanation_json

    return {
        "format": reading.format,
        "files": [str(d.path) for d in reading.docs],
        "model": {"id": spec.id, "name": spec.name, "source": spec.source},
        "config": _config_json(cfg),
        "keys": [u.json() for u in reading.uses],
        "key_counts": reading.counts(),
        "notes": reading.notes,
        "explain": explanation_json(e),
        "fits": e.verdict.fits,
        "oom": {**asdict(oom), "fragmentation": oom.fragmentation} if oom else None,
        "suggestions": [
            {
                "changes": list(s.changes),
                "changes_what": kinds[s.kind],
                "config": _config_json(s.config),
                "needed_bytes": s.needed,
                "usable_bytes": s.usable,
                "tokens_per_s": s.tokens_per_s,
                "throughput_lost": s.throughput_lost,
                "diff": "".join(d for _t, d in edits.values()),
            }
            for s, edits in suggestions
        ],
    }


def _print(reading, spec, cfg, e, oom, suggestions, kinds, all_keys, diagnosis, needs) -> None:
    from constraints.breakdown import peak_bytes
    from constraints.units import GiB
    from searcher.check.reading import IGNORED, READ, UNMAPPED
    from searcher.cli.front_table import precision_brief
    from searcher.cli.render import print_explanation
    from searcher.terminal import console

    con = console()
    files = ", ".join(str(d.path) for d in reading.docs)
    con.print(f"[bold]{reading.format}[/] config: {files}")
    con.print(
        f"model: {spec.name}"
        + (f" ({spec.source})" if spec.source.startswith("huggingface.co") else "")
    )
    c = reading.counts()
    con.print(
        f"keys: {c[READ]} read, {c[UNMAPPED]} not mapped, {c[IGNORED]} ignored (--keys lists them)"
    )
    for u in reading.uses:
        if u.status == UNMAPPED or all_keys:
            tag = {READ: "read", UNMAPPED: "NOT MAPPED", IGNORED: "ignored"}[u.status]
            target = f" → {u.field}" if u.field else ""
            con.print(
                f"  {tag:>10}  {Path(u.file).name}:{u.key} = {u.value!r}{target}"
                + (f"  ({u.why})" if u.why else ""),
                markup=False,
                highlight=False,
            )
    for n in reading.notes:
        con.print(f"  note: {n}", markup=False)
    con.print(
        f"as fitplan knobs: {cfg.method}"
        + (f" r={cfg.lora_rank} {cfg.lora_targets}" if cfg.method != "full" else "")
        + f", {precision_brief(cfg)}, {cfg.optimizer}, micro-batch {cfg.micro_batch} × accumulation "
        f"{cfg.grad_accum} × {cfg.dp} GPU(s), {cfg.seq_len} tokens, checkpointing {cfg.checkpointing}, "
        f"attention {cfg.attention}, loss {cfg.loss}, ZeRO {cfg.zero}, offload {cfg.offload}",
        markup=False,
    )
    print_explanation(e, command="check")  # check advises by its numbered file edits
    if oom is not None:
        con.print("[bold]the out-of-memory message[/]")
        for line in diagnosis(oom):
            con.print(f"  {line}", markup=False)
        con.print(
            f"  fitplan predicts {e.verdict.needed / GiB:.2f} GiB reserved at the peak; the run had "
            f"{oom.in_use / GiB:.2f} GiB (held + requested) when it failed",
            markup=False,
        )
    if not suggestions:
        if not e.verdict.fits:
            con.print("no change of up to three knobs that your files can express makes it fit")
        return
    order = (
        "fewest changes (a card given by its size has no speed figures)"
        if e.gpu.custom
        else "throughput lost"
    )
    con.print(
        "[bold]changes that make it fit[/] (same training first, then optimizer numerics, then "
        f"the method; by {order}; apply with patch -p0):"
    )
    for i, (s, edits) in enumerate(suggestions, 1):
        lost = s.throughput_lost
        speed = (
            f"{lost:.0%} slower"
            if lost > 0.005
            else f"{-lost:.0%} faster"
            if lost < -0.005
            else "same speed"
        )
        rate = "" if e.gpu.custom else f", {s.tokens_per_s:,.4g} tokens/s ({speed})"
        lacking = needs(s.config)
        outside = f"; needs {', '.join(lacking)} (outside the stack)" if lacking else ""
        con.print(
            f"{i}. {' + '.join(s.changes)} [{kinds[s.kind]}]: peak "
            f"{peak_bytes(s.needed, e.gpu) / GiB:.2f} of {peak_bytes(s.usable, e.gpu) / GiB:.2f} "
            "GiB room" + rate + outside,
            markup=False,
        )
        for _text, diff in edits.values():
            con.print(diff.rstrip("\n"), markup=False, highlight=False)
