"""Edits to an HF-Trainer based config (axolotl, LLaMA-Factory, TrainingArguments) for a change
of knobs, in each format's own key names (``trainer.NAMES``); None where the format cannot say it
(the suggestion is then not offered)."""

from __future__ import annotations

from typing import Any

from searcher.check.common import NAMES, OPTIMIZER_NAMES, _is_ds, deepspeed_edits
from searcher.check.doc import get
from searcher.check.reading import Edit, Reading


def trainer_writer(fmt: str):
    n = NAMES[fmt]

    def write(r: Reading, old: Any, new: Any) -> list[Edit] | None:
        doc = r.docs[0]
        d = doc.data or {}
        edits: list[Edit] = []

        def put(key: str, value: Any) -> None:
            edits.append(Edit(doc.path, key, value))

        mb_key = n["micro_batch"]
        ds_doc = next((x for x in r.docs[1:] if isinstance(x.data, dict) and _is_ds(x.data)), None)
        for fld, key in (("micro_batch", mb_key), ("grad_accum", "gradient_accumulation_steps")):
            if getattr(new, fld) != getattr(old, fld):
                put(key, getattr(new, fld))
                ds_key = "train_micro_batch_size_per_gpu" if fld == "micro_batch" else fld
                if ds_doc is not None and isinstance(ds_doc.data.get(ds_key), int):
                    edits.append(Edit(ds_doc.path, ds_key, getattr(new, fld)))
        if new.seq_len != old.seq_len:
            key = next(
                (k for k in (n["seq_len"], "max_seq_length", "max_length") if k in d), n["seq_len"]
            )
            put(key, new.seq_len)
        if new.checkpointing != old.checkpointing:
            if new.checkpointing == "selective":
                return None
            if fmt == "llamafactory":
                put("disable_gradient_checkpointing", new.checkpointing == "none")
            else:
                put("gradient_checkpointing", new.checkpointing == "full")
        if new.loss != old.loss:
            if fmt == "axolotl":
                if new.loss == "fused":
                    plugins = list(d.get("plugins") or [])
                    if "axolotl.integrations.liger.LigerPlugin" not in plugins:
                        put("plugins", [*plugins, "axolotl.integrations.liger.LigerPlugin"])
                    put("liger_fused_linear_cross_entropy", True)
                elif new.loss == "chunked":
                    put("chunked_cross_entropy", True)
                else:
                    return None
            elif new.loss == "fused":
                put("enable_liger_kernel" if fmt == "llamafactory" else "use_liger_kernel", True)
            else:
                return None
        if new.optimizer != old.optimizer:
            if new.optimizer == "sgd-momentum" or new.optimizer not in OPTIMIZER_NAMES:
                return None
            if ds_doc is not None and get(ds_doc.data, "optimizer.type") is not None:
                return None
            put(
                next((k for k in (n["optimizer"], "optim", "optimizer") if k in d), n["optimizer"]),
                OPTIMIZER_NAMES[new.optimizer],
            )
        if (new.method, new.quant, new.lora_rank) != (old.method, old.quant, old.lora_rank):
            if new.method == "full" or (
                fmt == "hf-trainer" and any(x.data and "peft_type" in x.data for x in r.docs[1:])
            ):
                return None
            if fmt == "axolotl":
                put("adapter", "qlora" if new.quant in ("nf4", "nf4-dq") else "lora")
            elif fmt == "llamafactory":
                put("finetuning_type", "lora")
            else:
                put("use_peft", True)
            if new.quant != old.quant:
                if new.quant in ("nf4", "nf4-dq"):
                    if fmt == "llamafactory":
                        put("quantization_bit", 4)
                        put("double_quantization", new.quant == "nf4-dq")
                    else:
                        put("load_in_4bit", True)
                        if fmt == "axolotl":
                            put(
                                "bnb_config_kwargs",
                                {
                                    "bnb_4bit_quant_type": "nf4",
                                    "bnb_4bit_use_double_quant": new.quant == "nf4-dq",
                                },
                            )
                        else:
                            put("use_bnb_nested_quant", new.quant == "nf4-dq")
                else:
                    return None
            if old.method == "full" or new.lora_rank != old.lora_rank:
                put(n["rank"], new.lora_rank)
                if old.method == "full":
                    if fmt == "axolotl":
                        put("lora_target_linear", True)
                    elif fmt == "hf-trainer":
                        put("lora_target_modules", "all-linear")
        if (new.zero, new.offload) != (old.zero, old.offload):
            if ds_doc is not None:
                more = deepspeed_edits(ds_doc, old, new)
                if more is None:
                    return None
                edits += more
            elif fmt == "axolotl" and new.zero in (2, 3):
                fc = dict(d.get("fsdp_config") or {})
                fc.update(reshard_after_forward=new.zero == 3, offload_params=new.offload == "all")
                if new.offload == "optimizer":
                    return None
                put("fsdp_version", 2)
                put("fsdp_config", fc)
            elif fmt == "hf-trainer" and new.zero in (2, 3) and new.offload != "optimizer":
                put(
                    "fsdp",
                    ("full_shard" if new.zero == 3 else "shard_grad_op")
                    + (" offload" if new.offload == "all" else "")
                    + " auto_wrap",
                )
            else:
                return None
        if new.attention != old.attention:
            return None
        if (new.recipe, new.adapter_dtype, new.compute_dtype) != (
            old.recipe,
            old.adapter_dtype,
            old.compute_dtype,
        ):
            return None
        if (new.tp, new.pp, new.dp, new.optimizer_in_backward) != (
            old.tp,
            old.pp,
            old.dp,
            old.optimizer_in_backward,
        ):
            return None
        if new.lora_targets != old.lora_targets and old.method != "full":
            return None
        return edits

    return write


#: what a DeepSpeed JSON itself can say: ZeRO stage, offload, and its integer batch keys
DS_FIELDS = {
    "micro_batch": "train_micro_batch_size_per_gpu",
    "grad_accum": "gradient_accumulation_steps",
}


def deepspeed_writer(r: Reading, old: Any, new: Any) -> list[Edit] | None:
    """Edits when a DeepSpeed JSON is checked alone: only what the JSON holds; any other change
    (the method, the sequence length, checkpointing…) lives in the training config, not here."""
    doc = r.docs[0]
    changed = {k for k, v in new.model_dump().items() if v != getattr(old, k)}
    if changed - {"zero", "offload", *DS_FIELDS}:
        return None
    edits = deepspeed_edits(doc, old, new) or []
    for fld, key in DS_FIELDS.items():
        if fld in changed:
            if not isinstance(doc.data.get(key), int):
                return None  # "auto" or absent: the Trainer's value, in a file not given
            edits.append(Edit(doc.path, key, getattr(new, fld)))
    return edits
