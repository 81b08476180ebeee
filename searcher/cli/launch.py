"""Command-line registration of the launch-config options (kept out of searcher/cli/parser.py).

``add_emit_args(parser)`` adds --emit/--out/--pick/--force/… to ``fitplan search``;
``register(subparsers)`` adds ``fitplan launch PLAN.json --emit FORMAT --out DIR``.
Nothing heavy is imported here: ``fitplan --help`` stays fast.
"""

from __future__ import annotations

import argparse

from constraints import limits as L
from searcher.cli.only_command import Absorb
from searcher.cli.stack import add_stack_arg
from searcher.validate import file_name, integer

LAUNCH_EXAMPLES = """\
examples:
  fitplan search --model llama-3.1-8b --gpu a100-80gb --gpus 8 --emit deepspeed --out run/
  fitplan search --model qwen2.5-7b --gpu rtx-4090 --method qlora --emit hf --out qlora/ --pick 2
  fitplan search --model llama-3.1-8b --gpu h100-sxm --gpus 8 --json > front.json
  fitplan launch front.json --pick 3 --emit accelerate --out run/
  fitplan launch run/plan.json --emit torchtune --out tt/ --force
"""


def _formats_help() -> str:
    from searcher.emitters import format_names  # lists the formats' modules: only when shown

    return ", ".join(format_names())


def _common(g: argparse._ArgumentGroup, *, required: bool) -> None:
    g.add_argument(
        "--emit",
        metavar="FORMAT",
        required=required,
        help=f"launch format: {_formats_help()}",
    )
    g.add_argument(
        "--out",
        metavar="DIR",
        type=file_name,
        required=required,
        help="folder for the files (created if missing)",
    )
    g.add_argument("--force", action="store_true", help="overwrite files that exist")
    g.add_argument(
        "--lora-alpha",
        type=integer(L.LORA_ALPHA),
        metavar="N",
        help="LoRA alpha (fitplan has no alpha knob; default 2 × rank)",
    )


def add_emit_args(p: argparse.ArgumentParser) -> None:
    """--emit and friends for ``fitplan search`` (the top pick, or --pick N)."""
    if isinstance(p, Absorb):  # search is not this process's command
        return
    g = p.add_argument_group("launch config (write the files that run a pick of the front)")
    _common(g, required=False)
    g.add_argument(
        "--pick",
        type=integer(L.ROWS),
        metavar="N",
        help="front member to emit, 1 = cheapest (default 1)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "launch",
        help="write the launch files (DeepSpeed, accelerate, HF Trainer, torchrun, axolotl, torchtune) of a plan",
        description="Write the files that run a plan: one member of `fitplan search --json` "
        "(or the whole output with --pick N). Refuses, naming the knob, what a format cannot express.",
        epilog=LAUNCH_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if isinstance(p, Absorb):  # not this process's command: no need to list the formats
        return
    p.add_argument(
        "plan", metavar="PLAN.json", help="a plan: one member of `fitplan search --json`"
    )
    g = p.add_argument_group("launch config")
    _common(g, required=True)
    g.add_argument(
        "--pick",
        type=integer(L.ROWS),
        metavar="N",
        help="with a whole search result: the front member (default 1)",
    )
    g.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="the model, when the plan's is not in the catalog (its config.json)",
    )
    g.add_argument(
        "--gpus-per-node",
        type=integer(L.GPUS_PER_NODE),
        metavar="N",
        help="GPUs per node (default: the plan's, or 8)",
    )
    add_stack_arg(g)
    p.set_defaults(handler="searcher.cli.launch_stack:cmd_launch")
