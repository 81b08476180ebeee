"""Command handlers: each parses nothing, wires the pieces, renders, and returns an exit code."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from constraints.errors import FitplanError


def _dump(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def cmd_explain(args: argparse.Namespace) -> int:
    from searcher.cli.render import print_explanation
    from searcher.inputs import explain_config
    from searcher.search.levers import advise
    from searcher.search.views import explanation_json

    if getattr(args, "report", None):
        from searcher.report.page import check_page_path

        check_page_path(args.report, args.force)
    from searcher.cli.stack import needs_line, print_assumed, print_stack_line, stack_of
    from searcher.search.stack import missing_for

    stack = stack_of(args)  # a bad --stack is refused before any work
    if getattr(args, "exact", False):
        from searcher.cli.step import cmd_explain_exact

        return cmd_explain_exact(args)
    spec, gpu, cfg, headroom, notes, assumed = explain_config(args)
    e = advise(
        spec,
        cfg,
        gpu,
        headroom,
        gpus_per_node=args.gpus_per_node,
        inter_node_gb_s=args.inter_node_gb_s,
        nvlink_domain=args.nvlink_domain,
    )
    if notes:
        e = e.model_copy(update={"notes": (*notes, *e.notes)})
    if getattr(args, "report", None):
        from searcher.report.page import write_page
        from searcher.report.search import explain_page_data

        path = write_page(explain_page_data(e, args.argv, headroom), args.report, force=args.force)
        sys.stderr.write(f"page written to {path}\n")
    missing = missing_for(cfg, stack.packages)
    if args.json:
        _dump({**explanation_json(e), "assumed": assumed, "needs_outside_stack": list(missing)})
    else:
        print_stack_line(stack)
        print_assumed(assumed)
        print_explanation(e, detail=getattr(args, "detail", False))
        line = needs_line(missing, "this configuration")
        if line:
            from searcher.terminal import console

            console().print(f"[yellow]{line}[/]")
    return 0 if e.verdict.fits else 1


def cmd_models(args: argparse.Namespace) -> int:
    if args.types:
        from searcher.cli.model_types import print_model_types

        return print_model_types(args.json)
    from constraints.models import catalog_ids, catalog_model
    from constraints.params import inventory
    from constraints.units import fmt_count

    rows: list[dict[str, Any]] = []
    for model_id in catalog_ids():
        spec = catalog_model(model_id)
        rows.append(
            {
                "id": model_id,
                "name": spec.name,
                "family": spec.family,
                "params": inventory(spec).total,
                "layers": spec.total_layers,
                "hidden": spec.hidden,
                "context": spec.max_position,
            }
        )
    if args.json:
        _dump(rows)
        return 0
    from rich.table import Table

    from searcher.terminal import console

    table = Table(title="model catalog (fitplan explain --model ID)", title_justify="left")
    id_width = max(len(r["id"]) for r in rows)
    for col in ("id", "name", "family", "params", "layers", "hidden", "context"):
        # ids and numbers whole (an id is what the user types); names fold rather than end in "…"
        text = col in ("name", "family")
        table.add_column(
            col,
            justify="left" if col in ("id", "name", "family") else "right",
            no_wrap=not text,
            overflow="fold" if text else "ellipsis",
            min_width=id_width if col == "id" else None,
        )
    for r in rows:
        table.add_row(
            r["id"],
            r["name"],
            r["family"],
            fmt_count(r["params"]),
            str(r["layers"]),
            str(r["hidden"]),
            str(r["context"] or "—"),
        )
    console().print(table)
    return 0


def cmd_gpus(args: argparse.Namespace) -> int:
    from constraints.gpus import gpu_catalog
    from constraints.units import GiB

    catalog = gpu_catalog()
    if args.json:
        _dump([g.model_dump() for g in catalog.values()])
        return 0
    from rich.table import Table

    from searcher.terminal import console

    table = Table(
        title="GPU catalog (fitplan explain --gpu ID, or --gpu 24GiB)", title_justify="left"
    )
    # ids and figures whole (an id is what the user types); name and features wrap
    for col in ("id", "name", "GiB", "bf16 TF", "GB/s", "link", "runs", "$/h"):
        text = col in ("name", "runs")
        table.add_column(
            col,
            justify="left" if col in ("id", "name", "runs") else "right",
            no_wrap=not text,
            overflow="fold" if text else "ellipsis",
            min_width=max(len(g) for g in catalog) if col == "id" else None,
        )
    for g in catalog.values():
        runs = [
            name
            for name, ok in (
                ("bf16", g.supports_bf16),
                ("fp8", g.supports_fp8),
                ("flash", g.supports_flash_attention),
            )
            if ok
        ]
        table.add_row(
            g.id,
            g.name,
            f"{g.memory_bytes / GiB:.2f}",
            f"{g.bf16_tflops or g.fp16_tflops:g}",
            f"{g.bandwidth_gb_s:g}",
            f"{g.interconnect_gb_s:g}" if g.interconnect_gb_s else "PCIe",
            " ".join(runs) or "fp16",
            f"{g.usd_per_gpu_hour:.2f}" if g.usd_per_gpu_hour else "—",
        )
    console().print(table)
    console().print(
        "[dim]GiB: what the driver reports; bf16 TF: dense tensor TFLOPS (fp16 where no bf16); "
        "GB/s: memory bandwidth; link: GB/s each way between cards (PCIe: no NVLink); runs: "
        "bf16, fp8, FlashAttention-2[/]"
    )
    return 0


def cmd_scenario_run(args: argparse.Namespace) -> int:
    from searcher.scenarios.runner import print_results, run_files

    results = run_files(args.files)
    if args.json:
        _dump([r.model_dump() for r in results])
    else:
        print_results(results)
    return 0 if all(r.ok for r in results) else 1


def run_cli_search(args: argparse.Namespace, stack: Any = None, *, keep_to_emit: bool = True):
    """The search of ``args``; with a ``stack`` (searcher.search.stack.Stack), plans outside
    it are marked and the default pick is the first inside it (search/stack_front.py). With
    ``--emit``, the space keeps to what the format writes unless ``keep_to_emit`` is False."""
    import dataclasses

    from searcher.inputs import search_problem
    from searcher.search.stack import framework_of
    from searcher.search.stack_front import run_stack_search
    from searcher.search.strategies import make_strategy
    from searcher.terminal import progress_reporter

    problem = search_problem(args)
    # what a plan needs depends on the framework of the launch files it is written for
    emit = getattr(args, "emit", None)
    from searcher.inputs import named_versions
    from searcher.search.stack_profile import StackProfile

    framework = framework_of(emit)
    profile = StackProfile.resolve(framework, named_versions(args))
    problem = dataclasses.replace(
        problem,
        framework=framework,
        emit_format=emit if keep_to_emit else None,
        **profile.search_fields(),
    )
    if stack is not None:
        problem = dataclasses.replace(problem, stack=stack.packages)
    strategy = make_strategy(
        args.strategy,
        trials=args.trials,
        seed=args.seed,
        storage=args.storage,
        study_name=getattr(args, "study_name", None),
    )
    with progress_reporter("searching") as progress:
        return run_stack_search(problem, strategy, progress, rank_by=args.rank_by)


def cmd_search(args: argparse.Namespace) -> int:
    from pathlib import Path

    from searcher.cli.render import front_csv_text, print_search
    from searcher.cli.stack import stack_of
    from searcher.files import Output, check_outputs, write_outputs
    from searcher.inputs import check_search_args
    from searcher.search.views import result_json

    if not args.model and args.params is None:
        from searcher.cli.parser import EXAMPLES

        sys.stderr.write("fitplan search needs a model. For example:\n" + EXAMPLES)
        return 2
    check_search_args(args)
    stack = stack_of(args)
    if args.verify is not None:
        from searcher.cli.verify import check_verify_args

        check_verify_args(args)
    if args.emit or args.out or args.pick is not None:
        from searcher.emitters.commands import check_emit_args

        check_emit_args(args)
    if args.report:
        from searcher.report.page import check_page_path

        check_page_path(args.report, args.force)
    if args.csv:
        check_outputs([Output(Path(args.csv), "", flag="--csv")], args.force)
    # one front, numbered alike with or without --emit (the members the format cannot write
    # are said under it); the format's own front only where it writes none of the whole one
    result = run_cli_search(args, stack, keep_to_emit=False)
    own_front = None
    if args.emit and result.front:
        from searcher.emitters.commands import first_written

        if first_written(result, args) is None:
            narrowed = run_cli_search(args, stack)
            if narrowed.front:
                result = narrowed
                own_front = (
                    f"--emit {args.emit} writes no member of the whole front: the front below "
                    "holds only the plans it writes, numbered on their own"
                )
    if args.pick is not None and result.front and args.pick > len(result.front):
        raise FitplanError(  # before anything is printed: the front is the answer's own
            f"--pick {args.pick}: the front has {len(result.front)} members",
            f"pick 1 to {len(result.front)}",
        )
    if args.pick is None and result.front:
        args.pick = result.default_pick()  # the first plan that runs with the stack
        if args.emit:  # ... and that the launch format writes
            from searcher.emitters.commands import default_emit_pick

            args.pick = default_emit_pick(result, args)
    outputs = (
        [Output(Path(args.csv), front_csv_text(result, args.tokens), flag="--csv")]
        if args.csv
        else []
    )
    if args.report:
        from searcher.report.page import page_html
        from searcher.report.search import search_page_data

        page = page_html(search_page_data(result, args.argv))
        outputs.append(Output(Path(args.report), page, flag="--report"))
    verified = None
    if args.verify is not None:
        from searcher.cli.verify import verify_front

        verified = verify_front(args, result)
    assumed = _search_assumed(result, args)
    if args.json:
        out = {**result_json(result, args.tokens), "assumed": assumed}
        if verified is not None:
            from searcher.cli.verify import verified_json

            out["verified"] = verified_json(verified)
        _dump(out)
    else:
        from searcher.cli.stack import print_stack_line

        print_stack_line(stack)
        from searcher.cli.stack import print_assumed

        print_assumed(assumed)
        print_search(
            result,
            args.top or 10,
            args.tokens,
            pick=args.pick or 1,
            detail=getattr(args, "detail", False),
            wide=getattr(args, "wide", False),
            notes=_emit_marks(args, result, own_front),
        )
        if verified is not None:
            from searcher.cli.verify import print_verified

            print_verified(verified)
    if args.emit:
        from searcher.emitters.commands import emit_from_search

        return emit_from_search(args, result, also=outputs)
    if outputs:
        write_outputs(outputs, force=args.force)
    return 0 if result.front else 1


def _emit_marks(args: argparse.Namespace, result: Any, own_front: str | None) -> list[str]:
    """Under the front: which members --emit does not write, or that the front is its own."""
    if not args.emit or not result.front:
        return []
    from searcher.emitters.commands import unwritten_line

    line = own_front or unwritten_line(result, args, args.top or 10)
    return [line] if line else []


def _search_assumed(result: Any, args: argparse.Namespace) -> list[str]:
    """What the pick takes from the stack (searcher.search.stack_profile): the knobs the search chose
    or the user pinned are not assumptions."""
    if not result.front:
        return []
    from constraints.config import TrainConfig
    from searcher.inputs import named_versions
    from searcher.search.stack_profile import StackProfile, assumed_lines

    pick = args.pick
    problem = result.problem
    member = result.front[min(max(pick or 1, 1), len(result.front)) - 1]
    chosen = frozenset(TrainConfig.model_fields) - {
        "adapter_dtype",
        "loss",
        "loss_chain",
        "kbit_saves_input",
    }
    given = chosen | frozenset(problem.pins)
    profile = StackProfile.resolve(problem.framework, named_versions(args))
    return assumed_lines(profile, member.config, problem.gpu, problem.model, (), given)


def _fits_assumed(args: argparse.Namespace) -> list[str]:
    """What every cell of the fits table takes from the stack rather than from the flags."""
    from constraints.units import GiB
    from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE
    from searcher.search.stack_profile import StackProfile

    out = [StackProfile.resolve().describe(), "LoRA / QLoRA adapters fp32 (PEFT's default)"]
    if not args.cpu_ram:
        ram = DEFAULT_CPU_RAM_PER_NODE / GiB
        out.append(f"{ram:,.0f} GiB of CPU RAM per node for offload (--cpu-ram to change)")
    return out


def cmd_fits(args: argparse.Namespace) -> int:
    if getattr(args, "cheapest_for", None):
        from searcher.cli.inverse import cmd_cheapest_for

        return cmd_cheapest_for(args)
    from constraints.models import catalog_ids
    from constraints.units import parse_size
    from searcher.cli.fits import fits_table
    from searcher.cli.render import print_fits
    from searcher.cli.stack import needs_line, print_assumed, print_stack_line, stack_of
    from searcher.hub import resolve_any_model as resolve_model
    from searcher.inputs import check_fits_args, gpu_from_args, headroom_from_args
    from searcher.terminal import progress_reporter

    check_fits_args(args)
    stack = stack_of(args)  # a bad --stack is refused before any work
    gpu = gpu_from_args(args)
    if args.seq_len is None or args.seq_len < 1:
        raise FitplanError(f"--seq-len must be positive, got {args.seq_len}")
    if args.target_batch < 1:
        raise FitplanError(f"--target-batch must be at least 1, got {args.target_batch}")
    if args.family is not None and not args.models:
        raise FitplanError("--family applies to config.json paths given with --models")
    specs = [
        resolve_model(m, family=args.family) if args.family else resolve_model(m)
        for m in dict.fromkeys(args.models or catalog_ids())
    ]
    with progress_reporter("checking models") as progress:
        rows = fits_table(
            specs,
            gpu,
            seq_len=args.seq_len,
            target_batch=args.target_batch,
            gpus=args.gpus if args.gpus is not None else 1,
            headroom=headroom_from_args(args),
            cpu_ram=parse_size(args.cpu_ram) if args.cpu_ram else None,
            progress=progress,
            stack=stack.packages,
        )
    if args.json:
        _dump([r.model_dump() for r in rows])
        return 0
    print_stack_line(stack)
    print_assumed(_fits_assumed(args))
    print_fits(rows, gpu, args.seq_len)
    cells = [c for r in rows for c in (r.inference, r.qlora, r.lora, r.full)]
    needed = sorted({p for c in cells for p in c.needs_outside_stack})
    line = needs_line([p for p in stack.missing if p in needed], "a plan marked above")
    if line:
        from searcher.terminal import console

        console().print(f"[yellow]{line}[/]")
    return 0
