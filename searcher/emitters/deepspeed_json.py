"""The DeepSpeed config JSON for a plan (used by --emit deepspeed, and by hf, torchrun, accelerate
and axolotl whenever the plan needs DeepSpeed).

Mapping (DeepSpeed ≥ 0.18 key names, checked against deepspeed.runtime.config.DeepSpeedConfig):

| fitplan knob | DeepSpeed key |
|---|---|
| micro_batch | train_micro_batch_size_per_gpu |
| grad_accum | gradient_accumulation_steps |
| micro × accum × dp | train_batch_size |
| zero | zero_optimization.stage (+ reduce/allgather buckets, stage-3 prefetch, max live: written out) |
| offload optimizer / all | zero_optimization.offload_optimizer / + offload_param (device cpu) |
| recipe bf16-master | bf16.enabled (fp16.enabled with fp16 compute): fp32 master + fp32 states |
| recipe bf16-pure | bf16 + bf16_master_weights_and_grads (ZeRO-Offload with CPU Adam only) |
| recipe bf16-torch | bf16 + bf16_master_weights_and_grads + bf16_optimizer_states (ZeRO 1-3) |
| recipe amp | torch_autocast {enabled, dtype} on fp32 weights |
| recipe fp32 | no bf16/fp16/torch_autocast section |
| optimizer adamw / lion / sgd / sgd-momentum | optimizer.type AdamW / Lion / SGD (torch.optim) |
| optimizer adamw-8bit / paged / adafactor | no optimizer section: the client optimizer of the script |
"""

from __future__ import annotations

from typing import Any

from constraints.backend_memory import deepspeed_buckets
from constraints.errors import FitplanError
from searcher.emitters.base import refuse
from searcher.emitters.plan import Plan, precision

ADAM_BETAS = (0.9, 0.999)
LION_BETAS = (0.9, 0.99)
ADAM_EPS = 1e-8
SGD_MOMENTUM = 0.9
GRADIENT_CLIPPING = 1.0
#: optimizers the JSON names itself; the others come from the training script (client optimizer)
DS_OPTIMIZERS = {
    "adamw": "AdamW",
    "lion": "Lion",
    "sgd": "SGD",
    "sgd-momentum": "SGD",
}


def check_parallel(plan: Plan, fmt: str, what: str) -> None:
    cfg = plan.config
    if cfg.tp > 1:
        raise refuse(
            fmt,
            "tp",
            cfg.tp,
            f"{what} has no tensor parallelism",
            "pin --tp 1, or --emit torchtune",
        )
    if cfg.pp > 1:
        raise refuse(fmt, "pp", cfg.pp, f"{what} has no pipeline parallelism", "pin --pp 1")


def optimizer_section(plan: Plan, fmt: str, lr: float) -> dict[str, Any] | None:
    cfg = plan.config
    name = cfg.optimizer.lower()
    if name not in DS_OPTIMIZERS:
        if cfg.offload != "none" and name in ("adamw-8bit", "paged-adamw-8bit"):
            raise refuse(
                fmt,
                "optimizer",
                name,
                "a bitsandbytes 8-bit optimizer steps on the GPU; with offload "
                f"{cfg.offload} DeepSpeed steps the offloaded states on the CPU",
                "pin --optimizer adamw with offload, or --offload none",
            )
        return None
    if name == "adamw":
        params: dict[str, Any] = {
            "lr": lr,
            "betas": list(ADAM_BETAS),
            "eps": ADAM_EPS,
            "weight_decay": 0.0,
        }
    elif name == "lion":
        params = {"lr": lr, "betas": list(LION_BETAS), "weight_decay": 0.0}
    else:
        params = {
            "lr": lr,
            "momentum": SGD_MOMENTUM if name == "sgd-momentum" else 0.0,
            "weight_decay": 0.0,
        }
    return {"type": DS_OPTIMIZERS[name], "params": params}


def deepspeed_config(plan: Plan, fmt: str, *, lr: float) -> dict[str, Any]:
    """The JSON as a dict. Refuses (FitplanError) what DeepSpeed cannot express."""
    cfg = plan.config
    check_parallel(plan, fmt, "a DeepSpeed JSON (ZeRO data parallelism)")
    if cfg.optimizer_in_backward:
        raise refuse(
            fmt,
            "optimizer_in_backward",
            True,
            "DeepSpeed has no optimizer step fused into backward",
            "drop --optimizer-in-backward, or --emit torchtune (full fine-tune)",
        )
    prec = precision(plan, fmt)
    ds: dict[str, Any] = {
        "train_batch_size": cfg.micro_batch * cfg.grad_accum * cfg.dp,
        "train_micro_batch_size_per_gpu": cfg.micro_batch,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": GRADIENT_CLIPPING,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    half = prec.half
    ds_dtype = {"bf16": "bfloat16", "fp16": "float16"}
    if prec.mode == "amp":
        ds["torch_autocast"] = {"enabled": True, "dtype": ds_dtype[half or "bf16"]}
    elif prec.mode == "master":
        if half == "fp16":
            ds["fp16"] = {
                "enabled": True,
                "loss_scale": 0,
                "initial_scale_power": 16,
                "loss_scale_window": 1000,
                "hysteresis": 2,
                "min_loss_scale": 1,
            }
        else:
            ds["bf16"] = {"enabled": True}
    elif prec.mode in ("pure", "torch"):
        if half != "bf16":
            raise refuse(
                fmt,
                "compute_dtype",
                half,
                f"DeepSpeed keeps 16-bit weights without an fp32 master ({cfg.recipe}) only in bf16",
                "use --recipe bf16-master with fp16",
            )
        if cfg.zero == 0:
            raise refuse(
                fmt,
                "recipe",
                cfg.recipe,
                "DeepSpeed drops the fp32 master copy (bf16_master_weights_and_grads) only "
                "under ZeRO stage 1, 2 or 3",
                "pin --zero 1/2/3, or --emit hf (plain torch on a bf16 model)",
            )
        if prec.mode == "pure" and (cfg.offload == "none" or cfg.optimizer != "adamw"):
            raise refuse(
                fmt,
                "recipe",
                cfg.recipe,
                "DeepSpeed keeps bf16 weights with fp32 optimizer states and no master copy only "
                "under ZeRO-Offload with its CPU Adam (bf16_master_weights_and_grads)",
                "pin --offload optimizer --optimizer adamw, or use --recipe bf16-master",
            )
        if prec.mode == "torch" and cfg.offload != "none" and cfg.optimizer != "adamw":
            raise refuse(
                fmt,
                "optimizer",
                cfg.optimizer,
                "bf16 optimizer states under ZeRO-Offload need DeepSpeed's CPU Adam",
                "pin --optimizer adamw, or --offload none",
            )
        ds["bf16"] = {"enabled": True, "bf16_master_weights_and_grads": True}
        if prec.mode == "torch":
            ds["bf16"]["bf16_optimizer_states"] = True
    zero: dict[str, Any] = {"stage": cfg.zero}
    if cfg.zero >= 1:
        # bucket sizes written out (not DeepSpeed's 5e8-element defaults): the memory model
        # budgets exactly these (constraints/backend_memory.py deepspeed_buckets)
        zero.update(overlap_comm=True, contiguous_gradients=True)
        buckets = deepspeed_buckets(plan.model.hidden)
        zero["reduce_bucket_size"] = buckets["reduce_bucket_size"]
        zero["allgather_bucket_size"] = buckets["allgather_bucket_size"]
        if cfg.zero == 3:
            for key in (
                "stage3_prefetch_bucket_size",
                "stage3_param_persistence_threshold",
                "stage3_max_live_parameters",
            ):
                zero[key] = buckets[key]
    if cfg.offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if cfg.offload == "all":
        if cfg.zero != 3:
            raise FitplanError("offload all (parameter offload) needs ZeRO-3")
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if cfg.zero == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    ds["zero_optimization"] = zero
    opt = optimizer_section(plan, fmt, lr)
    if opt is not None:
        ds["optimizer"] = opt
    if opt is None or opt["type"] != "AdamW":
        # a client optimizer (bitsandbytes, HF Adafactor) or a torch.optim one DeepSpeed has not
        # tested with ZeRO; with offload it steps on the CPU instead of DeepSpeed's CPU Adam
        ds["zero_allow_untested_optimizer"] = True
        if cfg.offload != "none":
            ds["zero_force_ds_cpu_optimizer"] = False
    return ds
