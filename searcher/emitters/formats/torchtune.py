"""--emit torchtune: ``tune run [--nproc_per_node N] RECIPE --config BUILTIN key=value …`` in
torchtune.sh. The built-in config of the model (data/torchtune.json, read from torchtune's
recipes/configs) supplies tokenizer, checkpointer and dataset; every knob of the plan is an
explicit override. Recipes: full_finetune_single_device, full_finetune_distributed,
lora_finetune_single_device, lora_finetune_distributed (QLoRA = the lora recipes with the
qlora_* model builder)."""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from typing import Any

from searcher.emitters.base import Emission, EmitOptions, EmittedFile, refuse
from searcher.emitters.common import alloc_conf_export, out_path, plan_file, requirements_file
from searcher.emitters.knobs import SPEED_KNOBS, refuse_speed_knobs, refuse_unsynced
from searcher.emitters.plan import Plan, adapter_dtype, lora_alpha, lora_target_modules, precision

DATA = Path(__file__).resolve().parent.parent / "data" / "torchtune.json"

KNOBS = {
    **SPEED_KNOBS,
    "method": "recipe full_finetune_* / lora_finetune_*; model._component_ the full, lora_ or qlora_ builder",
    "lora_rank": "model.lora_rank",
    "lora_targets": "model.lora_attn_modules (q_proj, k_proj, v_proj, output_proj) and "
    "model.apply_lora_to_mlp (all of gate/up/down or none)",
    "lora_dropout": "model.lora_dropout",
    "recipe": "dtype=bf16 (bf16-torch) or dtype=fp32 (fp32); fp32-master, pure-bf16 and amp refused",
    "weight_dtype": "dtype (an override other than the recipe's is refused)",
    "adapter_dtype": "the adapters take dtype (any other adapter dtype is refused)",
    "compute_dtype": "dtype bf16 or fp32 (fp16 and fp8 refused: torchtune trains bf16/fp32 only)",
    "optimizer": "optimizer._component_: torch.optim.AdamW (fused) / SGD / Adafactor, "
    "bitsandbytes AdamW8bit / PagedAdamW8bit / Lion32bit (single device)",
    "quant": "nf4-dq: the qlora_ builder (torchao NF4, double-quantised scalers); nf4 and int8 refused",
    "micro_batch": "batch_size",
    "seq_len": "tokenizer.max_seq_len with dataset.packed=True",
    "grad_accum": "gradient_accumulation_steps",
    "checkpointing": "enable_activation_checkpointing; selective refused",
    "attention": "torchtune's attention is torch SDPA (FlashAttention-2 kernel on CUDA): flash/sdpa; eager refused",
    "loss": "loss._component_ torch.nn.CrossEntropyLoss / CEWithChunkedOutputLoss; fused refused "
    "(torchtune 0.6.1 has no LinearCrossEntropyLoss)",
    "zero": "2: fsdp_reshard_after_forward=False; 3: FSDP2 full shard (one GPU: the single-device "
    "recipe); 0 on several GPUs and 1 refused (0.6.1's distributed recipes always shard)",
    "offload": "all: fsdp_cpu_offload=True (ZeRO-3); optimizer-only offload refused",
    "tp": "tensor_parallel_dim + tensor_parallel_plan (full_finetune_distributed, Llama 3 family)",
    "pp": "refused above 1 (no pipeline parallelism in torchtune recipes)",
    "dp": "tune run --nproc_per_node × --nnodes",
    "optimizer_in_backward": "optimizer_in_bwd=True (full fine-tune recipes)",
    "backend": "single: *_single_device recipes; ddp: data_parallel_replicate_dim; fsdp2: the "
    "distributed recipes (FSDP2 + tensor parallel); deepspeed, fsdp1, megatron refused",
}

LOSSES = {
    "standard": "torch.nn.CrossEntropyLoss",
    "chunked": "torchtune.modules.loss.CEWithChunkedOutputLoss",
}
#: the released torchtune these files are written for (PyPI; data/versions.json pins it with the
#: torchao it imports with)
TORCHTUNE_VERSION = "0.6.1"
#: optimizer component and whether it takes ``fused``
OPTIMIZERS: dict[str, tuple[str, bool]] = {
    "adamw": ("torch.optim.AdamW", True),
    "adamw-8bit": ("bitsandbytes.optim.AdamW8bit", False),
    "paged-adamw-8bit": ("bitsandbytes.optim.PagedAdamW8bit", False),
    "sgd": ("torch.optim.SGD", True),
    "sgd-momentum": ("torch.optim.SGD", True),
    "adafactor": ("torch.optim.Adafactor", False),
    "lion": ("bitsandbytes.optim.Lion32bit", False),
}
HF_TO_TT_ATTN = {
    "q_proj": "q_proj",
    "k_proj": "k_proj",
    "v_proj": "v_proj",
    "o_proj": "output_proj",
}
MLP = ("gate_proj", "up_proj", "down_proj")


@cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


def _value(v: object) -> str:
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def lora_modules(plan: Plan, fmt: str) -> tuple[list[str], bool]:
    """(lora_attn_modules, apply_lora_to_mlp) from the plan's targets."""
    targets = lora_target_modules(plan)
    if targets == "all-linear":
        return ["q_proj", "k_proj", "v_proj", "output_proj"], True
    leaves = [t.rsplit(".", 1)[-1] for t in targets]
    attn = [HF_TO_TT_ATTN[t] for t in leaves if t in HF_TO_TT_ATTN]
    mlp = [t for t in leaves if t in MLP]
    other = [t for t in leaves if t not in HF_TO_TT_ATTN and t not in MLP]
    if other:
        raise refuse(
            fmt,
            "lora_targets",
            plan.config.lora_targets,
            f"torchtune has no LoRA on {', '.join(other)}",
        )
    if mlp and len(set(mlp)) != len(MLP):
        raise refuse(
            fmt,
            "lora_targets",
            plan.config.lora_targets,
            "torchtune puts LoRA on all three MLP projections (apply_lora_to_mlp) or on none",
            "target gate_proj,up_proj,down_proj together, or none of them",
        )
    return list(dict.fromkeys(attn)), bool(mlp)


def _pick_config(family: str, size: str, kinds: list[str], fmt: str, model: str) -> str:
    configs = table()["configs"]
    for kind in kinds:
        name = f"{family}/{size}_{kind}"
        if name in configs:
            return name
    for kind in ("lora", "lora_single_device", "full", "full_single_device", "qlora_single_device"):
        name = f"{family}/{size}_{kind}"
        if name in configs:
            return name
    raise refuse(fmt, "model", model, f"torchtune ships no config for {family} {size}")


def torchtune_run(
    plan: Plan, options: EmitOptions, fmt: str = "torchtune"
) -> tuple[str, str, dict[str, str], list[str]]:
    """(recipe, base config, overrides, removals): the ``tune run`` invocation for the plan."""
    cfg = plan.config
    entry = table()["models"].get(plan.model.id)
    if entry is None:
        supported = ", ".join(sorted(table()["models"]))
        raise refuse(
            fmt,
            "model",
            plan.model.id,
            "torchtune has no model builder for it in fitplan's table",
            f"torchtune models: {supported}",
        )
    family, size, builder = entry["family"], entry["size"], entry["builder"]
    fam = table()["families"][family]
    module = f"torchtune.models.{family}"
    prec = precision(plan, fmt)
    if prec.mode not in ("torch", "fp32"):
        what = {
            "master": "an fp32 master copy of bf16 weights",
            "pure": "bf16 weights with fp32 optimizer states",
            "amp": "fp32 weights under 16-bit autocast",
        }[prec.mode]
        raise refuse(
            fmt,
            "recipe",
            cfg.recipe,
            f"torchtune trains in one dtype (dtype=bf16 or fp32), without {what}",
            "pin --recipe bf16-torch (or fp32)",
        )
    if prec.half == "fp16":
        raise refuse(fmt, "compute_dtype", "fp16", "torchtune trains in bf16 or fp32 only")
    dtype = "bf16" if prec.half == "bf16" else "fp32"
    if cfg.pp > 1:
        raise refuse(
            fmt, "pp", cfg.pp, "torchtune recipes have no pipeline parallelism", "pin --pp 1"
        )
    if cfg.checkpointing == "selective":
        raise refuse(
            fmt,
            "checkpointing",
            "selective",
            "torchtune checkpoints whole layers; it has no attention-only selective recomputation",
            "pin --checkpointing full or none",
        )
    if cfg.attention == "eager":
        raise refuse(
            fmt,
            "attention",
            "eager",
            "torchtune's attention is torch SDPA; it has no eager attention",
        )
    if cfg.zero == 1:
        raise refuse(
            fmt,
            "zero",
            1,
            "torchtune shards with FSDP2 (ZeRO-3, or ZeRO-2 without resharding); it has no ZeRO-1",
            "pin --zero 0, 2 or 3, or --emit deepspeed",
        )
    if cfg.offload == "optimizer":
        raise refuse(
            fmt,
            "offload",
            "optimizer",
            "torchtune offloads parameters, gradients and optimizer together (fsdp_cpu_offload), "
            "not the optimizer alone (a DeepSpeed ZeRO-Offload feature)",
            "pin --offload all --zero 3 or --offload none, or --emit deepspeed",
        )
    if cfg.zero == 2 and cfg.offload == "all":
        raise refuse(fmt, "offload", "all", "parameter offload needs ZeRO-3")
    distributed = cfg.gpus > 1 or cfg.offload == "all"
    kind = "lora" if cfg.method != "full" else "full"
    recipe = f"{kind}_finetune_{'distributed' if distributed else 'single_device'}"
    o: dict[str, str] = {}
    removals: list[str] = []
    if cfg.method == "full":
        o["model._component_"] = f"{module}.{builder}"
        kinds = ["full" if distributed else "full_single_device"]
    else:
        if cfg.quant == "none":
            o["model._component_"] = f"{module}.lora_{builder}"
        elif cfg.quant == "nf4-dq":
            if not fam["qlora"]:
                raise refuse(
                    fmt, "quant", cfg.quant, f"torchtune has no QLoRA builder for {family} models"
                )
            o["model._component_"] = f"{module}.qlora_{builder}"
        else:
            raise refuse(
                fmt,
                "quant",
                cfg.quant,
                "torchtune's QLoRA base is torchao NF4 with double-quantised scalers (nf4-dq); "
                "it has no plain NF4 and no int8 base",
                "pin --quant nf4-dq",
            )
        kinds = (
            (["lora", "qlora"] if distributed else ["qlora_single_device", "lora_single_device"])
            if cfg.quant != "none"
            else (["lora"] if distributed else ["lora_single_device"])
        )
        attn, mlp = lora_modules(plan, fmt)
        ad = adapter_dtype(cfg)
        if ad != dtype:
            raise refuse(
                fmt,
                "adapter_dtype",
                ad,
                f"torchtune's adapters take the model dtype ({dtype}); fp32 is PEFT's default",
                f"pin --adapter-dtype {dtype}, or search with --emit torchtune",
            )
        o["model.lora_attn_modules"] = _value(attn)
        o["model.apply_lora_to_mlp"] = _value(mlp)
        o["model.apply_lora_to_output"] = "False"
        o["model.lora_rank"] = str(cfg.lora_rank)
        o["model.lora_alpha"] = str(lora_alpha(plan, options.lora_alpha))
        o["model.lora_dropout"] = _value(cfg.lora_dropout)
    config = _pick_config(family, size, kinds, fmt, plan.model.id)
    o["dtype"] = dtype
    o["batch_size"] = str(cfg.micro_batch)
    o["gradient_accumulation_steps"] = str(cfg.grad_accum)
    o["tokenizer.max_seq_len"] = str(cfg.seq_len)
    o["dataset.packed"] = "True"
    o["enable_activation_checkpointing"] = _value(cfg.checkpointing == "full")
    if cfg.loss not in LOSSES:
        raise refuse(
            fmt,
            "loss",
            cfg.loss,
            f"torchtune {TORCHTUNE_VERSION} (the release on PyPI) has no fused linear "
            "cross-entropy (LinearCrossEntropyLoss is unreleased)",
            "pin --loss chunked (CEWithChunkedOutputLoss) or standard",
        )
    o["loss._component_"] = LOSSES[cfg.loss]
    # optimizer
    name = cfg.optimizer.lower()
    if name not in OPTIMIZERS:
        raise refuse(fmt, "optimizer", name, "no torchtune optimizer component for it")
    component, takes_fused = OPTIMIZERS[name]
    if distributed and component.startswith("bitsandbytes."):
        raise refuse(
            fmt,
            "optimizer",
            name,
            "bitsandbytes optimizers do not take FSDP2's sharded (DTensor) parameters",
            "pin --optimizer adamw, or run on one GPU",
        )
    o["optimizer._component_"] = component
    base_keys = table()["configs"][config]["optimizer_keys"]
    if takes_fused and component == "torch.optim.AdamW":
        o["optimizer.fused"] = "True"
    elif "fused" in base_keys and not takes_fused:
        removals.append("optimizer.fused")
    if name in ("sgd", "sgd-momentum"):
        o["optimizer.momentum"] = "0.9" if name == "sgd-momentum" else "0.0"
    if cfg.optimizer_in_backward:
        if cfg.method != "full":
            raise refuse(
                fmt,
                "optimizer_in_backward",
                True,
                "torchtune's LoRA recipes have no optimizer step in backward",
                "drop --optimizer-in-backward",
            )
        o["optimizer_in_bwd"] = "True"
        o["clip_grad_norm"] = "None"
    elif cfg.method == "full":
        o["optimizer_in_bwd"] = "False"
    # parallelism
    if distributed:
        if cfg.tp > 1:
            if cfg.method != "full":
                raise refuse(
                    fmt,
                    "tp",
                    cfg.tp,
                    "torchtune's lora_finetune_distributed has no tensor parallelism",
                    "pin --tp 1, or a full fine-tune",
                )
            if not fam["tp_plan"]:
                raise refuse(
                    fmt,
                    "tp",
                    cfg.tp,
                    f"torchtune ships no tensor-parallel plan for {family} models",
                )
            o["tensor_parallel_dim"] = str(cfg.tp)
            o["tensor_parallel_plan._component_"] = fam["tp_plan"]
        if cfg.zero == 0:
            # torchtune 0.6.1's distributed recipes always shard with FSDP2 over every process
            # (they read no data_parallel_replicate_dim): a DDP plan would silently run as FSDP
            raise refuse(
                fmt,
                "zero",
                0,
                f"torchtune {TORCHTUNE_VERSION}'s distributed recipes always shard with FSDP2; "
                "they have no plain data parallelism (DDP)",
                "pin --zero 3 (or 2), or --emit accelerate / torchrun for DDP",
            )
        o["fsdp_reshard_after_forward"] = _value(cfg.zero == 3)
        o["fsdp_cpu_offload"] = _value(cfg.offload == "all")
    elif cfg.tp > 1:
        raise refuse(fmt, "tp", cfg.tp, "tensor parallelism needs more than one GPU")
    return recipe, config, o, removals


def torchtune_requirements(overrides: dict[str, str]) -> EmittedFile:
    """torchtune with the torchao it imports with (0.6.1 imports torchao at start-up: NF4, the
    qlora builders), and bitsandbytes when an optimizer of it is named."""
    needs = [
        ("torch", "install first: the CUDA (or CPU) build for this machine"),
        ("torchtune", "tune run and the recipe"),
        ("torchao", f"imported by torchtune {TORCHTUNE_VERSION} (NF4 for QLoRA)"),
    ]
    if overrides.get("optimizer._component_", "").startswith("bitsandbytes."):
        needs.append(("bitsandbytes", f"{overrides['optimizer._component_']}; CUDA only"))
    return requirements_file("torchtune", needs)


class TorchtuneEmitter:
    name = "torchtune"
    summary = "torchtune.sh: tune run RECIPE --config BUILTIN with the plan's key=value overrides"
    knobs = KNOBS
    backends = ("single", "ddp", "fsdp2")

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        refuse_speed_knobs(self.name, plan.config)
        # recipes/full_finetune_distributed.py (015b39c7): loss.backward() on every micro-batch
        refuse_unsynced(self.name, plan.config, "its recipes reduce on every micro-batch")
        recipe, config, overrides, removals = torchtune_run(plan, options, self.name)
        family = table()["models"][plan.model.id]["family"]
        tokenizer = table()["families"][family]["tokenizer"]
        launcher = "tune run"
        if plan.nodes > 1:
            launcher += (
                f" --nnodes {plan.nodes} --nproc_per_node {plan.procs_per_node}"
                ' --rdzv_backend c10d --rdzv_endpoint "$MASTER_ADDR:29500"'
            )
        elif recipe.endswith("distributed"):
            launcher += f" --nproc_per_node {plan.procs_per_node}"
        args = [f"{k}={v}" for k, v in overrides.items()] + [f"~{k}" for k in removals]
        paths = [
            'checkpointer.checkpoint_dir="$MODEL_DIR"',
            *[f'tokenizer.{k}="$MODEL_DIR/{v}"' for k, v in tokenizer.items()],
            'output_dir="$OUTPUT_DIR"',
        ]
        repo = plan.model_ref
        lines = [
            "#!/usr/bin/env bash",
            f"# written for torchtune {TORCHTUNE_VERSION} (PyPI): pip install -r requirements.txt",
            f"# fitplan plan, --emit torchtune: {plan.model.id}, {plan.config.method}, "
            f"{plan.config.micro_batch} x {plan.config.grad_accum} x {plan.config.dp} sequences of "
            f"{plan.config.seq_len} tokens, {plan.gpus} GPU(s)",
            f"# recipe {recipe}, base config {config} (its tokenizer, checkpointer and dataset);",
            "# every knob of the plan is an override below.",
            "# First download the weights:",
            f'#   tune download {repo} --output-dir "$MODEL_DIR"',
            f"# The base config names its checkpoint files: {', '.join(table()['configs'][config]['checkpoint_files'] or [])};",
            "# override checkpointer.checkpoint_files if your download differs.",
        ]
        if plan.config.method != "full":
            lines.append(
                f"# model.lora_alpha = {overrides['model.lora_alpha']}"
                + (
                    ": fitplan has no alpha knob, 2 x rank (fitplan launch --lora-alpha)"
                    if options.lora_alpha is None
                    else " (--lora-alpha)"
                )
            )
        cfg = plan.config
        lines.append(
            f"# attention {cfg.attention}: torchtune's attention is torch SDPA, which runs the "
            "FlashAttention-2 kernel on CUDA"
        )
        if not recipe.endswith("distributed") and cfg.zero:
            lines.append(f"# zero {cfg.zero} on one GPU shards nothing: the single-device recipe")
        if plan.nodes > 1:
            lines.append(f"# run on each of the {plan.nodes} nodes with MASTER_ADDR=<node 0>")
        lines += [
            "set -euo pipefail",
            *alloc_conf_export(plan),
            f'MODEL_DIR="${{MODEL_DIR:-/tmp/{repo.rstrip("/").rsplit("/", 1)[-1]}}}"',
            'OUTPUT_DIR="${OUTPUT_DIR:-/tmp/torchtune/fitplan}"',
            f"exec {launcher} {recipe} --config {config} \\",
        ]
        body = [*(shlex.quote(a) for a in args), *paths]
        lines += [f"  {a} \\" for a in body] + ['  "$@"']
        sh = "\n".join(lines) + "\n"
        script = out_path(options, "torchtune.sh")
        files = (
            EmittedFile("torchtune.sh", sh, True),
            torchtune_requirements(overrides),
            plan_file(plan),
        )
        command = f"bash {script}"
        notes = (f"tune run {recipe} --config {config} with {len(args)} overrides",)
        return Emission(self.name, files, command, notes)


EMITTER = TorchtuneEmitter()
