"""HF-Trainer based configs: axolotl YAML, LLaMA-Factory YAML, TrainingArguments (YAML/JSON, as
TRL and the alignment-handbook write them) + PEFT adapter_config.json + a DeepSpeed JSON.

Each format is a table of its key names (``NAMES``) over one reader and one writer, because the
three share the Trainer underneath. Defaults where a key is absent are each framework's own:
axolotl ``src/axolotl/utils/schemas/config.py``; LLaMA-Factory ``hparams/finetuning_args.py``
(``lora_rank`` 8, ``lora_target`` all) and ``hparams/model_args.py``
(``disable_gradient_checkpointing`` False: checkpointing is on by default,
``double_quantization`` True), ``model/adapter.py`` (trainable parameters cast to fp32 unless
``pure_bf16``); transformers ``TrainingArguments`` (``gradient_checkpointing`` False).
"""

from __future__ import annotations

from typing import Any

from searcher.check import axolotl, not_modelled
from searcher.check.common import (
    ATTN_IMPL,
    DTYPES,
    NAMES,
    _is_ds,
    lora_targets,
    precision_fields,
    read_deepspeed,
    trainer_optimizer,
)
from searcher.check.doc import Document, get
from searcher.check.grad_sync import read_sync_each_batch
from searcher.check.reading import Reading
from searcher.check.values import section

#: transformers TrainingArguments.per_device_train_batch_size default
TRAINER_DEFAULT_MICRO_BATCH = 8


def _half(value: Any, gpu_bf16: bool) -> bool | None:
    if value == "auto":
        return gpu_bf16
    return bool(value) if value is not None else None


def read_trainer(
    fmt: str, doc: Document, extra: list[Document], gpu_bf16: bool, load_ds: Any
) -> Reading:
    """One Trainer-family YAML/JSON (``doc``), plus the PEFT / DeepSpeed files given beside it."""
    n = NAMES[fmt]
    d: dict[str, Any] = doc.data or {}
    r = Reading(fmt, [doc, *extra])
    read_sync_each_batch(r, doc)
    # a DeepSpeed JSON checked on its own (or the one an accelerate config points at)
    ds_main = fmt == "hf-trainer" and _is_ds(d)
    for key in (n["model"], "model_name_or_path", "base_model"):
        if isinstance(d.get(key), str):
            r.model = d[key]
            r.read(doc, key, "model")
            break
    for key in (n["seq_len"], "max_seq_length", "max_length", "sequence_len", "cutoff_len"):
        if isinstance(d.get(key), int):
            r.fields["seq_len"] = d[key]
            r.read(
                doc,
                key,
                "seq_len",
                "every sequence modelled at this length (the longest a batch holds)",
            )
            break
    for key in (n["micro_batch"], "per_device_train_batch_size", "micro_batch_size"):
        if isinstance(d.get(key), int):
            r.fields["micro_batch"] = d[key]
            r.read(doc, key, "micro_batch")
            break
    else:
        trainer_args = (
            fmt in ("hf-trainer", "llamafactory") and not _is_ds(d) and "peft_type" not in d
        )
        if trainer_args:
            # TrainingArguments.per_device_train_batch_size defaults to 8 (transformers 4 and 5)
            r.fields["micro_batch"] = TRAINER_DEFAULT_MICRO_BATCH
            r.notes.append(
                f"no per_device_train_batch_size: the Trainer's default, {TRAINER_DEFAULT_MICRO_BATCH}"
            )
    if isinstance(d.get("gradient_accumulation_steps"), int):
        r.fields["grad_accum"] = d["gradient_accumulation_steps"]
        r.read(doc, "gradient_accumulation_steps", "grad_accum")
    elif fmt == "axolotl":
        axolotl.batch_size_key(r, doc, d)
    for key in (n["optimizer"], "optim", "optimizer"):
        if isinstance(d.get(key), str):
            trainer_optimizer(r, doc, key, d[key])
            break
    if r.fields.get("optimizer") == "sgd" and get(d, "optim_args.momentum"):
        r.fields["optimizer"] = "sgd-momentum"
        r.read(doc, "optim_args.momentum", "optimizer")
    # checkpointing
    if fmt == "llamafactory":
        off = bool(d.get("disable_gradient_checkpointing", False))
        r.fields["checkpointing"] = "none" if off else "full"
        if "disable_gradient_checkpointing" in d:
            r.read(doc, "disable_gradient_checkpointing", "checkpointing")
        else:
            r.notes.append(
                "LLaMA-Factory checkpoints activations unless disable_gradient_checkpointing: true"
            )
    elif "gradient_checkpointing" in d:
        gc = d["gradient_checkpointing"]
        r.fields["checkpointing"] = "full" if gc else "none"
        r.read(
            doc,
            "gradient_checkpointing",
            "checkpointing",
            "offload mode read as full checkpointing" if gc == "offload" else "",
        )
        if "gradient_checkpointing_kwargs" in d:
            r.ignore(doc, "gradient_checkpointing_kwargs", "reentrant or not: same saved tensors")
    # attention
    if fmt == "axolotl":
        axolotl.read_attention(r, doc, d)
    elif fmt == "llamafactory":
        fa = str(d.get("flash_attn", "auto")).lower()
        r.fields["attention"] = {"fa2": "flash", "sdpa": "sdpa", "disabled": "eager"}.get(
            fa, "sdpa"
        )
        if "flash_attn" in d:
            r.read(doc, "flash_attn", "attention")
    else:
        impl = d.get("attn_implementation")
        if d.get("use_flash_attention_2") is True:
            r.fields["attention"] = "flash"
            r.read(doc, "use_flash_attention_2", "attention")
        elif isinstance(impl, str) and impl in ATTN_IMPL:
            r.fields["attention"] = ATTN_IMPL[impl]
            r.read(doc, "attn_implementation", "attention")
        else:
            r.fields["attention"] = "sdpa"
    # the loss
    if (
        d.get("liger_fused_linear_cross_entropy") is True
        or d.get("cut_cross_entropy") is True
        or d.get("use_liger_kernel") is True
        or d.get("enable_liger_kernel") is True
    ):
        r.fields["loss"] = "fused"
    elif d.get("chunked_cross_entropy") is True:
        r.fields["loss"] = "chunked"
    for key in (
        "liger_fused_linear_cross_entropy",
        "cut_cross_entropy",
        "use_liger_kernel",
        "enable_liger_kernel",
        "chunked_cross_entropy",
        "plugins",
    ):
        if key in d:
            r.read(doc, key, "loss")
    # method, LoRA, quantisation
    peft = next(
        (x for x in [doc, *extra] if isinstance(x.data, dict) and "peft_type" in x.data), None
    )
    lora = False
    if fmt == "axolotl":
        adapter = d.get("adapter")
        lora = adapter in ("lora", "qlora")
        if "adapter" in d:
            r.read(doc, "adapter", "method")
    elif fmt == "llamafactory":
        ft = str(d.get("finetuning_type", "lora")).lower()
        lora = ft in ("lora", "oft")
        if ft == "oft":
            r.unmapped(
                doc,
                "finetuning_type",
                "OFT adapters are modelled as LoRA (a frozen base and small trainable adapters)",
            )
        elif ft == "freeze":
            r.unmapped(doc, "finetuning_type", "freeze tuning is not modelled (full assumed)")
        else:
            r.read(doc, "finetuning_type", "method")
        if "finetuning_type" not in d:
            r.notes.append("LLaMA-Factory's default finetuning_type is lora")
    else:
        lora = bool(d.get("use_peft")) or peft is not None
        if "use_peft" in d:
            r.read(doc, "use_peft", "method")
    quant = "none"
    if d.get("load_in_4bit") is True:
        if fmt == "axolotl" and d.get("adapter") != "qlora":
            # v0.18.0 loaders/model.py builds the 4-bit BitsAndBytesConfig only for adapter qlora
            r.unmapped(doc, "load_in_4bit", "axolotl quantises to 4 bits only with adapter: qlora")
        # axolotl's qlora BitsAndBytesConfig sets bnb_4bit_use_double_quant True (v0.18.0
        # loaders/model.py); TRL's ModelConfig use_bnb_nested_quant defaults to False
        nested = d.get("use_bnb_nested_quant", fmt == "axolotl" and d.get("adapter") == "qlora")
        dq = get(d, "bnb_config_kwargs.bnb_4bit_use_double_quant", nested)
        quant = "nf4-dq" if dq else "nf4"
        if (
            str(
                get(d, "bnb_config_kwargs.bnb_4bit_quant_type", d.get("bnb_4bit_quant_type", "nf4"))
            )
            == "fp4"
        ):
            r.notes.append("fp4 4-bit base modelled as NF4 (same storage)")
        for key in (
            "load_in_4bit",
            "bnb_config_kwargs",
            "use_bnb_nested_quant",
            "bnb_4bit_quant_type",
        ):
            if key in d:
                r.read(doc, key, "quant")
    elif d.get("load_in_8bit") is True:
        quant = "int8"
        r.read(doc, "load_in_8bit", "quant")
    elif "quantization_bit" in d and d["quantization_bit"] is not None:
        bits = int(d["quantization_bit"])
        if bits == 4:
            quant = "nf4-dq" if d.get("double_quantization", True) else "nf4"
        elif bits == 8:
            quant = "int8"
        else:
            r.unmapped(doc, "quantization_bit", f"{bits}-bit bases are not modelled")
        r.read(doc, "quantization_bit", "quant")
        if "double_quantization" in d:
            r.read(doc, "double_quantization", "quant")
        method = str(d.get("quantization_method", "bnb")).lower()
        if method != "bnb":
            r.unmapped(
                doc,
                "quantization_method",
                f"{method} quantisation stores differently from bitsandbytes: modelled as bnb",
            )
        elif "quantization_method" in d:
            r.read(doc, "quantization_method", "quant")
    for key in ("load_in_4bit", "load_in_8bit"):
        if key in d:
            r.read(doc, key, "quant")
    if quant != "none":
        lora = True

    if lora:
        r.fields["method"] = "qlora" if quant != "none" else "lora"
        r.fields["quant"] = quant
        rank = d.get(n["rank"], d.get("lora_r", d.get("lora_rank")))
        if peft is not None:
            rank = peft.data.get("r", rank)
            r.read(peft, "r", "lora_rank")
            if "lora_dropout" in peft.data:
                r.fields["lora_dropout"] = float(peft.data["lora_dropout"] or 0.0)
                r.read(peft, "lora_dropout", "lora_dropout")
            tm = lora_targets(peft.data.get("target_modules"))
            if tm:
                r.fields["lora_targets"] = tm
                r.read(peft, "target_modules", "lora_targets")
            if r.model is None and isinstance(peft.data.get("base_model_name_or_path"), str):
                r.model = peft.data["base_model_name_or_path"]
                r.read(peft, "base_model_name_or_path", "model")
            if peft.data.get("use_dora"):
                r.unmapped(peft, "use_dora", "DoRA is not modelled (LoRA assumed)")
        if rank is None and fmt == "llamafactory":
            rank = 8
        if rank is not None:
            r.fields["lora_rank"] = int(rank)
        for key in (n["rank"], "lora_r", "lora_rank"):
            if key in d:
                r.read(doc, key, "lora_rank")
        if "lora_dropout" in d:
            r.fields["lora_dropout"] = float(d["lora_dropout"] or 0.0)
            r.read(doc, "lora_dropout", "lora_dropout")
        if d.get("lora_target_linear") is True:
            r.fields["lora_targets"] = "all-linear"
            r.read(doc, "lora_target_linear", "lora_targets")
        elif n["targets"] in d:
            tm = lora_targets(d[n["targets"]])
            if tm:
                r.fields["lora_targets"] = tm
            r.read(doc, n["targets"], "lora_targets")
        elif fmt == "llamafactory":
            r.fields["lora_targets"] = "all-linear"
        if "peft_autocast_adapter_dtype" in d:
            r.read(doc, "peft_autocast_adapter_dtype", "adapter_dtype")
    else:
        r.fields["method"] = "full"
        for key in not_modelled.LORA_KEYS:
            if key in d:
                r.ignore(doc, key, "no adapter: the full model is trained")
    # precision
    if fmt == "axolotl":
        half = axolotl.half_dtype(r, doc, d, gpu_bf16)
    elif ds_main:
        # the JSON's own bf16 / fp16 sections decide (read_deepspeed); "auto" is the Trainer's
        # flag, unknown without its config: the GPU's 16-bit type is assumed
        auto = "auto" in (get(d, "bf16.enabled"), get(d, "fp16.enabled"))
        half = ("bf16" if gpu_bf16 else "fp16") if auto else None
        if auto:
            r.notes.append(
                f"bf16/fp16 enabled 'auto' take the Trainer's flag: {half} assumed (give the "
                "training config beside the JSON)"
            )
    else:
        bf = _half(d.get("bf16"), gpu_bf16)
        fp = (
            _half(d.get("fp16"), not gpu_bf16)
            if d.get("fp16") == "auto"
            else _half(d.get("fp16"), gpu_bf16)
        )
        if d.get("bf16") == "auto" and not gpu_bf16:
            bf, fp = False, True
        half = "bf16" if bf else "fp16" if fp else None
        if fmt == "llamafactory" and d.get("pure_bf16"):
            half = "bf16"  # parser.py: compute_dtype bf16 for pure_bf16, with or without bf16
        for key in ("bf16", "fp16"):
            if key in d:
                r.read(doc, key, "recipe")
    if "tf32" in d:
        r.ignore(doc, "tf32", "TF32 matmuls change speed, not memory")
    # the dtype the model is loaded in
    if fmt in ("axolotl", "llamafactory"):
        weights = half or "fp32"  # both load the model in the dtype they train
        # LLaMA-Factory model/adapter.py: every trainable parameter is cast to fp32 unless
        # pure_bf16 or BAdam (under ZeRO-3 DeepSpeed's own precision decides, read below)
        upcast = not d.get("pure_bf16") and not d.get("use_badam")
        if fmt == "llamafactory" and not lora and upcast:
            weights = "fp32"
        if fmt == "llamafactory" and "pure_bf16" in d:
            r.read(doc, "pure_bf16", "recipe", "bf16 weights, no fp32 upcast of trainable ones")
    else:
        td = d.get("torch_dtype", d.get("dtype"))
        weights = DTYPES.get(str(td).replace("torch.", ""), "fp32")
        if td in (None, "auto"):
            # transformers 5's from_pretrained defaults to dtype="auto": the checkpoint's dtype
            # (16-bit for the catalog's models); transformers 4 loaded fp32 by default
            weights = half or "fp32"
            if td is None and half and not ds_main:
                r.notes.append(
                    "no torch_dtype: transformers ≥ 5 loads the checkpoint's 16-bit dtype; with "
                    "transformers 4 (fp32 by default) add torch_dtype: float32 to model that"
                )
        for key in ("torch_dtype", "dtype"):
            if key in d:
                r.read(doc, key, "recipe", "the dtype the model is loaded in")
    ds_doc = doc if ds_main else None
    ds_doc = ds_doc or next((x for x in extra if isinstance(x.data, dict) and _is_ds(x.data)), None)
    if ds_doc is None and isinstance(d.get("deepspeed"), dict):
        # the DeepSpeed config inline (axolotl's schema takes str | dict; fitplan writes it so)
        ds_doc = Document(path=doc.path, text=doc.text, kind=doc.kind, data=d["deepspeed"])
        r.read(doc, "deepspeed", "zero", "the inline DeepSpeed config")
    if ds_doc is None and isinstance(d.get("deepspeed"), str):
        ds_doc = load_ds(doc, d["deepspeed"])
        if ds_doc is not None:
            r.docs.append(ds_doc)
            r.read(doc, "deepspeed", "zero")
        else:
            r.unmapped(doc, "deepspeed", f"cannot read {d['deepspeed']}: pass it beside the config")
    ds_prec = None
    if ds_doc is not None and isinstance(d.get("deepspeed"), str):
        r.read(doc, "deepspeed", "zero", "the DeepSpeed JSON")
    if ds_doc is not None:
        ds_prec = read_deepspeed(r, ds_doc, half)
        r.fields.setdefault("offload", "none")
    elif fmt == "axolotl" and section(doc, "fsdp_config"):
        fc = section(doc, "fsdp_config")
        r.fields["zero"] = axolotl.fsdp_shard(fc, d.get("fsdp"))
        r.fields["offload"] = (
            "all" if fc.get("offload_params", fc.get("fsdp_offload_params")) else "none"
        )
        if fc.get("activation_checkpointing", fc.get("fsdp_activation_checkpointing")):
            r.fields["checkpointing"] = "full"
        r.read(doc, "fsdp_config", "zero")
        for key in ("fsdp_version", "fsdp"):
            if key in d:
                r.read(doc, key, "zero")
    elif fmt in ("hf-trainer", "llamafactory") and d.get("fsdp"):
        spec = str(d["fsdp"])
        r.fields["zero"] = 2 if "shard_grad_op" in spec else 3
        r.fields["offload"] = "all" if "offload" in spec else "none"
        r.read(doc, "fsdp", "zero")
    r.fields.update(precision_fields(half, weights, ds_prec, lora))
    if (
        r.fields["recipe"] in ("bf16-pure", "bf16-torch")
        and r.fields.get("zero", 0) == 0
        and ds_prec
    ):
        r.notes.append("DeepSpeed drops the fp32 master only under ZeRO 1-3")
    if lora:
        if fmt == "llamafactory" and not d.get("pure_bf16"):
            r.fields["adapter_dtype"] = "fp32"
        elif d.get("peft_autocast_adapter_dtype") is False:
            r.fields["adapter_dtype"] = _base_adapter_dtype(r.fields)
        else:
            r.fields["adapter_dtype"] = "fp32"
        if r.fields.get("adapter_dtype") == "fp32" and r.fields["recipe"] in ("fp32", "amp"):
            r.fields.pop("adapter_dtype")
    not_modelled.mark(r, doc, d, not_modelled.TRAINER)
    if fmt == "axolotl":
        not_modelled.mark(r, doc, d, not_modelled.AXOLOTL)
    elif fmt == "llamafactory":
        not_modelled.mark(r, doc, d, not_modelled.LLAMAFACTORY)
    not_modelled.mark_stage(r, doc, d, fmt)
    if fmt == "axolotl" and "sample_packing" in d and not d["sample_packing"]:
        r.notes.append(
            "sample_packing is off: batches are shorter than sequence_len; fitplan models the longest"
        )
    from searcher.check.trainer_write import trainer_writer

    r.writer = trainer_writer(fmt)
    if ds_main:
        from searcher.check.trainer_write import deepspeed_writer

        r.writer = deepspeed_writer
    return r


def _base_adapter_dtype(fields: dict[str, Any]) -> str:
    """The dtype of adapters built like their base layer (PEFT without its fp32 autocast)."""
    from constraints.config import TrainConfig

    keys = ("method", "recipe", "quant", "weight_dtype", "compute_dtype")
    return TrainConfig.model_validate(
        {k: fields[k] for k in keys if fields.get(k) is not None}
    ).base_adapter_dtype()
