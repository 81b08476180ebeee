"""The HF Trainer + PEFT + bitsandbytes training script (train.py) and its launch commands.

``render_train_py`` writes the script from the settings :func:`searcher.emitters.hf_settings.hf_settings`
decided: a header of constants (every knob, with where it goes) above a fixed body
(hf_template.BODY). The formats hf, torchrun, deepspeed and accelerate all launch this same script.
"""

from __future__ import annotations

import json
from typing import Any

from searcher.emitters.base import EmittedFile
from searcher.emitters.common import ALLOC_CONF_VAR, EXPANDABLE_CONF
from searcher.emitters.deepspeed_json import (
    ADAM_BETAS,
    ADAM_EPS,
    GRADIENT_CLIPPING,
)
from searcher.emitters.hf_settings import HFSettings
from searcher.emitters.knobs import sync_each_batch
from searcher.emitters.plan import (
    Plan,
)

# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------


def torchrun_command(plan: Plan, script: str, port: int = 29500) -> str:
    if plan.nodes == 1:
        return f"torchrun --standalone --nproc_per_node {plan.procs_per_node} {script}"
    return (
        f"torchrun --nnodes {plan.nodes} --nproc_per_node {plan.procs_per_node} "
        f"--node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port {port} {script}"
    )


def python_command(plan: Plan, settings: HFSettings, script: str) -> str:
    """``python train.py`` where one process without a launcher is enough, else torchrun."""
    if plan.gpus == 1 and settings.backend == "none":
        return f"python {script}"
    return torchrun_command(plan, script)


#: what a smoke test adds to the launch command: random weights from the config.json beside the
#: script, random tokens, one optimizer step; HF_HUB_OFFLINE=1 proves it downloads nothing
SMOKE_FLAGS = "--random-init --synthetic-data --max-steps 1"


def smoke_command(command: str) -> str:
    """The launch command as a smoke test: no GPU needed (gloo on the CPU), no network."""
    return f"HF_HUB_OFFLINE=1 {command} {SMOKE_FLAGS}"


# ----------------------------------------------------------------------------------------------
# The script
# ----------------------------------------------------------------------------------------------


def _line(name: str, value: object, comment: str) -> str:
    return f"{name} = {value!r}  # {comment}"


def render_train_py(
    plan: Plan,
    s: HFSettings,
    *,
    fmt: str,
    launch: str,
    sharding_in_script: bool = True,
    ds_file: str = "ds_config.json",
) -> str:
    """The script. ``sharding_in_script``: TrainingArguments carries deepspeed=/fsdp= (False when
    an accelerate config file does it)."""
    from searcher.emitters.hf_template import BODY
    from searcher.search.briefs import knobs_brief

    cfg = plan.config
    prec = s.precision
    fsdp_value: dict[str, Any] | None = None
    if s.fsdp and sharding_in_script:
        words = ["full_shard" if s.fsdp["reshard_after_forward"] else "shard_grad_op", "auto_wrap"]
        if s.fsdp["offload"]:
            words.append("offload")
        fsdp_value = {
            "fsdp": " ".join(words),
            "fsdp_config": {
                "version": 2,
                "activation_checkpointing": s.activation_checkpointing_by_sharding,
            },
        }
    recipe_note = {
        "fp32": "recipe fp32: fp32 weights, no mixed precision",
        "amp": f"recipe amp: fp32 weights, {prec.half} autocast",
        "master": f"recipe {cfg.recipe}: {prec.half} weights + fp32 master (DeepSpeed {prec.half} mode)",
        "pure": f"recipe {cfg.recipe}: bf16 weights, fp32 states, no master (DeepSpeed)",
        "torch": f"recipe {cfg.recipe}: {prec.load} weights, grads and optimizer states",
    }[prec.mode]
    from searcher.emitters.common import smoke_note

    lines = [
        _line("MODEL", plan.model_ref, "--model overrides; the plan's model: " + plan.model.id),
        _line(
            "SMOKE_NOTE",
            smoke_note(plan),
            "a CPU smoke test (--random-init, no CUDA) builds config.smoke.json: these changes",
        ),
        _line("METHOD", cfg.method, "method"),
        _line("SEQ_LEN", cfg.seq_len, "seq_len: every sequence is packed to this many tokens"),
        _line("MICRO_BATCH", cfg.micro_batch, "micro_batch -> per_device_train_batch_size"),
        _line("GRAD_ACCUM", cfg.grad_accum, "grad_accum -> gradient_accumulation_steps"),
        _line(
            "WORLD_SIZE", cfg.dp, f"dp: processes ({plan.nodes} node(s) x {plan.procs_per_node})"
        ),
        _line("LOAD_DTYPE", prec.load, recipe_note),
        _line(
            "MIXED_PRECISION",
            s.mixed_precision,
            "TrainingArguments bf16/fp16"
            + (
                " (autocast by DeepSpeed torch_autocast)"
                if prec.mode == "amp" and s.backend == "deepspeed"
                else ""
            ),
        ),
        _line("OPTIM", s.optim, f"optimizer {cfg.optimizer} by its Trainer name"),
        _line("OPTIM_ARGS", s.optim_args, "optimizer arguments"),
        _line("ADAM_BETA1", ADAM_BETAS[0], "betas (must equal the DeepSpeed JSON's)"),
        _line("ADAM_BETA2", s.adam_beta2, "betas (Lion: 0.99)"),
        _line("ADAM_EPSILON", ADAM_EPS, "eps"),
        _line(
            "MAX_GRAD_NORM", GRADIENT_CLIPPING, "gradient clipping (DeepSpeed gradient_clipping)"
        ),
        _line("LEARNING_RATE", s.lr, "--learning-rate overrides"),
        _line(
            "GRADIENT_CHECKPOINTING",
            s.gradient_checkpointing,
            f"checkpointing {cfg.checkpointing}"
            + (
                " (done by FSDP's activation checkpointing)"
                if s.activation_checkpointing_by_sharding
                else ""
            ),
        ),
        _line(
            "ACTIVATION_CHECKPOINTING_BY_SHARDING",
            s.activation_checkpointing_by_sharding,
            "FSDP activation_checkpointing",
        ),
        _line("ATTN_IMPLEMENTATION", s.attn, f"attention {cfg.attention}"),
        _line(
            "FUSED_CROSS_ENTROPY", s.fused_ce, f"loss {cfg.loss}: Liger fused linear cross-entropy"
        ),
        _line(
            "LORA",
            s.lora,
            "lora_rank, lora_targets, lora_dropout; lora_alpha = 2 x rank unless --lora-alpha "
            "(fitplan has no alpha knob)"
            if s.lora
            else "full fine-tune: no adapters",
        ),
        _line("ADAPTER_DTYPE", s.adapter_dtype, "adapter_dtype fitplan modelled"),
        _line("QUANT", s.quant, f"quant {cfg.quant}: BitsAndBytesConfig"),
        _line(
            "PREPARE_KBIT",
            s.kbit_prepare,
            "PEFT's QLoRA recipe: prepare_model_for_kbit_training (non-quantised params in fp32)",
        ),
        _line(
            "DEEPSPEED",
            ds_file if (s.ds_config is not None and sharding_in_script) else None,
            f"zero {cfg.zero}, offload {cfg.offload}: DeepSpeed config next to this script"
            if s.ds_config is not None
            else "no DeepSpeed",
        ),
        _line(
            "FSDP",
            fsdp_value,
            f"zero {cfg.zero}, offload {cfg.offload}: FSDP" if s.fsdp else "no FSDP",
        ),
        _line(
            "SHARDED_WEIGHTS",
            s.sharded_weights,
            "weights partitioned (ZeRO-3 / FSDP): no device_map",
        ),
        _line(
            "SYNC_EACH_BATCH",
            sync_each_batch(cfg),
            f"grad_sync {cfg.grad_sync}: accelerate sync_each_batch (FSDP: False keeps every "
            "gradient unsharded until the last micro-batch)"
            if sync_each_batch(cfg) is not None
            else "grad_sync: no FSDP-sharded gradients accumulated, nothing to set",
        ),
        _line("LAUNCH", launch, "how this plan is launched"),
    ]
    if s.fsdp and not sharding_in_script:
        lines.append(
            "# sharding (FSDP) comes from the accelerate config file of the launch command"
        )
    if s.ds_config is not None and not sharding_in_script:
        lines.append(
            "# sharding (DeepSpeed) comes from the accelerate config file of the launch command"
        )
    header = (
        f'"""Train {plan.model.name} with the HF Trainer: fitplan plan, --emit {fmt}.\n\n'
        f"Plan: {cfg.method}, {knobs_brief(cfg)}; {cfg.micro_batch} x {cfg.grad_accum} x {cfg.dp} = "
        f"{cfg.global_batch} sequences of {cfg.seq_len} tokens per optimizer step"
        + (f" on {plan.gpus} x {plan.gpu}" if plan.gpu else "")
        + ".\n\n"
        f"Launch:\n    {launch}\n\n"
        "Smoke test without downloads (random weights from the config, random tokens):\n"
        f"    {smoke_command(launch)}\n"
        "Needs (requirements.txt pins the released versions): "
        + ", ".join(name for name, _why in hf_requirements(s))
        + ".\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "import argparse\nimport json\nimport os\nimport sys\n\n"
        + (
            "# the caching allocator's mode fitplan modelled; set before torch loads (yours wins)\n"
            f'os.environ.setdefault("{ALLOC_CONF_VAR}", "{EXPANDABLE_CONF}")\n\n'
            if cfg.expandable_segments
            else ""
        )
        + "# ---- the plan: every fitplan knob and where it goes "
        + "-" * 40
        + "\n"
    )
    return header + "\n".join(lines) + "\n" + BODY


def hf_requirements(s: HFSettings) -> list[tuple[str, str]]:
    """The packages the script imports for these settings, each with why."""
    needs = [
        ("torch", "install first: the CUDA (or CPU) build for this machine"),
        ("transformers", "Trainer, TrainingArguments, the model"),
        ("accelerate", "the Trainer's launcher and sharding (FSDP2)"),
        ("datasets", "real data (not needed with --synthetic-data)"),
    ]
    if s.lora:
        needs.append(("peft", "LoraConfig, get_peft_model"))
    if s.ds_config is not None:
        needs.append(
            ("deepspeed", f"ZeRO-{s.ds_config['zero_optimization']['stage']} (ds_config.json)")
        )
    if s.quant or s.optim in ("adamw_bnb_8bit", "paged_adamw_8bit", "lion_32bit"):
        why = "the quantised base (BitsAndBytesConfig)" if s.quant else f"optimizer {s.optim}"
        needs.append(("bitsandbytes", why + "; CUDA only"))
    if s.fused_ce:
        needs.append(("liger-kernel", "fused linear cross-entropy; CUDA (Triton) only"))
    if s.attn == "flash_attention_2":
        needs.append(("flash-attn", "attn_implementation flash_attention_2; CUDA only"))
    return needs


def hf_requirements_file(s: HFSettings) -> EmittedFile:
    from searcher.emitters.common import requirements_file

    return requirements_file("hf", hf_requirements(s))


def ds_json_text(ds: dict[str, Any]) -> str:
    return json.dumps(ds, indent=2) + "\n"
