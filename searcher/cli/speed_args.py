"""The options that change only the step time: the speed knobs (every configuration command)
and the network one configuration's step assumes (explain)."""

from __future__ import annotations

import argparse
from typing import Any

from constraints import limits as L
from searcher.validate import integer, number


def add_speed_args(g: Any) -> None:
    """--kernels, --fp8-recipe, --tp-comm-overlap, --virtual-stages, --model-code, --attention-kernel (TrainConfig's
    speed knobs),
    and --expandable-segments (the caching allocator's mode: reserved memory, not speed)."""
    g.add_argument(
        "--kernels",
        choices=["eager", "compile", "te", "liger"],
        help="kernel stack: PyTorch eager, torch.compile, Transformer Engine, Liger (speed only)",
    )
    g.add_argument(
        "--fp8-recipe",
        choices=["tensorwise", "rowwise", "te-delayed", "te-current", "mxfp8"],
        help="fp8 scaling recipe with --compute-dtype fp8 (default tensorwise)",
    )
    g.add_argument(
        "--tp-comm-overlap",
        action="store_true",
        help="overlap tensor-parallel communication with the GEMMs (async TP / Megatron)",
    )
    g.add_argument(
        "--virtual-stages",
        type=integer(L.VIRTUAL_STAGES),
        help="interleaved 1F1B: virtual pipeline stages per rank",
    )
    g.add_argument(
        "--model-code",
        choices=["hf", "torchtune", "torchtitan", "torchtitan-fused-rmsnorm"],
        help="whose layer code runs eager: Hugging Face (default), torchtune, torchtitan (its "
        "norm_type rmsnorm or fused_rmsnorm); each traced eager layer moves different bytes",
    )
    g.add_argument(
        "--attention-kernel",
        choices=["fa2", "fa1"],
        help="flash-attention generation: fa2 (flash-attn 2 / SDPA flash, default, what emitted "
        "plans run) or fa1 (flash-attn 1.x, as in older measured runs); speed only",
    )
    g.add_argument(
        "--expandable-segments",
        action="store_true",
        help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torchtitan sets it): the "
        "allocator's fragmentation as fitted for that mode; emitted launch files set it",
    )
    g.add_argument(
        "--fsdp-embedding-units",
        action="store_true",
        help="FSDP shards the embedding and the head as units of their own (torchtune "
        "custom_sharded_layers): gathered only while they run, not held in the root unit",
    )
    g.add_argument(
        "--grad-sync",
        choices=["each-micro-batch", "last-micro-batch"],
        help="when gradients are reduced under gradient accumulation: every micro-batch "
        "(default, what emitted plans do) or the last only (FSDP no_sync: HF Trainer / "
        "accelerate without sync_each_batch, litgpt), which holds them unsharded per GPU",
    )


def add_topology_args(p: argparse.ArgumentParser) -> None:
    """The network the step time of one configuration assumes (explain)."""
    g = p.add_argument_group("topology (step time)")
    g.add_argument(
        "--gpus-per-node",
        type=integer(L.GPUS_PER_NODE),
        default=8,
        help="GPUs per node (default 8)",
    )
    g.add_argument(
        "--inter-node-gb-s",
        type=number(L.LINK_GB_S),
        help="network bandwidth per GPU between nodes, GB/s (default 50 = 400 Gb/s)",
    )
    g.add_argument(
        "--nvlink-domain",
        type=integer(L.GPUS_PER_NODE),
        help="GPUs per NVLink domain when it spans nodes (72 for GB200 NVL72; default: the GPU's)",
    )
