"""The ``fitplan`` command line: parse, wire, render. Heavy modules load only inside commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from constraints import limits as L
from searcher.cli.args import FAMILY_HELP, config_args, gpu_args, model_args, search_args
from searcher.cli.check import register as register_check
from searcher.cli.fleet import register as register_fleet
from searcher.cli.inverse import register as register_max
from searcher.cli.launch import add_emit_args
from searcher.cli.launch import register as register_launch
from searcher.cli.only_command import OnlyCommand
from searcher.cli.serve import register as register_serve
from searcher.cli.speed_args import add_topology_args
from searcher.cli.stack import add_stack_arg, add_versions_arg
from searcher.cli.trace_args import depth_args, max_split_arg
from searcher.cli.usage_parser import FitplanParser as _Parser
from searcher.validate import file_name, integer, size

EXAMPLES = """\
examples:
  fitplan explain --model llama-3.1-8b --gpu rtx-4090 --method qlora --micro-batch 2 --seq-len 2048
  fitplan explain --params 7e9 --recipe bf16-pure --gpu 16GB
  fitplan search --model llama-3.1-8b --gpu a100-80gb --gpus 8 --target-batch 64 --seq-len 4096
  fitplan fits --gpu rtx-4090
  fitplan check axolotl.yaml --gpu rtx-4090      # will my config fit? (or: --oom "CUDA out of memory…")
  fitplan max seq-len --model llama-3.1-8b --gpu rtx-4090 --method lora
  fitplan scenario run scenarios/*.yaml
  fitplan fleet scenarios/fleet-example.yaml   # place jobs on GPU pools
  fitplan serve --model llama-3.1-8b --gpu h100-sxm --context 8192  # serving: concurrency, speed
  fitplan models            # the model catalog
  fitplan gpus              # the GPU catalog
  fitplan accuracy          # predictions against published measurements
  fitplan trace llama-3.1-8b                    # saved activations, traced on the meta device
  fitplan measure --model llama-3.2-1b --steps 3  # real steps (CUDA: memory; CPU: time)
  fitplan autotune --model llama-3.2-1b --target-batch 16 --trials 8  # measured trials
"""


def _report_args(p: argparse.ArgumentParser, force: bool) -> None:
    p.add_argument(
        "--report",
        metavar="HTML",
        type=file_name,
        help="write one self-contained HTML page (plotly; pip install 'fitplan[report]')",
    )
    if force:
        p.add_argument("--force", action="store_true", help="overwrite the --report file")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``fitplan`` parser; with ``command``, only that subcommand's arguments are built
    (the others' add_argument calls were half of a cold explain's parsing)."""
    parser = _Parser(
        prog="fitplan",
        description="What LLM training configuration fits on your GPUs, and which is fastest and cheapest.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="fitplan 0.1.0")
    sub: Any = OnlyCommand(
        parser.add_subparsers(
            # prog given: argparse would format the usage to find it (a formatter, shutil)
            dest="command",
            metavar="COMMAND",
            parser_class=_Parser,
            prog=parser.prog,
        ),
        command,
    )

    p = sub.add_parser(
        "explain",
        help="memory breakdown of one configuration",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model_args(p)
    gpu_args(p)
    config_args(p)
    add_topology_args(p)
    add_stack_arg(p)
    add_versions_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--exact",
        action="store_true",
        help="also trace two real training steps on fake tensors and replay the CUDA caching "
        "allocator over them (needs the measure extra)",
    )
    max_split_arg(p)
    depth_args(p)
    _report_args(p, force=True)
    p.add_argument(
        "--detail",
        action="store_true",
        help="the full breakdown: bytes, GB and GiB, bytes per parameter (default: GiB)",
    )
    p.set_defaults(handler="searcher.cli.commands:cmd_explain")

    p = sub.add_parser(
        "trace-step",
        help="trace real training steps on fake tensors: peak allocated vs the analytic model",
        description="Run two training steps of the configuration (the HF model from its config, "
        "PEFT, the bitsandbytes NF4 emulation, the optimizer) on fake CPU tensors, count every "
        "allocation, replay the CUDA caching allocator over them (torch 2.13's rules), and print "
        "the second step's peak allocated and reserved, its moment and composition beside "
        "fitplan's analytic phases and terms.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model_args(p)
    gpu_args(p)
    config_args(p)
    depth_args(p)
    p.add_argument(
        "--adamw-impl",
        choices=["fused", "foreach"],
        default="fused",
        help="torch AdamW implementation for --optimizer adamw (default: fused, HF Trainer's)",
    )
    p.add_argument(
        "--autocast",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="forward under torch.autocast in the compute dtype, as HF Trainer with bf16=True "
        "runs it (default: the recipe's)",
    )
    max_split_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler="searcher.cli.step:cmd_trace_step")

    p = sub.add_parser(
        "search",
        help="Pareto-optimal configurations that fit, ranked by throughput cost",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model_args(p)
    gpu_args(p)
    search_args(p)
    config_args(p, search=True)
    add_stack_arg(p)
    add_versions_arg(p)
    p.add_argument(
        "--detail",
        action="store_true",
        help="the chosen member's full breakdown: bytes, GB and GiB (default: GiB)",
    )
    p.add_argument(
        "--verify",
        type=integer(L.VERIFY_MEMBERS),
        default=None,
        metavar="K",
        help="trace the top K members of the front on fake tensors (two training steps) and show "
        "the traced peak allocated beside the analytic one (needs the measure extra)",
    )
    add_emit_args(p)
    _report_args(p, force=False)  # --force comes with the emit options
    p.set_defaults(handler="searcher.cli.commands:cmd_search")

    p = sub.add_parser(
        "fits", help="what fits on my card: every catalog model × inference, QLoRA, LoRA, full"
    )
    gpu_args(p, default_gpu="rtx-4090")
    p.add_argument(
        "--models", nargs="+", metavar="NAME|PATH", help="models to check (default: the catalog)"
    )
    p.add_argument("--family", metavar="TYPE", help=FAMILY_HELP)
    p.add_argument(
        "--seq-len",
        type=integer(L.SEQ_LEN),
        default=2048,
        help="training sequence / inference context (default 2048)",
    )
    p.add_argument(
        "--target-batch",
        type=integer(L.TARGET_BATCH),
        default=8,
        help="effective batch for the training columns (default 8)",
    )
    p.add_argument(
        "--cpu-ram",
        type=size(L.CPU_RAM, "--cpu-ram"),
        help="CPU RAM per node for offload, e.g. 64GiB (default 256GiB)",
    )
    p.add_argument(
        "--cheapest-for",
        metavar="MODEL",
        help="instead: the cheapest catalog GPU that fits this model's job (see fitplan max)",
    )
    add_stack_arg(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.cli.commands:cmd_fits")

    register_max(sub, model_args, gpu_args, search_args, config_args)

    p = sub.add_parser(
        "scenario", help="run the worked examples in scenarios/*.yaml and check them"
    )
    ssub = p.add_subparsers(dest="scenario_command", metavar="run", parser_class=_Parser)
    r = ssub.add_parser("run", help="evaluate scenario files; exit 1 on a miss")
    r.add_argument("files", nargs="+", help="scenario YAML files")
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler="searcher.cli.commands:cmd_scenario_run")

    register_launch(sub)
    register_fleet(sub)
    register_check(sub)
    register_serve(sub)

    p = sub.add_parser("models", help="list the model catalog")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--types", action="store_true", help="list the config.json model_types fitplan reads"
    )
    p.set_defaults(handler="searcher.cli.commands:cmd_models")

    p = sub.add_parser("gpus", help="list the GPU catalog")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.cli.commands:cmd_gpus")

    _ground_truth_commands(sub)
    return parser


# ---- ground truth: measure / trace / accuracy (issue 4) -------------------------------------


def _ground_truth_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "measure",
        help="run a few real training steps (random weights) and compare with the prediction",
        description="Build the model from its config with random weights (no download), apply "
        "the configuration, run a few optimizer steps and record peak memory (CUDA) and step "
        "time. On the CPU only the step time is measured.",
    )
    p.add_argument("--model", required=True, metavar="NAME|PATH", help="catalog id or config.json")
    p.set_defaults(
        params=None, trainable_params=None, layers=None, hidden=None, vocab=None, heads=None
    )
    gpu_args(p, default_gpu=None)
    config_args(p)
    p.add_argument("--steps", type=integer(L.STEPS), default=3, help="optimizer steps (default 3)")
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cuda or cpu")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="CSV",
        help="print the result as JSON; with a file, also append the calibration CSV row to it",
    )
    p.set_defaults(handler="searcher.truth.measure:cmd_measure")

    p = sub.add_parser(
        "autotune",
        help="measured trials on this device, driven by optuna and seeded with the analytic front",
        description="Search analytically, then measure real training steps of the candidates on "
        "this device (random weights), the Pareto front first; an out-of-memory trial is pruned. "
        "Reports the measured best.",
    )
    p.add_argument("--model", required=True, metavar="NAME|PATH", help="catalog id or config.json")
    p.set_defaults(
        params=None,
        trainable_params=None,
        layers=None,
        hidden=None,
        vocab=None,
        heads=None,
        max_gpus=1,
        gpus_per_node=1,
    )
    gpu_args(p, default_gpu=None)
    p.add_argument(
        "--target-batch",
        type=integer(L.TARGET_BATCH),
        default=8,
        help="effective batch (default 8)",
    )
    p.add_argument(
        "--seq-len", type=integer(L.SEQ_LEN), help="sequence length (default 2048 or the context)"
    )
    p.add_argument(
        "--cpu-ram",
        type=size(L.CPU_RAM, "--cpu-ram"),
        help="refused: measured trials do not offload, so CPU RAM changes nothing",
    )
    config_args(p, search=True)
    p.add_argument(
        "--trials", type=integer(L.MEASURED_TRIALS), default=8, help="measured trials (default 8)"
    )
    p.add_argument(
        "--steps", type=integer(L.STEPS), default=3, help="optimizer steps per trial (default 3)"
    )
    p.add_argument(
        "--candidates",
        type=integer(L.CANDIDATES),
        default=64,
        help="candidates beyond the front (default 64)",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cuda or cpu")
    p.add_argument("--seed", type=integer(L.SEED), default=0, help="sampler seed (default 0)")
    p.add_argument(
        "--storage", help="optuna RDB URL to share the study, e.g. sqlite:///autotune.db"
    )
    p.add_argument("--study-name", default="fitplan-autotune")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.truth.autotune:cmd_autotune")

    p = sub.add_parser(
        "trace",
        help="trace the real HF model on the meta device: parameters and saved activations",
        description="Build the Hugging Face model on PyTorch's meta device, count its parameters "
        "and measure the bytes saved for backward per layer per token (flash attention emulated "
        "as the CUDA kernel saves it), against fitplan's activation model.",
    )
    p.add_argument("model", metavar="MODEL", help="catalog id or config.json")
    p.add_argument(
        "--layers", type=integer(L.TRACE_LAYERS), default=2, help="layers to trace (default 2)"
    )
    p.add_argument("--batch", type=integer(L.MICRO_BATCH), default=2)
    p.add_argument("--seq-len", type=integer(L.TRACE_SEQ_LEN), default=256)
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--attention", choices=["flash", "eager"])
    p.add_argument("--checkpointing", choices=["none", "selective", "full"])
    p.add_argument("--tensors", action="store_true", help="list the saved tensors of one layer")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.truth.trace_command:cmd_trace")

    p = sub.add_parser(
        "accuracy",
        help="predictions against measured memory and throughput (the calibration rows, or yours)",
    )
    p.add_argument(
        "csv",
        nargs="*",
        metavar="CSV",
        help="memory or throughput CSVs (default: the shipped rows)",
    )
    p.add_argument("--all", action="store_true", help="list every throughput row")
    p.add_argument("--excluded", action="store_true", help="list the rows left out and why")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.truth.accuracy:cmd_accuracy")


def _load(handler: str) -> Callable[[argparse.Namespace], int]:
    import importlib

    module, name = handler.split(":")
    fn: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return fn


#: the parser of this process's command, once built, and the command it was built for (None:
#: all); advice reads its option strings
_BUILT: list[tuple[argparse.ArgumentParser, str | None]] = []


def current_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser :func:`main` parsed with where it has ``command``'s arguments, else a new
    one with them: built once per process (~10 ms)."""
    if not _BUILT or _BUILT[-1][1] not in (None, command):
        _BUILT.append((build_parser(command), command))
    return _BUILT[-1][0]


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = given[0] if given and not given[0].startswith("-") else None
    parser = build_parser(command)
    _BUILT[:] = [(parser, command)]
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, or a usage error already printed
        return stop.code if isinstance(stop.code, int) else 2
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the page's commands
    handler = getattr(args, "handler", None)
    if handler is None:
        if args.command == "scenario":
            parser.error("scenario needs a subcommand: fitplan scenario run FILE…")
        parser.print_help()
        return 0
    try:
        return _load(handler)(args)
    except KeyboardInterrupt:
        sys.stderr.write("fitplan: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # one line for the user, never a traceback
        from searcher.cli.errors import user_message
        from searcher.validate import one_line

        message = user_message(err)
        if message is None:
            return _internal_error(err)
        sys.stderr.write(f"fitplan: error: {one_line(message)}\n")
        return 2


#: exit code of a fitplan bug (not bad input): EX_SOFTWARE from sysexits.h
EXIT_INTERNAL_ERROR = 70


def _internal_error(err: BaseException) -> int:
    """A bug: one line naming it (FITPLAN_DEBUG=1 re-raises for the traceback)."""
    import os

    from searcher.validate import one_line

    if os.environ.get("FITPLAN_DEBUG"):
        raise err
    where = ""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    text = one_line(f"{type(err).__name__}: {err}", 200)
    sys.stderr.write(
        f"fitplan: internal error{where}: {text} (a fitplan bug: please report it; "
        "FITPLAN_DEBUG=1 shows the traceback)\n"
    )
    return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
