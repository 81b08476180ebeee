"""LLaMA-Factory's v1 configs (``examples/v1/``, released in v0.9.5, 7af90952): one YAML with
``model``, ``peft_config`` / ``quant_config`` / ``dist_config`` plugin sections and the trainer's
own keys. Defaults from ``src/llamafactory/v1/config/training_args.py`` (``micro_batch_size`` 1,
``cutoff_len`` 2048, ``bf16`` True, ``enable_activation_checkpointing`` True) and
``v1/core/model_engine.py`` (the model is loaded with ``dtype="auto"``, the checkpoint's 16-bit
dtype, and cast to fp32 for full tuning; bf16 compute only through the FSDP2 plugin's
MixedPrecisionPolicy (plugins/trainer_plugins/distributed/fsdp2.py) or DeepSpeed — the trainer has
no autocast).
"""

from __future__ import annotations

from typing import Any

from searcher.check.common import ATTN_IMPL, lora_targets, precision_fields, read_deepspeed
from searcher.check.doc import Document, get
from searcher.check.reading import Reading
from searcher.check.values import section

#: keys only a v1 config has (v1/config/model_args.py, training_args.py)
V1_KEYS = ("peft_config", "dist_config", "quant_config", "kernel_config", "model_class")
#: v1 defaults (training_args.py)
V1_MICRO_BATCH = 1
V1_CUTOFF_LEN = 2048
#: PEFT LoraConfig.r default (the v1 lora plugin passes peft_config through)
PEFT_DEFAULT_RANK = 8


def is_llamafactory_v1(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and isinstance(data.get("model"), str)
        and any(k in data for k in V1_KEYS)
    )


def read_llamafactory_v1(doc: Document, load_ds: Any) -> Reading:
    d: dict[str, Any] = doc.data
    r = Reading("llamafactory-v1", [doc])
    r.model = d["model"]
    r.read(doc, "model", "model")
    r.fields["micro_batch"] = int(d.get("micro_batch_size") or V1_MICRO_BATCH)
    if "micro_batch_size" in d:
        r.read(doc, "micro_batch_size", "micro_batch")
    r.fields["seq_len"] = int(d.get("cutoff_len") or V1_CUTOFF_LEN)
    if "cutoff_len" in d:
        r.read(doc, "cutoff_len", "seq_len", "every sequence modelled at this length")
    if d.get("global_batch_size"):
        r.ignore(doc, "global_batch_size", "accumulation: changes steps, not memory per step")
    ckpt = d.get("enable_activation_checkpointing", True)
    r.fields["checkpointing"] = "full" if ckpt else "none"
    if "enable_activation_checkpointing" in d:
        r.read(doc, "enable_activation_checkpointing", "checkpointing")
    else:
        r.notes.append("LLaMA-Factory v1 checkpoints activations by default")
    peft = section(doc, "peft_config")
    name = str(peft.get("name", "")).lower()
    lora = name == "lora"
    if lora:
        r.fields["method"] = "lora"
        r.fields["lora_rank"] = int(peft.get("r", PEFT_DEFAULT_RANK))
        r.fields["lora_dropout"] = float(peft.get("lora_dropout") or 0.0)
        targets = peft.get("target_modules", "all")
        r.fields["lora_targets"] = "all-linear" if targets == "all" else lora_targets(targets)
        for key, fld in (
            ("name", "method"),
            ("r", "lora_rank"),
            ("lora_dropout", "lora_dropout"),
            ("target_modules", "lora_targets"),
        ):
            if key in peft:
                r.read(doc, f"peft_config.{key}", fld)
    elif peft:
        r.fields["method"] = "full"
        r.unmapped(
            doc, "peft_config.name", f"{name or 'this'} tuning is not modelled (full assumed)"
        )
    else:
        r.fields["method"] = "full"
    quant = section(doc, "quant_config")
    if quant:
        # v1 plugins/model_plugins/quantization.py: bnb, 4-bit when unset, double-quantised
        # unless double_quantization: false
        bits = quant.get("quantization_bit", 4)
        if str(quant.get("name", "bnb")).lower() in ("bnb", "auto") and bits in (4, 8):
            dq = quant.get("double_quantization", True)
            r.fields["quant"] = ("nf4-dq" if dq else "nf4") if bits == 4 else "int8"
            r.fields["method"] = "qlora"
            for key in ("quantization_bit", "name", "double_quantization"):
                if key in quant:
                    r.read(doc, f"quant_config.{key}", "quant")
        else:
            r.unmapped(doc, "quant_config", "this quantisation is not modelled")
    half = "bf16" if d.get("bf16", True) else None
    if "bf16" in d:
        r.read(doc, "bf16", "recipe")
    dist = section(doc, "dist_config")
    kind = str(dist.get("name", "")).lower()
    ds_prec = None
    if kind.startswith("fsdp"):
        r.fields["zero"] = 3
        r.read(doc, "dist_config.name", "zero", "FSDP2 full shard")
    elif kind == "deepspeed" and isinstance(dist.get("config_file"), str):
        ds_doc = load_ds(doc, dist["config_file"])
        if ds_doc is None:
            r.unmapped(doc, "dist_config.config_file", "cannot read it: pass it beside the config")
        else:
            r.docs.append(ds_doc)
            r.read(doc, "dist_config.config_file", "zero")
            ds_prec = read_deepspeed(r, ds_doc, half)
        r.read(doc, "dist_config.name", "zero")
    elif dist:
        r.unmapped(doc, "dist_config", f"distribution {kind or '?'} is not read")
    if get(d, "dist_config.cp_size") not in (None, 1):
        r.unmapped(doc, "dist_config.cp_size", "context parallelism is not modelled")
    if not lora and ds_prec is None and not kind.startswith("fsdp") and half:
        # full tuning casts the model to fp32 (model_engine.py) and only the FSDP2 plugin's
        # MixedPrecisionPolicy (or DeepSpeed) computes in bf16: v1's trainer has no autocast
        half = None
        r.notes.append("v1 full tuning without FSDP2/DeepSpeed runs in fp32 (no autocast)")
    weights = "fp32" if not lora else half or "fp32"
    r.fields.update(precision_fields(half, weights, ds_prec, lora))
    if lora and r.fields["recipe"] not in ("fp32", "amp"):
        r.fields["adapter_dtype"] = "fp32"  # PEFT's autocast_adapter_dtype default
    kernels = str(get(d, "kernel_config.name") or "").lower()
    if kernels and kernels != "none":
        r.unmapped(
            doc, "kernel_config", "v1 fused kernels (RMSNorm, RoPE, SwiGLU…) are not modelled"
        )
    if "batching_strategy" in d:
        r.read(doc, "batching_strategy", "seq_len", "every micro-batch modelled at cutoff_len")
    for key, why in (
        ("model_class", "the model class (llm, vlm…): the model named is what is counted"),
        ("sample_backend", "generation of evaluation samples, not the training step"),
        ("max_new_tokens", "generation of evaluation samples, not the training step"),
        ("template", "data and tokenization"),
    ):
        if key in d:
            r.ignore(doc, key, why)
    # v1 model_args.flash_attn: eager, sdpa (the default) or flash_attention_2
    impl = str(d.get("flash_attn", "sdpa")).lower()
    r.fields["attention"] = ATTN_IMPL.get(impl, "sdpa")
    if "flash_attn" in d:
        r.read(doc, "flash_attn", "attention")
    return r
