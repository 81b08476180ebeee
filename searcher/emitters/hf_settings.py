"""The decisions behind the HF Trainer + PEFT + bitsandbytes training script.

``hf_settings`` turns a plan into what transformers/PEFT/bitsandbytes (and DeepSpeed or FSDP for
sharding) are told, refusing what they cannot express; :mod:`searcher.emitters.hf_script` writes
the script from them. The formats hf, torchrun, deepspeed and accelerate all launch that script.

| fitplan knob | HF Trainer / PEFT / bitsandbytes |
|---|---|
| method lora / qlora | PEFT LoraConfig on the (quantised) base |
| lora_rank, lora_dropout | LoraConfig r, lora_dropout; lora_alpha = 2 × rank (or --lora-alpha) |
| lora_targets | LoraConfig target_modules ("all-linear", or the module names fitplan counted) |
| adapter_dtype | the adapters cast to it (PEFT's fp32 autocast only when it is fp32) |
| quant int8 / nf4 / nf4-dq | BitsAndBytesConfig load_in_8bit / load_in_4bit nf4, double quant |
| quant gptq / awq | refused (a pre-quantised checkpoint carries its own quantization_config) |
| recipe fp32 / amp / bf16-torch | load dtype fp32 / fp32 + bf16=True / bf16 + bf16=True |
| recipe bf16-master / bf16-pure | DeepSpeed bf16 mode (fp32 master) / bf16_master_weights_and_grads |
| compute_dtype fp16 | fp16=True (amp) or DeepSpeed fp16 (master) |
| optimizer | TrainingArguments optim (adamw_torch_fused, adamw_bnb_8bit, paged_adamw_8bit, sgd, adafactor, lion_32bit) |
| micro_batch, grad_accum | per_device_train_batch_size, gradient_accumulation_steps |
| seq_len | sequences packed to exactly seq_len tokens |
| checkpointing full | gradient_checkpointing=True (FSDP: fsdp_config activation_checkpointing) |
| attention | attn_implementation flash_attention_2 / sdpa / eager |
| loss fused | use_liger_kernel with only fused_linear_cross_entropy |
| zero 0 / 1 / 2 / 3, offload | DDP / DeepSpeed ZeRO-1 / FSDP SHARD_GRAD_OP or ZeRO-2 / FSDP FULL_SHARD or ZeRO-3, CPU offload |
| dp | processes: the launch command's nproc × nnodes |

Refused: selective checkpointing, chunked cross-entropy, tensor and pipeline parallelism, the
optimizer step in backward, fp16 weights with fp16 optimizer states, fp8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from constraints.frozen import frozen
from constraints.precision import optimizer as optimizer_spec
from searcher.emitters.base import EmitOptions, refuse
from searcher.emitters.deepspeed_json import (
    ADAM_BETAS,
    LION_BETAS,
    SGD_MOMENTUM,
    check_parallel,
    deepspeed_config,
)
from searcher.emitters.knobs import SPEED_KNOBS, refuse_speed_knobs

if TYPE_CHECKING:
    from constraints.config import TrainConfig
from searcher.emitters.plan import (
    Plan,
    Precision,
    adapter_dtype,
    lora_alpha,
    lora_target_modules,
    precision,
)

#: what each knob becomes in the script (the hf and torchrun formats; deepspeed and accelerate
#: start from this table)
HF_KNOBS: dict[str, str] = {
    **SPEED_KNOBS,
    "method": "full fine-tune, or PEFT LoRA (get_peft_model) on the base / quantised base",
    "lora_rank": "LoraConfig r",
    "lora_targets": "LoraConfig target_modules",
    "lora_dropout": "LoraConfig lora_dropout",
    "recipe": "model load dtype + TrainingArguments bf16/fp16; fp32-master recipes via DeepSpeed",
    "weight_dtype": "the load dtype (an override other than the recipe's is refused)",
    "adapter_dtype": "the LoRA parameters cast to it after get_peft_model (fp32: PEFT's default, "
    "and for a quantised base PEFT's prepare_model_for_kbit_training)",
    "compute_dtype": "bf16=True or fp16=True (fp8 refused)",
    "optimizer": "TrainingArguments optim by its Trainer name (DeepSpeed JSON optimizer when sharded by it)",
    "quant": "BitsAndBytesConfig: load_in_8bit, or load_in_4bit nf4 with/without double quant",
    "micro_batch": "per_device_train_batch_size",
    "seq_len": "every sequence packed to exactly seq_len tokens",
    "grad_accum": "gradient_accumulation_steps",
    "checkpointing": "gradient_checkpointing (full); selective refused",
    "attention": "attn_implementation flash_attention_2 / sdpa / eager",
    "loss": "fused: use_liger_kernel (fused_linear_cross_entropy only); chunked refused",
    "zero": "0: DDP; 1: DeepSpeed ZeRO-1; 2/3: FSDP (SHARD_GRAD_OP / FULL_SHARD) or DeepSpeed",
    "offload": "FSDP cpu offload (all) or DeepSpeed offload_optimizer / offload_param",
    "tp": "refused above 1 (HF Trainer has no tensor parallelism here)",
    "pp": "refused above 1 (HF Trainer has no pipeline parallelism)",
    "dp": "the number of processes: the launch command's nproc_per_node × nnodes",
    "optimizer_in_backward": "refused (HF Trainer steps after backward)",
    "backend": "single / ddp: plain Trainer; deepspeed: the DeepSpeed JSON; fsdp2: FSDP "
    "(fsdp_version 2); fsdp1 and megatron refused",
}

#: the backends the HF-Trainer formats write (constraints/data/backends.json emitted_by agrees)
HF_BACKENDS: tuple[str, ...] = ("single", "ddp", "deepspeed", "fsdp2")

ATTENTION = {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}
LR_FULL = 2e-5
LR_LORA = 2e-4


@frozen
class HFSettings:
    precision: Precision
    backend: str  # none | ddp | deepspeed | fsdp
    ds_config: dict[str, Any] | None
    fsdp: dict[str, Any] | None  # {"reshard_after_forward": bool, "offload": bool}
    gradient_checkpointing: bool  # TrainingArguments.gradient_checkpointing
    activation_checkpointing_by_sharding: bool  # FSDP's own activation checkpointing
    optim: str
    optim_args: str | None
    adam_beta2: float
    mixed_precision: str  # bf16 | fp16 | no (TrainingArguments)
    attn: str
    fused_ce: bool
    lora: dict[str, Any] | None
    adapter_dtype: str | None
    quant: dict[str, Any] | None
    kbit_prepare: bool  # PEFT's prepare_model_for_kbit_training (non-quantised params in fp32)
    lr: float

    @property
    def sharded_weights(self) -> bool:
        """Weights partitioned across processes (ZeRO-3 / FSDP): no device_map when loading."""
        if self.backend == "fsdp":
            return True
        return (
            self.backend == "deepspeed"
            and bool(self.ds_config)
            and (self.ds_config or {}).get("zero_optimization", {}).get("stage") == 3
        )


def needs_deepspeed(plan: Plan, prec: Precision) -> str | None:
    """Why the plan needs DeepSpeed under the HF Trainer (None if it does not)."""
    cfg = plan.config
    if prec.mode == "master":
        return f"recipe {cfg.recipe} keeps an fp32 master copy of 16-bit weights (DeepSpeed's bf16/fp16 mode)"
    if prec.mode == "pure":
        return f"recipe {cfg.recipe} keeps bf16 weights with fp32 states and no master (DeepSpeed only)"
    if cfg.zero == 1:
        return "ZeRO-1 (sharded optimizer states only) exists in DeepSpeed, not in FSDP"
    if cfg.offload == "optimizer":
        return "offloading the optimizer alone exists in DeepSpeed, not in FSDP"
    return None


def choose_backend(plan: Plan, prec: Precision, fmt: str, backend: str) -> str:
    cfg = plan.config
    why_ds = needs_deepspeed(plan, prec)
    if backend not in ("auto", "deepspeed", "fsdp"):
        raise refuse(fmt, "backend", backend, "choose auto, deepspeed or fsdp")
    if backend == "fsdp":
        if why_ds:
            raise refuse(fmt, "backend", "fsdp", why_ds, "use --backend deepspeed or auto")
        if cfg.zero not in (2, 3):
            raise refuse(
                fmt,
                "zero",
                cfg.zero,
                "FSDP shards as ZeRO-2 (SHARD_GRAD_OP) or ZeRO-3 (FULL_SHARD) only",
                "use --backend auto",
            )
        return "fsdp"
    if backend == "deepspeed" or why_ds:
        return "deepspeed"
    if cfg.zero in (2, 3):
        return "fsdp"
    return "ddp" if cfg.dp > 1 else "none"


def optimizer_settings(plan: Plan, fmt: str) -> tuple[str, str | None, float]:
    """(TrainingArguments optim, optim_args, adam_beta2)."""
    cfg = plan.config
    spec = optimizer_spec(cfg.optimizer)
    if not spec.hf_name:
        raise refuse(fmt, "optimizer", cfg.optimizer, "HF Trainer has no optimizer of that name")
    if cfg.optimizer == "sgd-momentum":
        return spec.hf_name, f"momentum={SGD_MOMENTUM}", ADAM_BETAS[1]
    if cfg.optimizer == "lion":
        return spec.hf_name, None, LION_BETAS[1]
    return spec.hf_name, None, ADAM_BETAS[1]


def lora_settings(plan: Plan, options: EmitOptions) -> dict[str, Any] | None:
    cfg = plan.config
    if cfg.method == "full":
        return None
    return {
        "r": cfg.lora_rank,
        "lora_alpha": lora_alpha(plan, options.lora_alpha),
        "lora_dropout": cfg.lora_dropout,
        "target_modules": lora_target_modules(plan),
    }


def quant_settings(plan: Plan, prec: Precision, fmt: str, sharded: bool) -> dict[str, Any] | None:
    cfg = plan.config
    if cfg.quant == "none":
        return None
    if cfg.quant in ("gptq", "awq"):
        raise refuse(
            fmt,
            "quant",
            cfg.quant,
            "a GPTQ / AWQ base is a pre-quantised checkpoint, loaded with the quantization_config "
            "its own config.json carries; fitplan writes BitsAndBytesConfig only",
            "pin --quant nf4 or nf4-dq, or load the quantised checkpoint yourself",
        )
    if cfg.quant == "int8":
        if sharded:
            raise refuse(
                fmt,
                "quant",
                "int8",
                "bitsandbytes int8 weights cannot be sharded by FSDP / ZeRO-3",
                "pin --zero 0/1/2, or --quant nf4",
            )
        return {"load_in_8bit": True}
    q: dict[str, Any] = {
        "load_in_4bit": True,
        "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": cfg.quant == "nf4-dq",
        "bnb_4bit_compute_dtype": prec.half or "fp32",
    }
    if sharded:
        # FSDP / ZeRO-3 shard the packed 4-bit weights as tensors of the model's float dtype
        q["bnb_4bit_quant_storage"] = prec.load
    return q


def check_hf_knobs(plan: Plan, fmt: str, prec: Precision, *, chunked_loss: bool = False) -> None:
    """Knobs the HF Trainer cannot express, whatever the sharding."""
    cfg = plan.config
    if plan.model.arch != "decoder":
        raise refuse(
            fmt,
            "model",
            plan.model.id,
            f"the script trains causal language models (AutoModelForCausalLM); {plan.model.name} "
            f"is an {plan.model.arch} model",
        )
    check_parallel(plan, fmt, "the HF Trainer")
    if cfg.optimizer_in_backward:
        raise refuse(
            fmt,
            "optimizer_in_backward",
            True,
            "the HF Trainer steps the optimizer after backward",
            "drop --optimizer-in-backward, or --emit torchtune (full fine-tune)",
        )
    if cfg.checkpointing == "selective":
        raise refuse(
            fmt,
            "checkpointing",
            "selective",
            "the HF Trainer recomputes whole layers (gradient_checkpointing); it has no "
            "attention-only selective recomputation",
            "pin --checkpointing full or none",
        )
    if cfg.loss == "chunked" and not chunked_loss:
        raise refuse(
            fmt,
            "loss",
            "chunked",
            "the HF Trainer has no chunked cross-entropy (only Liger's fused linear cross-entropy)",
            "pin --loss fused or standard, or --emit torchtune / axolotl",
        )
    if prec.mode == "torch" and prec.half == "fp16":
        raise refuse(
            fmt,
            "recipe",
            f"{cfg.recipe} with fp16 compute",
            "fp16 weights with fp16 optimizer states: the Trainer's fp16 GradScaler refuses fp16 "
            "parameters",
            "use --recipe bf16-master or amp with --compute-dtype fp16",
        )


def hf_settings(
    plan: Plan,
    options: EmitOptions,
    fmt: str,
    *,
    backend: str | None = None,
    chunked_loss: bool = False,
) -> HFSettings:
    """``chunked_loss``: the caller expresses chunked cross-entropy itself (axolotl)."""
    refuse_speed_knobs(fmt, plan.config)
    cfg = plan.config
    prec = precision(plan, fmt)
    check_hf_knobs(plan, fmt, prec, chunked_loss=chunked_loss)
    chosen = choose_backend(plan, prec, fmt, backend or options.backend)
    lr = LR_FULL if cfg.method == "full" else LR_LORA
    ds = deepspeed_config(plan, fmt, lr=lr) if chosen == "deepspeed" else None
    fsdp = None
    if chosen == "fsdp":
        fsdp = {"reshard_after_forward": cfg.zero == 3, "offload": cfg.offload == "all"}
    if chosen in ("none", "ddp") and cfg.offload != "none":
        raise refuse(fmt, "offload", cfg.offload, "offload needs ZeRO/FSDP sharding")
    if prec.mode in ("master", "pure") or (prec.mode == "torch" and chosen == "deepspeed"):
        ad = adapter_dtype(cfg) if cfg.method != "full" else None
        if ad == "fp32":
            raise refuse(
                fmt,
                "adapter_dtype",
                "fp32",
                "DeepSpeed's bf16 modes cast the whole model, adapters included, to bf16",
                "use --recipe amp (fp32 adapters under autocast), or drop --adapter-dtype",
            )
    sharded = chosen == "fsdp" or (chosen == "deepspeed" and cfg.zero == 3)
    optim, optim_args, beta2 = optimizer_settings(plan, fmt)
    if prec.mode == "amp" and chosen == "deepspeed":
        mixed = "no"  # DeepSpeed's torch_autocast does the autocast
    elif prec.mode == "fp32":
        mixed = "no"
    else:
        mixed = prec.half or "no"
    ac_by_fsdp = chosen == "fsdp" and cfg.checkpointing == "full"
    return HFSettings(
        precision=prec,
        backend=chosen,
        ds_config=ds,
        fsdp=fsdp,
        gradient_checkpointing=cfg.checkpointing == "full" and not ac_by_fsdp,
        activation_checkpointing_by_sharding=ac_by_fsdp,
        optim=optim,
        optim_args=optim_args,
        adam_beta2=beta2,
        mixed_precision=mixed,
        attn=ATTENTION[cfg.attention],
        fused_ce=cfg.loss == "fused",
        lora=lora_settings(plan, options),
        adapter_dtype=adapter_dtype(cfg) if cfg.method != "full" else None,
        quant=quant_settings(plan, prec, fmt, sharded),
        kbit_prepare=kbit_prepared(cfg),
        lr=lr,
    )


def kbit_prepared(cfg: TrainConfig) -> bool:
    """Whether the plan is PEFT's QLoRA recipe (ConfigBatch.kbit_prepared), which the script then
    runs: ``prepare_model_for_kbit_training`` before ``get_peft_model``."""
    from constraints.config_batch import ConfigBatch

    return bool(ConfigBatch.from_configs([cfg]).kbit_prepared[0])
