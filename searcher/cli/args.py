"""The argument groups several subcommands share: the model, the hardware, the knobs, the search.

Every number goes through a :mod:`searcher.validate` type with its bound from
:mod:`constraints.limits`, so argparse refuses it (one line, exit 2) before any work.
"""

from __future__ import annotations

import argparse

from constraints import limits as L
from searcher.cli.speed_args import add_speed_args
from searcher.inputs import Default
from searcher.validate import file_name, integer, number, size

FAMILY_HELP = (
    "read a config.json whose model_type is missing or unknown as this family "
    "(llama, mistral, gpt2, …); without it such a config is refused"
)


def model_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    g = p.add_argument_group("model (a catalog name or config.json, or raw numbers)")
    g.add_argument(
        "--model",
        metavar="NAME|PATH",
        help="catalog id (fitplan models) or a Hugging Face config.json",
    )
    g.add_argument("--family", metavar="TYPE", help=FAMILY_HELP)
    g.add_argument("--params", type=number(L.PARAMS), help="raw: total parameters, e.g. 7e9")
    g.add_argument(
        "--trainable-params", type=number(L.PARAMS), help="raw: trainable (adapter) parameters"
    )
    g.add_argument(
        "--layers", type=integer(L.LAYERS), help="raw: transformer layers (for activations)"
    )
    g.add_argument("--hidden", type=integer(L.HIDDEN), help="raw: hidden size (for activations)")
    g.add_argument("--vocab", type=integer(L.VOCAB), help="raw: vocabulary size (for the logits)")
    g.add_argument("--heads", type=integer(L.HEADS), help="raw: attention heads")


def gpu_args(p: argparse.ArgumentParser, default_gpu: str | None = Default("a100-80gb")) -> None:
    g = p.add_argument_group("hardware")
    g.add_argument(
        "--gpu",
        default=default_gpu,
        help="catalog id (fitplan gpus) or a size: 24GiB, 16GB (default: %(default)s)",
    )
    g.add_argument(
        "--gpus",
        type=integer(L.GPU_COUNT),
        default=None,
        help="number of GPUs (default: 1, or tp×pp×dp)",
    )
    g.add_argument(
        "--headroom",
        type=number(L.FRACTION),
        default=None,
        help="fraction of capacity kept free (default 0.1)",
    )
    g.add_argument(
        "--price",
        type=number(L.PRICE),
        default=None,
        help="$ per GPU-hour (overrides the catalog default)",
    )


def config_args(p: argparse.ArgumentParser, search: bool = False) -> None:
    """The knobs. In explain they set one configuration; in search they pin a knob."""
    g = p.add_argument_group("configuration" if not search else "pins (leave out to search)")
    g.add_argument("--method", choices=["full", "lora", "qlora"])
    g.add_argument("--rank", type=integer(L.LORA_RANK_FLAG), help="LoRA rank")
    g.add_argument(
        "--lora-targets", help="all-linear, attention, default, or a comma list (q_proj,v_proj)"
    )
    g.add_argument("--lora-dropout", type=number(L.FRACTION))
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
    g.add_argument(
        "--quant",
        help="frozen base quantisation: none, int8, nf4, nf4-dq (bitsandbytes); gptq, awq "
        "(pre-quantised 4-bit checkpoints, group 128)",
    )
    g.add_argument("--micro-batch", type=integer(L.MICRO_BATCH))
    if not search:
        g.add_argument("--grad-accum", type=integer(L.GRAD_ACCUM))
        g.add_argument("--seq-len", type=integer(L.SEQ_LEN))
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
    g.add_argument(
        "--backend",
        choices=["single", "ddp", "deepspeed", "fsdp2", "fsdp1", "megatron"],
        help="training framework (README backend table); default: "
        + ("every backend a launch format writes" if search else "inferred from the knobs"),
    )
    g.add_argument("--tp", type=integer(L.PARALLEL_DEGREE), help="tensor-parallel degree")
    g.add_argument("--pp", type=integer(L.PARALLEL_DEGREE), help="pipeline-parallel degree")
    g.add_argument(
        "--optimizer-in-backward", action="store_true", help="step inside backward (torchtune)"
    )
    add_speed_args(g)
    g.add_argument(
        "--allow-long-seq", action="store_true", help="allow --seq-len beyond the model's context"
    )


def search_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search")
    g.add_argument(
        "--target-batch",
        type=integer(L.TARGET_BATCH),
        default=32,
        help="effective batch in sequences = micro × accumulation × DP (default 32)",
    )
    g.add_argument(
        "--seq-len",
        type=integer(L.SEQ_LEN),
        help="sequence length (default 2048, or the model's context if shorter)",
    )
    g.add_argument(
        "--max-gpus", type=integer(L.GPU_COUNT), help="use at most this many of the --gpus"
    )
    g.add_argument(
        "--gpus-per-node", type=integer(L.GPUS_PER_NODE), help="GPUs per node (default 8)"
    )
    g.add_argument(
        "--cpu-ram",
        type=size(L.CPU_RAM, "--cpu-ram"),
        help="CPU RAM per node for offload, e.g. 512GiB (default 256GiB)",
    )
    g.add_argument(
        "--tokens",
        type=number(L.TOKENS),
        help="token budget: report time and cost to train on it, e.g. 1e9",
    )
    g.add_argument("--strategy", default="exhaustive", help="exhaustive (default, exact) or optuna")
    g.add_argument("--trials", type=integer(L.TRIALS), help="optuna: trials (default 2000)")
    g.add_argument("--seed", type=integer(L.SEED), help="optuna: sampler seed (default 0)")
    g.add_argument(
        "--storage",
        help="optuna: a database URL shared by several processes or machines, e.g. "
        "sqlite:///fitplan.db or postgresql://user@host/db",
    )
    g.add_argument(
        "--study-name",
        help="optuna: the study's name in --storage (default: one per problem, from its hash)",
    )
    g.add_argument(
        "--rank-by",
        choices=["cost", "speed"],
        default="cost",
        help="order of the front: $ per token (default) or tokens/s",
    )
    g.add_argument(
        "--top",
        type=integer(L.ROWS),
        default=None,
        help="rows to show (default 10; --json and --csv get the whole front)",
    )
    g.add_argument(
        "--wide",
        action="store_true",
        help="every knob in its own column (wider than 100 columns); default: the plan in one cell",
    )
    g.add_argument("--csv", metavar="FILE", type=file_name, help="write the whole front as CSV")
    g.add_argument("--json", action="store_true", help='print {"front": [...], "rejected": [...]}')
