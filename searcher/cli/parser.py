"""The ``fitplan`` command line: parse, wire, render. Heavy modules load only inside commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from searcher.cli.fleet import register as register_fleet
from searcher.cli.launch import add_emit_args
from searcher.cli.launch import register as register_launch

EXAMPLES = """\
examples:
  fitplan explain --model llama-3.1-8b --gpu rtx-4090 --method qlora --micro-batch 2 --seq-len 2048
  fitplan explain --params 7e9 --recipe bf16-pure --gpu 16GB
  fitplan search --model llama-3.1-8b --gpu a100-80gb --gpus 8 --target-batch 64 --seq-len 4096
  fitplan fits --gpu rtx-4090
  fitplan scenario run scenarios/*.yaml
  fitplan fleet scenarios/fleet-example.yaml   # place jobs on GPU pools
  fitplan models            # the model catalog
  fitplan gpus              # the GPU catalog
  fitplan accuracy          # predictions against published measurements
  fitplan trace llama-3.1-8b                    # saved activations, traced on the meta device
  fitplan measure --model llama-3.2-1b --steps 3  # real steps (CUDA: memory; CPU: time)
  fitplan autotune --model llama-3.2-1b --target-batch 16 --trials 8  # measured trials
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line with a hint, exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"fitplan: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def _model_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    g = p.add_argument_group("model (a catalog name or config.json, or raw numbers)")
    g.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="catalog id (fitplan models) or a Hugging Face config.json",
    )
    g.add_argument("--params", type=float, help="raw: total parameters, e.g. 7e9")
    g.add_argument("--trainable-params", type=float, help="raw: trainable (adapter) parameters")
    g.add_argument("--layers", type=int, help="raw: transformer layers (for activations)")
    g.add_argument("--hidden", type=int, help="raw: hidden size (for activations)")
    g.add_argument("--vocab", type=int, help="raw: vocabulary size (for the logits)")
    g.add_argument("--heads", type=int, help="raw: attention heads")


def _gpu_args(p: argparse.ArgumentParser, default_gpu: str | None = "a100-80gb") -> None:
    g = p.add_argument_group("hardware")
    g.add_argument(
        "--gpu",
        default=default_gpu,
        help="catalog id (fitplan gpus) or a size: 24GiB, 16GB (default: %(default)s)",
    )
    g.add_argument(
        "--gpus", type=int, default=None, help="number of GPUs (default: 1, or tp×pp×dp)"
    )
    g.add_argument(
        "--headroom", type=float, default=None, help="fraction of capacity kept free (default 0.1)"
    )
    g.add_argument(
        "--price", type=float, default=None, help="$ per GPU-hour (overrides the catalog default)"
    )


def _config_args(p: argparse.ArgumentParser, search: bool = False) -> None:
    """The knobs. In explain they set one configuration; in search they pin a knob."""
    g = p.add_argument_group("configuration" if not search else "pins (leave out to search)")
    g.add_argument("--method", choices=["full", "lora", "qlora"])
    g.add_argument("--rank", type=int, help="LoRA rank")
    g.add_argument(
        "--lora-targets", help="all-linear, attention, default, or a comma list (q_proj,v_proj)"
    )
    g.add_argument("--lora-dropout", type=float)
    g.add_argument("--recipe", help="fp32, bf16-pure, bf16-master, amp, bf16-torch")
    g.add_argument(
        "--weight-dtype",
        help="override the recipe's weight dtype: fp32, bf16, fp16, fp8, int8, int4",
    )
    g.add_argument("--adapter-dtype", help="LoRA adapter dtype: fp32 (PEFT default), bf16, fp16")
    g.add_argument("--compute-dtype", help="bf16, fp16, fp32, fp8")
    g.add_argument(
        "--optimizer",
        help="adamw, adamw-8bit, paged-adamw-8bit, sgd, sgd-momentum, adafactor, lion",
    )
    g.add_argument("--quant", help="frozen base quantisation: none, int8, nf4, nf4-dq")
    g.add_argument("--micro-batch", type=int)
    if not search:
        g.add_argument("--grad-accum", type=int)
        g.add_argument("--seq-len", type=int)
    g.add_argument("--checkpointing", choices=["none", "selective", "full"])
    g.add_argument("--attention", choices=["flash", "sdpa", "eager"])
    g.add_argument(
        "--loss", choices=["standard", "chunked", "fused"], help="cross-entropy implementation"
    )
    g.add_argument(
        "--fused-ce", action="store_true", help="same as --loss fused (Liger / CCE style)"
    )
    g.add_argument(
        "--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage (3 = FSDP full shard)"
    )
    g.add_argument("--offload", choices=["none", "optimizer", "all"])
    g.add_argument("--tp", type=int, help="tensor-parallel degree")
    g.add_argument("--pp", type=int, help="pipeline-parallel degree")
    g.add_argument(
        "--optimizer-in-backward", action="store_true", help="step inside backward (torchtune)"
    )
    g.add_argument(
        "--allow-long-seq", action="store_true", help="allow --seq-len beyond the model's context"
    )


def _search_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search")
    g.add_argument(
        "--target-batch",
        type=int,
        default=32,
        help="effective batch in sequences = micro × accumulation × DP (default 32)",
    )
    g.add_argument(
        "--seq-len",
        type=int,
        help="sequence length (default 2048, or the model's context if shorter)",
    )
    g.add_argument("--max-gpus", type=int, help="use at most this many of the --gpus")
    g.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    g.add_argument("--cpu-ram", help="CPU RAM per node for offload, e.g. 512GiB (default 256GiB)")
    g.add_argument(
        "--tokens", type=float, help="token budget: report time and cost to train on it, e.g. 1e9"
    )
    g.add_argument("--strategy", default="exhaustive", help="exhaustive (default, exact) or optuna")
    g.add_argument("--trials", type=int, help="optuna: trials (default 2000)")
    g.add_argument("--seed", type=int, help="optuna: sampler seed (default 0)")
    g.add_argument(
        "--storage", help="optuna: RDB URL shared by several processes, e.g. sqlite:///fitplan.db"
    )
    g.add_argument(
        "--rank-by",
        choices=["cost", "speed"],
        default="cost",
        help="order of the front: $ per token (default) or tokens/s",
    )
    g.add_argument(
        "--top",
        type=int,
        default=10,
        help="rows to show (default 10; --json and --csv get the whole front)",
    )
    g.add_argument("--csv", metavar="FILE", help="write the whole front as CSV")
    g.add_argument("--json", action="store_true", help='print {"front": [...], "rejected": [...]}')


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fitplan",
        description="What LLM training configuration fits on your GPUs, and which is fastest and cheapest.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version="fitplan 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "explain",
        help="memory breakdown of one configuration",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _model_args(p)
    _gpu_args(p)
    _config_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--detail",
        action="store_true",
        help="the full breakdown: bytes, GB and GiB, bytes per parameter (default: GiB)",
    )
    p.set_defaults(handler="searcher.cli.commands:cmd_explain")

    p = sub.add_parser(
        "search",
        help="Pareto-optimal configurations that fit, ranked by throughput cost",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _model_args(p)
    _gpu_args(p)
    _search_args(p)
    _config_args(p, search=True)
    p.add_argument(
        "--detail",
        action="store_true",
        help="the chosen member's full breakdown: bytes, GB and GiB (default: GiB)",
    )
    add_emit_args(p)
    p.set_defaults(handler="searcher.cli.commands:cmd_search")

    p = sub.add_parser(
        "fits", help="what fits on my card: every catalog model × inference, QLoRA, LoRA, full"
    )
    _gpu_args(p, default_gpu="rtx-4090")
    p.add_argument(
        "--models", nargs="+", metavar="NAME|PATH", help="models to check (default: the catalog)"
    )
    p.add_argument(
        "--seq-len",
        type=int,
        default=2048,
        help="training sequence / inference context (default 2048)",
    )
    p.add_argument(
        "--target-batch",
        type=int,
        default=8,
        help="effective batch for the training columns (default 8)",
    )
    p.add_argument("--cpu-ram", help="CPU RAM per node for offload, e.g. 64GiB (default 256GiB)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler="searcher.cli.commands:cmd_fits")

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

    p = sub.add_parser("models", help="list the model catalog")
    p.add_argument("--json", action="store_true")
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
    _gpu_args(p, default_gpu=None)
    _config_args(p)
    p.add_argument("--steps", type=int, default=3, help="optimizer steps (default 3)")
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
    _gpu_args(p, default_gpu=None)
    p.add_argument("--target-batch", type=int, default=8, help="effective batch (default 8)")
    p.add_argument("--seq-len", type=int, help="sequence length (default 2048 or the context)")
    p.add_argument("--cpu-ram", help="CPU RAM (not used: measured trials do not offload)")
    _config_args(p, search=True)
    p.add_argument("--trials", type=int, default=8, help="measured trials (default 8)")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per trial (default 3)")
    p.add_argument(
        "--candidates", type=int, default=64, help="candidates beyond the front (default 64)"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cuda or cpu")
    p.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
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
    p.add_argument("--layers", type=int, default=2, help="layers to trace (default 2)")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=256)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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

        message = user_message(err)
        if message is None:
            raise
        sys.stderr.write(f"fitplan: error: {message}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
