"""From command-line arguments to a model spec, a GPU and a configuration, with clear refusals."""

from __future__ import annotations

import argparse
from typing import Any

from constraints.errors import FitplanError
from constraints.gpus import GpuSpec, resolve_gpu
from constraints.models import ModelSpec, raw_model

NO_MODEL_HINT = (
    "give --model NAME (see `fitplan models`), --model path/to/config.json, or raw numbers such as "
    "--params 7e9; e.g. fitplan explain --model llama-3.1-8b --gpu rtx-4090 --method qlora"
)
DEFAULT_SEQ_LEN = 2048
#: GPUs per node when --gpus-per-node is not given (DGX/HGX servers hold 8)
DEFAULT_GPUS_PER_NODE = 8


class Default(str):
    """A default the user did not type (``isinstance(args.gpu, Default)``): what the screen
    then names as assumed."""


def check_layout_args(args: argparse.Namespace) -> None:
    """GPU-count flags that contradict each other, refused before any work."""
    gpus, per_node = getattr(args, "gpus", None), getattr(args, "gpus_per_node", None)
    max_gpus = getattr(args, "max_gpus", None)
    if gpus is not None and per_node is not None and gpus > per_node and gpus % per_node:
        raise FitplanError(
            f"--gpus {gpus} is not a whole number of nodes of --gpus-per-node {per_node}",
            f"use a multiple of {per_node}, or at most {per_node} GPUs",
        )
    if gpus is not None and max_gpus is not None and max_gpus > gpus:
        raise FitplanError(
            f"--max-gpus {max_gpus} is more than --gpus {gpus}: it would do nothing",
            "--max-gpus caps the GPUs the search may use out of --gpus",
        )


PRICE_ONLY_IN_SEARCH = "this command reports no cost; fitplan search ranks by it"


def refuse_unused(args: argparse.Namespace, unused: dict[str, str]) -> None:
    """Flags given to a command (or mode) where they change nothing: refused, with the reason."""
    for name, reason in unused.items():
        value = getattr(args, name, None)
        if value is not None and value is not False:
            raise FitplanError(f"--{name.replace('_', '-')} does nothing here: {reason}")


def check_fits_args(args: argparse.Namespace) -> None:
    refuse_unused(args, {"price": PRICE_ONLY_IN_SEARCH})


def check_explain_args(args: argparse.Namespace) -> None:
    refuse_unused(args, {"price": PRICE_ONLY_IN_SEARCH})


def check_search_args(args: argparse.Namespace) -> None:
    """Everything ``fitplan search`` can refuse from its arguments alone (nothing is computed)."""
    check_layout_args(args)
    strategy = getattr(args, "strategy", "exhaustive")
    if strategy == "exhaustive":
        for flag in ("storage", "study_name", "trials", "seed"):
            if getattr(args, flag, None) is not None:
                raise FitplanError(
                    f"--{flag.replace('_', '-')} does nothing with the exhaustive strategy (it evaluates every "
                    "configuration, exactly)",
                    "add --strategy optuna, or leave it out",
                )
    if getattr(args, "storage", None) is not None:
        from searcher.search.storage import check_storage_url

        check_storage_url(args.storage)
    elif getattr(args, "study_name", None) is not None:
        raise FitplanError("--study-name does nothing without --storage (the study is in memory)")
    if getattr(args, "json", False) and getattr(args, "top", None) is not None:
        raise FitplanError(
            "--top does nothing with --json: the JSON holds the whole front",
            "leave out --top, or --json",
        )
    if getattr(args, "force", False) and not (
        getattr(args, "csv", None) or getattr(args, "emit", None)
    ):
        raise FitplanError("--force does nothing: this search writes no file (add --csv or --emit)")
    if getattr(args, "lora_alpha", None) is not None and not getattr(args, "emit", None):
        raise FitplanError(
            "--lora-alpha only applies to the launch files: add --emit FORMAT --out DIR"
        )


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    raw_flags = {
        k: getattr(args, k, None)
        for k in ("params", "trainable_params", "layers", "hidden", "vocab", "heads")
    }
    if args.model and raw_flags["params"] is not None:
        raise FitplanError("give either --model or --params, not both")
    if args.model:
        extra = [f"--{k.replace('_', '-')}" for k, v in raw_flags.items() if v is not None]
        if extra:
            raise FitplanError(
                f"{', '.join(extra)} only apply to raw numbers (--params), not to --model"
            )
        from searcher.hub import resolve_any_model
        from searcher.search.stack import resolve_stack, with_stack_kernels

        spec = resolve_any_model(args.model, family=getattr(args, "family", None))
        if not spec.linear_layers:  # only the gated DeltaNet's kernel depends on the stack
            return spec
        return with_stack_kernels(spec, resolve_stack(getattr(args, "stack", None)))
    if getattr(args, "family", None) is not None:
        raise FitplanError(
            "--family applies to a config.json given with --model, not to raw numbers"
        )
    if raw_flags["params"] is not None:
        return raw_model(
            raw_flags["params"],
            trainable_params=raw_flags["trainable_params"],
            layers=raw_flags["layers"],
            hidden=raw_flags["hidden"],
            vocab=raw_flags["vocab"],
            heads=raw_flags["heads"],
        )
    raise FitplanError("no model given", NO_MODEL_HINT)


def gpu_from_args(args: argparse.Namespace) -> GpuSpec:
    if not args.gpu:
        raise FitplanError(
            "no GPU given", "add --gpu NAME (see `fitplan gpus`) or a size such as --gpu 24GiB"
        )
    return resolve_gpu(args.gpu).with_price(getattr(args, "price", None))


def headroom_from_args(args: argparse.Namespace) -> float:
    from constraints.constants import DEFAULT_HEADROOM

    h = DEFAULT_HEADROOM if args.headroom is None else args.headroom
    if not 0 <= h < 1:
        raise FitplanError(f"--headroom {h} must be a fraction in [0, 1), e.g. 0.1 for 10 %")
    return h


def check_seq_len(spec: ModelSpec, seq_len: int, allow_long: bool) -> None:
    if seq_len <= 0:
        raise FitplanError(f"--seq-len must be positive, got {seq_len}")
    if spec.max_position and seq_len > spec.max_position and not allow_long:
        raise FitplanError(
            f"--seq-len {seq_len} is longer than {spec.name}'s context ({spec.max_position} tokens)",
            "use a shorter --seq-len, or --allow-long-seq if you extend the context (RoPE scaling)",
        )


def default_seq_len(spec: ModelSpec) -> int:
    return min(DEFAULT_SEQ_LEN, spec.max_position) if spec.max_position else DEFAULT_SEQ_LEN


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise FitplanError(f"{flag} must be positive, got {value}")


def config_fields_from_args(
    args: argparse.Namespace, spec: ModelSpec, gpu: GpuSpec
) -> tuple[dict[str, Any], list[str]]:
    """The knobs the user set (for explain: all of them, with defaults filled in later)."""
    notes: list[str] = []
    for flag in (
        "rank",
        "micro_batch",
        "seq_len",
        "grad_accum",
        "tp",
        "pp",
        "gpus",
        "virtual_stages",
    ):
        _positive("--" + flag.replace("_", "-"), getattr(args, flag, None))
    method = args.method
    quant = args.quant.lower() if args.quant else None
    if quant and quant != "none" and method in (None, "lora"):
        method = "qlora"
    if method == "qlora" and quant in (None, "none"):
        if quant == "none":
            raise FitplanError(
                "--method qlora with --quant none: QLoRA needs a quantised base",
                "use --quant nf4 or nf4-dq",
            )
        from searcher.search.stack import TORCHTUNE, framework_of

        # torchtune's QLoRA base is torchao NF4 with double-quantised scalers, the HF family's
        # bitsandbytes NF4 (searcher/search/launch_formats.py)
        quant = "nf4-dq" if framework_of(getattr(args, "emit", None)) == TORCHTUNE else "nf4"
    lora_only = {
        "--rank": args.rank,
        "--lora-targets": args.lora_targets,
        "--lora-dropout": args.lora_dropout,
        "--adapter-dtype": args.adapter_dtype,
    }
    if method in (None, "full"):
        given = [k for k, v in lora_only.items() if v is not None]
        if given:
            raise FitplanError(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to LoRA, not to full fine-tuning",
                "add --method lora or --method qlora",
            )
    if args.fused_ce and args.loss and args.loss != "fused":
        raise FitplanError(f"--fused-ce contradicts --loss {args.loss}")
    fields: dict[str, Any] = {
        "method": method,
        "lora_rank": args.rank,
        "lora_targets": args.lora_targets,
        "lora_dropout": args.lora_dropout,
        "recipe": args.recipe.lower() if args.recipe else None,
        "weight_dtype": args.weight_dtype.lower() if args.weight_dtype else None,
        "adapter_dtype": args.adapter_dtype.lower() if args.adapter_dtype else None,
        "compute_dtype": args.compute_dtype.lower() if args.compute_dtype else None,
        "optimizer": args.optimizer.lower() if args.optimizer else None,
        "quant": quant,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "grad_accum": getattr(args, "grad_accum", None),
        "checkpointing": args.checkpointing,
        "attention": args.attention,
        "loss": "fused" if args.fused_ce else args.loss,
        "zero": args.zero,
        "offload": args.offload,
        "tp": args.tp,
        "pp": args.pp,
        "optimizer_in_backward": True if args.optimizer_in_backward else None,
        "backend": getattr(args, "backend", None),
        "kernels": getattr(args, "kernels", None),
        "fp8_recipe": getattr(args, "fp8_recipe", None),
        "tp_comm_overlap": True if getattr(args, "tp_comm_overlap", False) else None,
        "virtual_stages": getattr(args, "virtual_stages", None),
        "model_code": getattr(args, "model_code", None),
        "attention_kernel": getattr(args, "attention_kernel", None),
        "expandable_segments": True if getattr(args, "expandable_segments", False) else None,
        "fsdp_embedding_units": True if getattr(args, "fsdp_embedding_units", False) else None,
        "grad_sync": getattr(args, "grad_sync", None),
    }
    if (
        fields["compute_dtype"] is None
        and not gpu.supports_bf16
        and (fields["recipe"] or "bf16-master") != "fp32"
        and not gpu.custom
    ):
        fields["compute_dtype"] = "fp16"
        notes.append(f"{gpu.name} has no bf16: computing in fp16 (pass --compute-dtype to choose)")
    if fields["attention"] is None and not gpu.supports_flash_attention:
        fields["attention"] = "sdpa"
    if args.seq_len is not None:
        check_seq_len(spec, args.seq_len, args.allow_long_seq)
    return {k: v for k, v in fields.items() if v is not None}, notes


def parallel_layout(gpus: int | None, tp: int, pp: int) -> int:
    """Data-parallel degree from the GPU count; the product must come out exact."""
    if gpus is None:
        return 1
    if gpus <= 0:
        raise FitplanError(f"--gpus must be positive, got {gpus}")
    if gpus % (tp * pp):
        raise FitplanError(f"--gpus {gpus} is not a multiple of --tp {tp} × --pp {pp}")
    return gpus // (tp * pp)


def _check_topology(args: argparse.Namespace) -> None:
    """The step time's network options: positive numbers, or one clear line."""
    _positive("--gpus-per-node", getattr(args, "gpus_per_node", None))
    _positive("--nvlink-domain", getattr(args, "nvlink_domain", None))
    inter = getattr(args, "inter_node_gb_s", None)
    if inter is not None and not inter > 0:
        raise FitplanError(
            f"--inter-node-gb-s must be a positive bandwidth in GB/s, got {inter}",
            "e.g. --inter-node-gb-s 50 for 400 Gb/s per GPU",
        )


def explain_config(args: argparse.Namespace):
    """The plan explain / trace-step / measure read from the flags: each knob the user left out
    takes the stack's default (searcher.search.stack_profile); ``assumed`` names them, one phrase each."""
    from constraints.config import TrainConfig
    from searcher.search.stack import framework_of
    from searcher.search.stack_profile import StackProfile, assumed_lines, fill_defaults

    check_explain_args(args)
    _check_topology(args)
    spec = model_from_args(args)
    gpu = gpu_from_args(args)
    headroom = headroom_from_args(args)
    fields, notes = config_fields_from_args(args, spec, gpu)
    # compute dtype and attention set for a card without bf16 / flash are defaults too
    given = frozenset(k for k in fields if getattr(args, k, None) is not None)
    profile = StackProfile.resolve(framework_of(getattr(args, "emit", None)), named_versions(args))
    filled = fill_defaults(profile, fields, given, sdpa=spec.sdpa_supported)
    fields.setdefault("seq_len", default_seq_len(spec))
    check_seq_len(spec, fields["seq_len"], args.allow_long_seq)
    tp, pp = fields.get("tp", 1), fields.get("pp", 1)
    fields["dp"] = parallel_layout(args.gpus, tp, pp)
    if (
        spec.arch == "raw"
        and fields.get("method") in ("lora", "qlora")
        and spec.raw_trainable_params is None
    ):
        raise FitplanError("with --params, LoRA needs --trainable-params (the adapter size)")
    cfg = TrainConfig(**fields)
    refuse_unrunnable_layout(args, spec, cfg)
    assumed = assumed_lines(profile, cfg, gpu, spec, filled, given)
    if isinstance(getattr(args, "gpu", None), Default):
        assumed.insert(1, f"GPU {gpu.name} (no --gpu given)")
    return spec, gpu, cfg, headroom, notes, assumed


def refuse_unrunnable_layout(args: argparse.Namespace, spec, cfg) -> None:
    """What the flags alone make impossible, whatever the card (a TP degree that does not split
    the heads, a ZeRO stage the backend lacks, ...), and speed flags that change nothing in this
    layout: refused before any work. What the card cannot run (bf16 before Ampere, fp8 before
    Ada) stays part of the answer: explain says "cannot run" and exits 1."""
    from constraints.config_batch import ConfigBatch
    from constraints.hardware import LAYOUT_RULES, describe, hardware_mask

    mask = int(hardware_mask(spec, ConfigBatch.from_configs([cfg]), None)[0]) & LAYOUT_RULES
    hints = {
        8: "use --tp "
        + ", ".join(
            str(t)
            for t in range(1, min(spec.heads, 64) + 1)
            if spec.heads % t == 0 and (spec.kv_heads % t == 0 or t % spec.kv_heads == 0)
        ),
        16: "use --pp " + ", ".join(str(p) for p in range(1, 33) if spec.layers % p == 0),
        32: "use --optimizer adamw with offload, or --offload none",
        64: "drop --optimizer-in-backward on several GPUs",
        128: "use --tp 1",
    }
    for bit, hint in hints.items():
        if mask & bit:
            raise FitplanError(describe(bit, spec, None)[0], hint)
    if mask & 256 and getattr(args, "backend", None) is not None:
        raise FitplanError(
            f"{cfg.backend_problem()} (constraints/data/backends.json)",
            "pick another --backend, or leave --backend out to take the one that runs it",
        )
    if getattr(args, "virtual_stages", None) not in (None, 1) and cfg.pp == 1:
        raise FitplanError(
            "--virtual-stages does nothing without pipeline parallelism", "add --pp 2 or more"
        )
    if getattr(args, "tp_comm_overlap", False) and cfg.tp == 1:
        raise FitplanError(
            "--tp-comm-overlap does nothing without tensor parallelism", "add --tp 2 or more"
        )
    if getattr(args, "fp8_recipe", None) is not None and cfg.resolved_recipe()[4] != "fp8":
        raise FitplanError(
            "--fp8-recipe does nothing unless the matmuls run in fp8", "add --compute-dtype fp8"
        )


def search_problem(args: argparse.Namespace, spec=None, gpu=None):
    """A SearchProblem from the search arguments (shared by search and launch)."""
    from constraints.units import parse_size
    from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE, SearchProblem

    spec = spec or model_from_args(args)
    gpu = gpu or gpu_from_args(args)
    pins, _notes = config_fields_from_args(args, spec, gpu)
    pins.pop("seq_len", None)
    if args.quant is None and pins.get("method") == "qlora":
        # --method qlora alone searches every QLoRA base, as the unpinned search does (the
        # single default that explain takes is a pin only when --quant names it)
        pins.pop("quant", None)
    seq_len = args.seq_len or default_seq_len(spec)
    check_seq_len(spec, seq_len, getattr(args, "allow_long_seq", False))
    gpus = args.gpus if args.gpus is not None else 1
    if gpus < 1:
        raise FitplanError(f"--gpus must be at least 1, got {gpus}")
    max_gpus = gpus
    if getattr(args, "max_gpus", None) is not None:
        if args.max_gpus < 1:
            raise FitplanError(f"--max-gpus must be at least 1, got {args.max_gpus}")
        max_gpus = min(gpus, args.max_gpus) if args.gpus is not None else args.max_gpus
    if args.target_batch is None or args.target_batch < 1:
        raise FitplanError(f"--target-batch must be at least 1 sequence, got {args.target_batch}")
    gpus_per_node = getattr(args, "gpus_per_node", None) or DEFAULT_GPUS_PER_NODE
    if gpus_per_node < 1:
        raise FitplanError("--gpus-per-node must be at least 1")
    return SearchProblem(
        model=spec,
        gpu=gpu,
        max_gpus=max_gpus,
        target_batch=args.target_batch,
        seq_len=seq_len,
        headroom=headroom_from_args(args),
        cpu_ram_per_node=parse_size(args.cpu_ram) if args.cpu_ram else DEFAULT_CPU_RAM_PER_NODE,
        gpus_per_node=gpus_per_node,
        pins=pins,
        **_stack_fields(args),
    )


def _stack_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The SearchProblem fields read from the installed (or named) releases."""
    from searcher.search.stack_profile import StackProfile

    return StackProfile.resolve(named=named_versions(args)).search_fields()


#: the libraries whose release the command line may name, with an example release of each
VERSION_FLAGS = {"transformers": "4.46.3", "bitsandbytes": "0.42.0"}


def named_versions(args: argparse.Namespace) -> dict[str, str]:
    """The library versions named on the command line (``--transformers``, ``--bitsandbytes``),
    checked: a version must start with MAJOR.MINOR."""
    import re

    from constraints.errors import FitplanError

    out = {}
    for package, example in VERSION_FLAGS.items():
        text = getattr(args, package, None)
        if text is None:
            continue
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-]?[0-9A-Za-z.]+)?", text.strip()):
            raise FitplanError(
                f"--{package} must be a release such as {example}, got '{text}'",
                f"e.g. --{package} {example} (pip show {package} prints it)",
            )
        out[package] = text.strip()
    return out
