"""``fitplan max seq-len | micro-batch | gpus | cheapest-gpu``: the inverse questions.

The model and pins are those of ``fitplan search``; the answer is the extreme value and the
configuration (the cheapest that fits there) that achieves it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from searcher.validate import integer

QUESTIONS = ("seq-len", "micro-batch", "gpus", "cheapest-gpu")
#: GPUs `max gpus` may use when --gpus does not say
DEFAULT_GPU_BOUND = 8


def register(
    sub: argparse._SubParsersAction, model_args, gpu_args, search_args, config_args
) -> None:
    """``fitplan max``, with the model, hardware, search and pin options of ``search``."""
    p = sub.add_parser(
        "max",
        help="inverse questions: longest sequence, largest micro-batch, fewest GPUs, cheapest GPU",
        description="Bisection over exact exhaustive searches: the longest --seq-len, the largest "
        "micro-batch, the fewest GPUs (up to --gpus, default 8) for which some configuration fits, "
        "or every priced catalog GPU that fits, cheapest per token first.",
    )
    p.add_argument("question", choices=list(QUESTIONS))
    model_args(p)
    gpu_args(p)
    search_args(p)
    config_args(p, search=True)
    p.add_argument(
        "--max-seq-len",
        type=integer(L.SEQ_LEN),
        help="seq-len: the longest to probe (default: the context)",
    )
    from searcher.cli.stack import add_stack_arg

    add_stack_arg(p)
    p.set_defaults(handler="searcher.cli.inverse:cmd_max")


def _problem(args: argparse.Namespace):
    from searcher.inputs import search_problem

    if args.question == "gpus" and args.gpus is None:
        args.gpus = DEFAULT_GPU_BOUND
    if args.question == "seq-len" and args.seq_len is None:
        args.seq_len = 1  # a placeholder the bisection replaces
    return search_problem(args)


def cmd_max(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from searcher.cli.stack import print_stack_line, stack_of
    from searcher.search.inverse import cheapest_gpus, max_micro_batch, max_seq_len, min_gpus

    if not args.model and args.params is None:
        raise FitplanError(
            "fitplan max needs a model", "add --model NAME, a config.json path or org/name"
        )
    if args.question == "micro-batch" and args.micro_batch is not None:
        raise FitplanError("max micro-batch searches the micro-batch: drop --micro-batch")
    stack = stack_of(args)  # a bad --stack is refused before any work
    # every probe keeps to the stack: unpinned knobs narrowed, pins kept (and marked)
    problem = replace(_problem(args), stack=stack.packages)
    if not args.json:
        print_stack_line(stack)
    if args.question == "cheapest-gpu":
        options = cheapest_gpus(problem)
        if args.json:
            _dump(
                {
                    "question": "cheapest-gpu",
                    "stack": sorted(stack.packages),
                    "options": [_option_json(o, problem) for o in options],
                }
            )
        else:
            _print_cheapest(options, problem)
        return 0 if options else 1
    if args.question == "seq-len":
        answer = max_seq_len(problem, args.max_seq_len)
    elif args.question == "micro-batch":
        answer = max_micro_batch(problem)
    else:
        answer = min_gpus(problem)
    if args.json:
        _dump(
            {
                "question": answer.question,
                "value": answer.value,
                "bound": answer.bound,
                "limited_by_bound": answer.limited_by_bound,
                "probes": answer.probes,
                "stack": sorted(stack.packages),
                "member": _member_json(answer.member, problem) if answer.member else None,
            }
        )
    else:
        _print_answer(answer, problem)
    return 0 if answer.value is not None else 1


def _dump(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _option_json(o, problem) -> dict[str, Any]:
    return {
        "gpu": o.gpu_id,
        "name": o.gpu_name,
        "usd_per_gpu_hour": o.usd_per_gpu_hour,
        "member": _member_json(o.member, problem),
    }


def _member_json(m, problem) -> dict[str, Any]:
    """search --json's member, with what it needs beyond the stack (a pin outside it)."""
    from searcher.search.stack import missing_for
    from searcher.search.views import member_json

    missing = missing_for(m.config, problem.stack, problem.framework)
    return {**member_json(m, problem), "needs_outside_stack": list(missing)}


def _needs(m, problem) -> str:
    """' · needs X (outside the stack)' for a member that a pin took outside the stack."""
    from searcher.search.stack import missing_for

    missing = missing_for(m.config, problem.stack, problem.framework)
    return f" · needs {', '.join(missing)} (outside the stack)" if missing else ""


def _print_answer(answer, problem) -> None:
    from constraints.units import GiB
    from searcher.terminal import console

    con = console()
    what = {
        "seq_len": "longest sequence",
        "micro_batch": "largest micro-batch",
        "gpus": "fewest GPUs",
    }[answer.question]
    where = f"{problem.model.name} on {problem.gpu.name}"
    if answer.value is None:
        con.print(f"{what}: nothing fits ({where}, up to {answer.bound})", markup=False)
        return
    bound = f" (the bound probed: {answer.bound})" if answer.limited_by_bound else ""
    con.print(
        f"{what}: {answer.value}{bound} — {where}, {answer.probes} exhaustive searches",
        markup=False,
    )
    m = answer.member
    con.print(f"  achieved by: {member_line(m)}", markup=False)
    con.print(
        f"  peak {m.needed / GiB:.2f} GiB per GPU, {m.tokens_per_s:,.0f} tokens/s"
        + _needs(m, problem),
        markup=False,
    )


def _print_cheapest(options, problem) -> None:
    from constraints.units import GiB
    from searcher.terminal import console

    con = console()
    if not options:
        con.print(
            f"no priced catalog GPU fits {problem.model.name} (up to {problem.max_gpus} GPUs)",
            markup=False,
        )
        return
    con.print(
        f"catalog GPUs that fit {problem.model.name}, cheapest per token first:", markup=False
    )
    for o in options:
        m = o.member
        con.print(
            f"  {o.gpu_id:<14} ${m.usd_per_mtok:.3f}/M tokens  ${o.usd_per_gpu_hour:.2f}/GPU-h  "
            f"{m.gpus} GPU(s)  {m.needed / GiB:.1f} GiB  {member_line(m)}{_needs(m, problem)}",
            markup=False,
        )


def member_line(m) -> str:
    from searcher.cli.front_table import levers_brief, method_brief, precision_brief

    c = m.config
    return (
        f"{method_brief(c)}, {precision_brief(c)}, {c.optimizer}, "
        f"micro-batch {c.micro_batch} × accumulation {c.grad_accum}, {c.seq_len} tokens, "
        f"tp {c.tp} · pp {c.pp} · dp {c.dp}, {levers_brief(c)}"
    )


def cmd_cheapest_for(args: argparse.Namespace) -> int:
    """``fits --cheapest-for MODEL``: the cheapest catalog GPU for that job."""
    ns = argparse.Namespace(
        model=args.cheapest_for,
        params=None,
        trainable_params=None,
        layers=None,
        hidden=None,
        vocab=None,
        heads=None,
        gpu="h100-sxm",
        gpus=args.gpus,
        headroom=args.headroom,
        price=None,
        method=None,
        rank=None,
        lora_targets=None,
        lora_dropout=None,
        recipe=None,
        weight_dtype=None,
        adapter_dtype=None,
        compute_dtype=None,
        optimizer=None,
        quant=None,
        micro_batch=None,
        checkpointing=None,
        attention=None,
        loss=None,
        fused_ce=False,
        zero=None,
        offload=None,
        tp=None,
        pp=None,
        optimizer_in_backward=False,
        allow_long_seq=False,
        seq_len=args.seq_len,
        target_batch=args.target_batch,
        max_gpus=None,
        gpus_per_node=8,
        cpu_ram=args.cpu_ram,
        question="cheapest-gpu",
        json=args.json,
        max_seq_len=None,
        stack=args.stack,
    )
    return cmd_max(ns)
