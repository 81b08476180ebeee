"""Free-text calibration columns → fitplan vocabulary.

The published rows say things in words ("bf16 (no fp32 master)" + "torch AdamW" → ``bf16-torch``;
"FSDP full shard" → ZeRO-3 over ``num_gpus``; "chunked CE" → ``--loss chunked`` …); each function
here reads one column and returns fitplan's fields, or raises a FitplanError saying what it cannot
read.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from constraints.errors import FitplanError
from constraints.gpus import GpuSpec, resolve_gpu
from constraints.models import ModelSpec, catalog_model, spec_from_hf_config
from constraints.units import GB, GiB, MiB
from searcher.truth.cases import CALIBRATION_DIR, Metric


@cache
def _extra_models() -> dict[str, ModelSpec]:
    entries = json.loads((CALIBRATION_DIR / "extra_models.json").read_text(encoding="utf-8"))
    out: dict[str, ModelSpec] = {}
    for e in entries:
        spec = spec_from_hf_config(
            e["config"],
            id=e["id"],
            name=e["name"],
            source=e.get("source", ""),
            published_total_params=e.get("published_total_params"),
            notes=e.get("notes", ""),
        )
        for key in [e["id"], e.get("hf_repo", ""), *e.get("aliases", [])]:
            if key:
                out[key.lower()] = spec
    return out


def _strip_paren(text: str) -> str:
    return re.sub(r"\([^)]*\)", "", text).strip()


def model_of(text: str) -> ModelSpec:
    """A row's model name: a catalog id/name/Hub repo, a calibration extra, or 'Llama 3.1 8B'."""
    from constraints.models import resolve_model

    raw = text.strip()
    candidates = [raw, _strip_paren(raw)]
    base = _strip_paren(raw)
    candidates.append(re.sub(r"\s+", "-", base.lower()))
    candidates.append(base.split("/")[-1])
    extras = _extra_models()
    for c in candidates:
        if not c:
            continue
        if c.lower() in extras:
            return extras[c.lower()]
        try:
            return catalog_model(c)
        except FitplanError:
            pass
    if raw.endswith(".json"):
        return resolve_model(raw)
    raise FitplanError(
        f"unknown model '{raw}'", "use a catalog id (fitplan models) or a config.json path"
    )


_GPU_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"rtx\s*4090|\b4090\b", "rtx-4090"),
    (r"rtx\s*3090|\b3090\b", "rtx-3090"),
    (r"rtx\s*5090|\b5090\b", "rtx-5090"),
    (r"a6000", "rtx-a6000"),
    (r"a100[^,;]*40\s*gb", "a100-40gb"),
    (r"a100", "a100-80gb"),
    (r"h100[^,;]*nvl", "h100-nvl"),
    (r"h100[^,;]*pcie", "h100-pcie"),
    (r"h100", "h100-sxm"),
    (r"h200", "h200"),
    (r"b200", "b200"),
    (r"mi300x", "mi300x"),
    (r"mi250", "mi250x"),
    (r"l40s", "l40s"),
    (r"v100[^,;]*32", "v100-32gb"),
    (r"v100", "v100-16gb"),
    (r"a10g", "a10g"),
    (r"\bl4\b", "l4"),
    (r"\bt4\b", "t4"),
)


def gpu_of(text: str) -> GpuSpec:
    """A row's GPU ('RTX 4090 24GB', 'A100 (80GB)', 'H100 80GB SXM' …) as a catalog GPU."""
    raw = text.strip()
    try:
        return resolve_gpu(raw)
    except FitplanError:
        pass
    low = raw.lower()
    for pattern, gpu_id in _GPU_PATTERNS:
        if re.search(pattern, low):
            return resolve_gpu(gpu_id)
    raise FitplanError(f"unknown GPU '{raw}'", "use a catalog id (fitplan gpus)")


_METHODS = {"full": "full", "lora": "lora", "qlora": "qlora"}


def method_of(text: str) -> str:
    """'full (pretraining)' → full, 'LoRA' → lora; anything else is a method fitplan does not model."""
    key = text.strip().lower().split("(")[0].strip()
    if key in _METHODS:
        return _METHODS[key]
    raise FitplanError(f"method '{text}' is not modelled by fitplan (full, LoRA, QLoRA)")


_SHORT_TARGETS = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "output_proj": "o_proj",
    "w1": "gate_proj",
    "w2": "down_proj",
    "w3": "up_proj",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
}
_MLP = ("gate_proj", "up_proj", "down_proj")


def lora_of(text: str, spec: ModelSpec) -> tuple[dict[str, Any], list[str]]:
    """rank / targets / dropout from 'r=8 alpha=16 on q_proj,v_proj' and its variants."""
    fields: dict[str, Any] = {}
    notes: list[str] = []
    m = re.search(r"\br\s*=\s*(\d+)", text)
    if m:
        fields["lora_rank"] = int(m.group(1))
    m = re.search(r"dropout\s*=?\s*([0-9.]+)", text)
    if m:
        fields["lora_dropout"] = float(m.group(1))
    low = text.lower()
    if "default" in low and "target" in low:
        fields["lora_targets"] = "default"
        return fields, notes
    part = low.split(" on ", 1)[1] if " on " in low else low.split(";")[-1]
    part = re.sub(r"\(.*?\)", "", part)
    names: list[str] = []
    if "output projection" in part:
        notes.append(
            "LoRA on the output head too: fitplan adapts the block linears only "
            "(the head adapter adds r·(h+V) parameters, under 0.01 % of the memory)"
        )
        part = part.replace("output projection", "")
    for token in re.split(r"[,+/\s]+|\band\b", part):
        token = token.strip()
        if not token or token in ("alpha", "r") or "=" in token:
            continue
        if token == "mlp":
            names += _MLP
        elif token in ("all", "all-linear", "all_linear"):
            fields["lora_targets"] = "all-linear"
            return fields, notes
        elif token in _SHORT_TARGETS and spec.family not in ("t5", "mt5", "bert"):
            names.append(_SHORT_TARGETS[token])
        elif re.fullmatch(r"[a-z_0-9]+", token) and not token.isdigit():
            names.append(token)
    names = list(dict.fromkeys(n for n in names if n not in ("on", "lora", "use_dora")))
    if names:
        fields["lora_targets"] = ",".join(names)
    return fields, notes


def recipe_of(
    weight: str, compute: str, optimizer_text: str, method: str, framework: str
) -> tuple[dict[str, Any], list[str]]:
    """Precision recipe and dtypes from the weight / compute precision columns."""
    w = weight.lower().replace("no fp32 master", "").strip()
    c = compute.lower().replace("use_amp false", "").replace("no mixed precision", "")
    notes: list[str] = []
    fields: dict[str, Any] = {}
    half_compute = "bf16" in c or "fp16" in c or "amp" in c
    if w.startswith(("bf16", "fp16", "nf4")) or (not w.startswith("fp32") and "bf16" in w):
        # a 16-bit model: plain torch AdamW keeps its states in the parameter dtype
        fields["recipe"] = (
            "bf16-master" if "fp32 states" in optimizer_text.lower() else "bf16-torch"
        )
    elif w.startswith("fp32") and half_compute:
        # fp32 weights (or an fp32 master) with 16-bit autocast: HF Trainer fp16/bf16=True
        fields["recipe"] = "amp"
    elif w.startswith("fp32"):
        fields["recipe"] = "fp32"
    else:
        raise FitplanError(f"precision '{weight}' / '{compute}' is not understood")
    if "fp16" in c:
        fields["compute_dtype"] = "fp16"
    if method != "full" and fields["recipe"] != "fp32":
        if framework in PEFT_FRAMEWORKS:
            # PEFT keeps adapters in fp32 by default (autocast_adapter_dtype=True)
            fields["adapter_dtype"] = "fp32"
            notes.append("PEFT default: adapters in fp32 (autocast_adapter_dtype=True)")
        else:
            fields["adapter_dtype"] = _base_dtype(method, fields)
            notes.append(
                f"adapters in the model's dtype ({fields['adapter_dtype']}): {framework} builds "
                "them like their base layer, without PEFT's fp32 autocast"
            )
    return fields, notes


#: the sources whose LoRA is PEFT's (torchtune, litgpt and torchao's runs build their own)
PEFT_FRAMEWORKS = ("peft", "transformers")


def _base_dtype(method: str, fields: dict[str, Any]) -> str:
    from constraints.config import TrainConfig

    quant = "nf4" if method == "qlora" else "none"
    return TrainConfig.model_validate(
        {"method": method, "quant": quant, **fields}
    ).base_adapter_dtype()


def optimizer_of(text: str) -> dict[str, Any]:
    low = text.lower()
    fields: dict[str, Any] = {}
    if "4bit" in low or "4-bit" in low:
        raise FitplanError(f"optimizer '{text}' (4-bit states) is not modelled by fitplan")
    if "paged" in low:
        # the paged state lives outside the PyTorch allocator whatever its width; fitplan's paged
        # optimizer is the 8-bit one, which gives the same device-side numbers
        fields["optimizer"] = "paged-adamw-8bit"
    elif "8bit" in low or "8-bit" in low:
        fields["optimizer"] = "adamw-8bit"
    elif "adafactor" in low:
        fields["optimizer"] = "adafactor"
    elif "lion" in low:
        fields["optimizer"] = "lion"
    elif "sgd" in low:
        fields["optimizer"] = "sgd-momentum" if "momentum" in low else "sgd"
    elif "adam" in low:
        fields["optimizer"] = "adamw"
    else:
        raise FitplanError(f"optimizer '{text}' is not understood")
    if "backward" in low or "in_bwd" in low or "in bwd" in low:
        fields["optimizer_in_backward"] = True
    return fields


def checkpointing_of(text: str) -> str | None:
    low = text.lower()
    if not low or "not stated" in low:
        return None
    if low.startswith("selective"):
        return "selective"
    if low.startswith(("on", "full", "yes", "true")):
        return "full"
    if low.startswith(("off", "none", "no", "false")):
        return "none"
    return None


def attention_of(text: str, gpu: GpuSpec) -> str:
    low = text.lower()
    if "eager" in low:
        return "eager"
    if "flash" in low or "sdpa" in low or not low:
        return "flash" if gpu.supports_flash_attention else "sdpa"
    return "flash"


def sharding_of(text: str, gpus: int) -> dict[str, Any]:
    low = text.lower()
    fields: dict[str, Any] = {"dp": max(gpus, 1)}
    if "zero-3" in low or "zero 3" in low or "full shard" in low or "full_shard" in low:
        fields["zero"] = 3 if gpus > 1 or "zero" in low else 0
        if "zero" in low:
            fields["zero"] = 3
    elif "grad_op" in low or "zero-2" in low or "zero 2" in low:
        fields["zero"] = 2
    elif "zero-1" in low:
        fields["zero"] = 1
    elif "fsdp" in low and gpus > 1:  # FSDP / FSDP2 default: full shard (reshard_after_forward)
        fields["zero"] = 3
    # "..., no CPU offload" names the setting it does not use
    offloads = "offload" in low and not re.search(r"\bno (cpu )?offload", low)
    if offloads and "activation" not in low:
        fields["offload"] = "all" if ("param" in low or "zero-3" in low) else "optimizer"
        fields.setdefault("zero", 3 if fields["offload"] == "all" else 2)
    # the framework that shards (constraints/data/backends.json): its buffers differ
    if "deepspeed" in low or "zero-" in low:
        fields["backend"] = "deepspeed"
    elif "fsdp" in low or "full shard" in low or "full_shard" in low:
        fields["backend"] = "fsdp2" if "fsdp1" not in low else "fsdp1"
    elif "megatron" in low:
        fields["backend"] = "megatron"
    return fields


def metric_of(text: str) -> tuple[Metric, list[str]]:
    low = text.lower()
    unspecified = [
        "the row does not say which memory statistic it reports: compared as peak allocated"
    ]
    if "does not say" in low or "not stated" in low:
        return "allocated", unspecified
    if "nvml" in low or "nvidia-smi" in low:
        return "nvml", []
    if "reserved" in low:
        return "reserved", []
    if "alloc" in low or "active" in low:
        return "allocated", []
    return "allocated", unspecified


def unit_of(text: str) -> float:
    """Bytes per unit from a memory_unit cell, honouring 'GB as labelled (… logged GiB)'."""
    low = text.lower()
    if low.startswith("gib") or "logged gib" in low or "logs gib" in low:
        return float(GiB)
    if low.startswith("mib"):
        return float(MiB)
    if low.startswith("gb"):
        return float(GB)
    if low.startswith("mb"):
        return 1e6
    raise FitplanError(f"memory unit '{text}' is not understood (GB, GiB, MiB)")


def first_int(text: str) -> int | None:
    m = re.search(r"\d+", text.replace(",", ""))
    return int(m.group(0)) if m else None


def first_number(text: str) -> float | None:
    m = re.search(r"[0-9]*\.?[0-9]+(?:e[+-]?\d+)?", text.replace(",", ""))
    return float(m.group(0)) if m else None
