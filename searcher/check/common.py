"""What the frameworks' own names mean in fitplan's knobs: optimizers, attention, precision, and
the DeepSpeed JSON every HF-Trainer based format can point at.

Sources: transformers ``training_args.OptimizerNames`` (Trainer ``optim`` names) and
``integrations/deepspeed.py`` ("auto" values filled from TrainingArguments); DeepSpeed
``runtime/config.py`` / ``runtime/zero/config.py`` (key names, defaults: stage 0, no offload).
"""

from __future__ import annotations

from typing import Any

from searcher.check.doc import Document, get
from searcher.check.lora_regex import is_regex, regex_targets
from searcher.check.reading import Edit, Reading

#: HF Trainer ``optim`` (also axolotl ``optimizer``, LLaMA-Factory ``optim``) → fitplan optimizer
TRAINER_OPTIMIZERS: dict[str, str] = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw",
    "adamw_hf": "adamw",
    "adamw_apex_fused": "adamw",
    "adamw_anyprecision": "adamw",
    "adamw_torch_xla": "adamw",
    "adamw_torch_npu_fused": "adamw",
    "adamw_bnb_8bit": "adamw-8bit",
    "adamw_8bit": "adamw-8bit",
    "adamw_torch_8bit": "adamw-8bit",
    "paged_adamw_8bit": "paged-adamw-8bit",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "lion_32bit": "lion",
    "paged_lion_32bit": "lion",
}
#: names fitplan has no exact model of, with the nearest knob and why
APPROX_OPTIMIZERS: dict[str, tuple[str, str]] = {
    "paged_adamw_32bit": (
        "adamw",
        "paged 32-bit AdamW: fp32 states in unified memory, modelled as resident AdamW",
    ),
    "paged_adamw": ("adamw", "paged AdamW: modelled as resident AdamW"),
    "lion_8bit": ("lion", "8-bit Lion: modelled as 32-bit Lion (an over-estimate)"),
    "paged_lion_8bit": ("lion", "8-bit paged Lion: modelled as 32-bit Lion (an over-estimate)"),
    "adamw_torch_4bit": (
        "adamw-8bit",
        "4-bit AdamW (torchao): modelled as 8-bit AdamW (an over-estimate)",
    ),
}
#: fitplan optimizer → the Trainer name written back
OPTIMIZER_NAMES: dict[str, str] = {
    "adamw": "adamw_torch_fused",
    "adamw-8bit": "adamw_bnb_8bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "sgd": "sgd",
    "sgd-momentum": "sgd",
    "adafactor": "adafactor",
    "lion": "lion_32bit",
}
#: transformers ``attn_implementation`` → fitplan attention
ATTN_IMPL: dict[str, str] = {
    "flash_attention_2": "flash",
    "flash_attention_3": "flash",
    "sdpa": "sdpa",
    "eager": "eager",
    "flex_attention": "sdpa",
}
DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "fp16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "fp32": "fp32",
    "float": "fp32",
}


def trainer_optimizer(r: Reading, doc: Document, key: str, name: Any) -> None:
    text = str(name).strip().lower()
    if text in TRAINER_OPTIMIZERS:
        r.fields["optimizer"] = TRAINER_OPTIMIZERS[text]
        r.read(doc, key, "optimizer")
    elif text in APPROX_OPTIMIZERS:
        r.fields["optimizer"], why = APPROX_OPTIMIZERS[text]
        r.read(doc, key, "optimizer", why)
        r.notes.append(f"{key}: {why}")
    else:
        r.unmapped(doc, key, f"optimizer '{name}' has no fitplan model (AdamW assumed)")


def lora_targets(value: Any) -> str | None:
    """PEFT ``target_modules`` (a list, a name, or "all-linear") as fitplan's ``lora_targets``."""
    if value is None:
        return None
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("all-linear", "all_linear", "all"):
            return "all-linear"
        if is_regex(value):
            found = regex_targets(value)
            if found:
                return ",".join(found)
        return ",".join(x.strip() for x in value.split(",") if x.strip())
    if isinstance(value, list):
        return ",".join(str(x).strip() for x in value)
    return None


def precision_fields(
    half: str | None, weights: str, ds: dict[str, Any] | None, lora: bool = False
) -> dict[str, Any]:
    """The recipe from what a run does: ``half`` (bf16/fp16 compute or None), the dtype the model is
    loaded in (``weights``), and the DeepSpeed JSON if any (``ds_precision`` below)."""
    out: dict[str, Any] = {}
    if ds is not None and ds.get("mode"):
        mode, half = ds["mode"], ds.get("half") or half
        out["recipe"] = {
            "master": "bf16-master",
            "pure": "bf16-pure",
            "torch": "bf16-torch",
            "amp": "amp",
        }[mode]
    elif half is None:
        out["recipe"] = "fp32"
    elif weights == "fp32":
        out["recipe"] = "amp"
    else:
        out["recipe"] = "bf16-torch"
    if half == "fp16" and out["recipe"] != "fp32":
        out["compute_dtype"] = "fp16"
    return out


def ds_precision(ds: dict[str, Any], half_flag: str | None) -> dict[str, Any]:
    """DeepSpeed's precision mode: bf16/fp16 ``enabled`` ("auto" = the Trainer's flag)."""

    def on(section: str) -> bool:
        v = get(ds, f"{section}.enabled")
        return v is True or (v == "auto" and half_flag == section)

    bf = (
        on("bf16")
        or get(ds, "bfloat16.enabled") is True
        or (get(ds, "bfloat16.enabled") == "auto" and half_flag == "bf16")
    )
    if get(ds, "torch_autocast.enabled") is True:
        dtype = str(get(ds, "torch_autocast.dtype", "bfloat16"))
        return {"mode": "amp", "half": DTYPES.get(dtype.replace("torch.", ""), "bf16")}
    if bf:
        sec = "bf16" if isinstance(ds.get("bf16"), dict) else "bfloat16"
        if get(ds, f"{sec}.bf16_master_weights_and_grads") is True:
            opt16 = get(ds, f"{sec}.bf16_optimizer_states") is True
            return {"mode": "torch" if opt16 else "pure", "half": "bf16"}
        return {"mode": "master", "half": "bf16"}
    if on("fp16"):
        return {"mode": "master", "half": "fp16"}
    return {}


def read_deepspeed(r: Reading, doc: Document, half_flag: str | None) -> dict[str, Any]:
    """Read a DeepSpeed JSON into ``r``; returns its precision (for ``precision_fields``)."""
    ds = doc.data if isinstance(doc.data, dict) else {}
    stage = get(ds, "zero_optimization.stage", 0)
    r.fields["zero"] = int(stage) if str(stage).isdigit() else 0
    r.read(doc, "zero_optimization.stage", "zero")
    off_opt = str(get(ds, "zero_optimization.offload_optimizer.device", "none")).lower()
    off_par = str(get(ds, "zero_optimization.offload_param.device", "none")).lower()
    if off_par in ("cpu", "nvme"):
        r.fields["offload"] = "all"
    elif off_opt in ("cpu", "nvme"):
        r.fields["offload"] = "optimizer"
    for key in (
        "zero_optimization.offload_optimizer.device",
        "zero_optimization.offload_param.device",
    ):
        if get(ds, key) is not None:
            r.read(
                doc,
                key,
                "offload",
                "nvme is modelled as CPU offload" if "nvme" in (off_opt, off_par) else "",
            )
    for key in ("zero_optimization.offload_optimizer", "zero_optimization.offload_param"):
        for sub in (
            "pin_memory",
            "buffer_count",
            "fast_init",
            "ratio",
            "nvme_path",
            "buffer_size",
            "max_in_cpu",
            "pipeline_read",
            "pipeline_write",
        ):
            if get(ds, f"{key}.{sub}") is not None:
                r.ignore(doc, f"{key}.{sub}", "host-side offload detail (CPU RAM, not GPU memory)")
    prec = ds_precision(ds, half_flag)
    for sec in ("bf16", "bfloat16", "fp16", "torch_autocast"):
        if isinstance(ds.get(sec), dict):
            for k in ds[sec]:
                fld = (
                    "recipe"
                    if k
                    in (
                        "enabled",
                        "bf16_master_weights_and_grads",
                        "bf16_optimizer_states",
                        "dtype",
                    )
                    else None
                )
                if fld:
                    r.read(doc, f"{sec}.{k}", fld)
                else:
                    r.ignore(doc, f"{sec}.{k}", "loss-scaling detail")
    for key in (
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "train_batch_size",
    ):
        if ds.get(key) == "auto":
            r.ignore(doc, key, "'auto': the Trainer fills it from its own value")
    if "zero_allow_untested_optimizer" in ds:
        r.ignore(doc, "zero_allow_untested_optimizer", "lets a client optimizer run under ZeRO")
    mb = ds.get("train_micro_batch_size_per_gpu")
    if isinstance(mb, int):
        r.fields["micro_batch"] = mb
        r.read(doc, "train_micro_batch_size_per_gpu", "micro_batch")
    ga = ds.get("gradient_accumulation_steps")
    if isinstance(ga, int):
        r.fields["grad_accum"] = ga
        r.read(doc, "gradient_accumulation_steps", "grad_accum")
    tb = ds.get("train_batch_size")
    if isinstance(tb, int) and isinstance(mb, int) and isinstance(ga, int) and tb % (mb * ga) == 0:
        r.gpus = r.gpus or tb // (mb * ga)
        r.read(doc, "train_batch_size", "dp", "train_batch_size ÷ (micro × accumulation)")
    opt = get(ds, "optimizer.type")
    if opt is not None:
        name = str(opt).lower()
        known = {
            "adamw": "adamw",
            "adam": "adamw",
            "fusedadam": "adamw",
            "cpuadam": "adamw",
            "lion": "lion",
            "sgd": "sgd",
        }
        if name in known:
            r.fields["optimizer"] = known[name]
            if name == "sgd" and get(ds, "optimizer.params.momentum", 0) not in (
                0,
                0.0,
                None,
                "auto",
            ):
                r.fields["optimizer"] = "sgd-momentum"
            r.read(doc, "optimizer.type", "optimizer")
        else:
            r.unmapped(doc, "optimizer.type", f"DeepSpeed optimizer {opt} has no fitplan model")
    for key in (
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.allgather_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_max_reuse_distance",
        "zero_optimization.stage3_param_persistence_threshold",
        "zero_optimization.sub_group_size",
        # DeepSpeedZeroConfig field names (the stage3_ names are their aliases)
        "zero_optimization.prefetch_bucket_size",
        "zero_optimization.max_live_parameters",
        "zero_optimization.max_reuse_distance",
        "zero_optimization.param_persistence_threshold",
        "zero_optimization.model_persistence_threshold",
    ):
        if get(ds, key) is not None:
            auto = (
                " ('auto': sized from hidden_size by the HF integration)"
                if get(ds, key) == "auto"
                else ""
            )
            r.unmapped(
                doc,
                key,
                f"DeepSpeed buffer size{auto}: fitplan models the default working set, not this value",
            )
    for key in (
        "zero_optimization.overlap_comm",
        "zero_optimization.contiguous_gradients",
        "zero_optimization.reduce_scatter",
        "zero_optimization.allgather_partitions",
        "zero_optimization.round_robin_gradients",
    ):
        if get(ds, key) is not None:
            r.ignore(doc, key, "communication scheduling (time, not the modelled memory)")
    autotp = get(ds, "tensor_parallel.autotp_size")
    if isinstance(autotp, int) and autotp > 1:
        r.unmapped(
            doc,
            "tensor_parallel.autotp_size",
            f"DeepSpeed AutoTP {autotp}-way tensor parallelism is not read (data parallel assumed)",
        )
    if isinstance(ds.get("autotuning"), dict):
        r.ignore(
            doc, "autotuning", "DeepSpeed autotuning searches the batch; the file's own is read"
        )
    if isinstance(ds.get("activation_checkpointing"), dict):
        r.unmapped(
            doc,
            "activation_checkpointing",
            "DeepSpeed's own checkpointing API (the model's gradient_checkpointing is what fitplan reads)",
        )
    return prec


def deepspeed_edits(doc: Document, old: Any, new: Any) -> list[Edit] | None:
    """Edits to a DeepSpeed JSON for a change of ZeRO stage or offload (None: not expressible)."""
    edits: list[Edit] = []
    if new.zero != old.zero:
        edits.append(Edit(doc.path, "zero_optimization.stage", new.zero))
    if new.offload != old.offload:
        from searcher.check.doc import DELETE

        want_opt = new.offload in ("optimizer", "all")
        want_par = new.offload == "all"
        edits.append(
            Edit(
                doc.path,
                "zero_optimization.offload_optimizer",
                {"device": "cpu", "pin_memory": True} if want_opt else DELETE,
            )
        )
        edits.append(
            Edit(
                doc.path,
                "zero_optimization.offload_param",
                {"device": "cpu", "pin_memory": True} if want_par else DELETE,
            )
        )
    return edits


#: each Trainer-family format's key names (searcher.check.trainer reads them, trainer_write writes)
NAMES: dict[str, dict[str, str]] = {
    "axolotl": {
        "model": "base_model",
        "seq_len": "sequence_len",
        "micro_batch": "micro_batch_size",
        "optimizer": "optimizer",
        "rank": "lora_r",
        "targets": "lora_target_modules",
    },
    "llamafactory": {
        "model": "model_name_or_path",
        "seq_len": "cutoff_len",
        "micro_batch": "per_device_train_batch_size",
        "optimizer": "optim",
        "rank": "lora_rank",
        "targets": "lora_target",
    },
    "hf-trainer": {
        "model": "model_name_or_path",
        "seq_len": "max_seq_length",
        "micro_batch": "per_device_train_batch_size",
        "optimizer": "optim",
        "rank": "lora_r",
        "targets": "lora_target_modules",
    },
}


def _is_ds(data: dict[str, Any]) -> bool:
    return any(
        k in data
        for k in ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size")
    )
