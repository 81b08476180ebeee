"""Predictions against measurements: the data layer of ``fitplan accuracy`` and of the calibration.

A measurement row (``constraints/data/calibration/measured_memory.csv`` or any CSV in its format,
documented in that folder's README) becomes a :class:`MemoryCase`: a :class:`ModelSpec`, a
:class:`TrainConfig`, a :class:`GpuSpec`, the metric the row reports (``allocated`` =
torch.cuda.max_memory_allocated / peak active, ``reserved`` = max_memory_reserved, ``nvml`` =
nvidia-smi used) and the measured bytes; or it is excluded with the reason. fitplan predicts the
same metric: peak allocated = total − overhead, peak reserved = total − CUDA context, NVML used =
the total (see :mod:`constraints.breakdown`).

The mapping reads the row's columns in the vocabulary the published rows use ("bf16 (no fp32
master)" + "torch AdamW" → ``bf16-torch``; "FSDP full shard" → ZeRO-3 over ``num_gpus``; "chunked
CE" → ``--loss chunked`` …). What a row cannot say in words lives in
``constraints/data/calibration/row_overrides.json`` (per row: a config patch, an assumption with its
reason, or an exclusion with its reason). Rows written by ``fitplan measure`` carry structured
``fitplan_*`` columns and need no parsing.

Throughput rows (``measured_throughput.csv``) become :class:`ThroughputCase` s the same way;
fitplan predicts tokens/s per GPU.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec, resolve_gpu
from constraints.models import DATA_DIR, ModelSpec, catalog_model, spec_from_hf_config
from constraints.units import GB, GiB, MiB

CALIBRATION_DIR = DATA_DIR / "calibration"
MEMORY_CSV = CALIBRATION_DIR / "measured_memory.csv"
THROUGHPUT_CSV = CALIBRATION_DIR / "measured_throughput.csv"

Metric = Literal["allocated", "reserved", "nvml"]
METRICS: tuple[Metric, ...] = ("allocated", "reserved", "nvml")

#: Columns of the memory CSV format (the published rows' columns, then fitplan's structured ones).
MEMORY_COLUMNS = (
    "id",
    "source",
    "source_location",
    "source_version_or_date",
    "model",
    "params_b",
    "method",
    "adapter_details",
    "weight_precision",
    "compute_precision",
    "optimizer",
    "micro_batch_size",
    "seq_len",
    "seq_len_note",
    "grad_checkpointing",
    "attention_impl",
    "num_gpus",
    "gpu_type",
    "sharding_offload",
    "other_settings",
    "peak_memory",
    "memory_unit",
    "memory_metric",
    "per_gpu_or_total",
    "throughput",
    "measured_or_estimated",
    "trust",
    "notes",
)
#: Optional structured columns (what ``fitplan measure --json`` writes): when present they are
#: used as they are instead of reading the free-text columns.
STRUCTURED_COLUMNS = (
    "fitplan_model",
    "fitplan_gpu",
    "fitplan_config",
    "fitplan_metric",
    "fitplan_step_time_s",
)
REQUIRED_MEMORY_COLUMNS = ("id", "model", "peak_memory", "memory_unit", "memory_metric")
REQUIRED_THROUGHPUT_COLUMNS = ("row_id", "model", "gpu", "gpu_count", "seq_len")


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryCase:
    """One memory row, mapped: what fitplan evaluates and what the row measured."""

    row_id: str
    source: str
    spec: ModelSpec | None = None
    config: TrainConfig | None = None
    gpu: GpuSpec | None = None
    metric: Metric = "allocated"
    measured_bytes: float = 0.0
    #: the row's own measurement of the CUDA context (NVML rows that state it), else None
    context_bytes: float | None = None
    #: gradients stay allocated between steps (torch < 2.0 zero_grad(set_to_none=False)): the
    #: reason, or '' for torch ≥ 2.0 behaviour (freed at zero_grad)
    grads_persist: str = ""
    assumptions: tuple[str, ...] = ()
    excluded: str | None = None


@dataclass(frozen=True)
class ThroughputCase:
    row_id: str
    source: str
    spec: ModelSpec | None = None
    config: TrainConfig | None = None
    gpu: GpuSpec | None = None
    gpus_per_node: int = 8
    inter_node_gb_s: float = 50.0
    measured_tokens_per_s_per_gpu: float = 0.0
    assumptions: tuple[str, ...] = ()
    excluded: str | None = None


@dataclass(frozen=True)
class OomCase:
    """A configuration a source reports as running out of memory: fitplan must say 'no fit'."""

    row_id: str
    spec: ModelSpec
    config: TrainConfig
    gpu: GpuSpec
    what: str


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------


def read_rows(path: str | Path, required: Sequence[str]) -> list[dict[str, str]]:
    """The rows of a CSV as dicts; every failure is one FitplanError line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FitplanError(f"no such file: {p}") from None
    except IsADirectoryError:
        raise FitplanError(f"{p} is a directory, not a CSV file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise FitplanError(f"cannot read {p}: {err.__class__.__name__}") from None
    try:
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or []
        rows = [dict(r) for r in reader]
    except csv.Error as err:
        raise FitplanError(f"{p} is not a readable CSV ({err})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise FitplanError(
            f"{p} lacks the column(s) {', '.join(missing)}",
            "see constraints/data/calibration/README.md for the CSV format",
        )
    return [{k: (v or "").strip() for k, v in r.items() if k is not None} for r in rows]


@cache
def overrides() -> dict[str, dict[str, Any]]:
    """Per-row decisions for the shipped rows (constraints/data/calibration/row_overrides.json)."""
    data: dict[str, dict[str, Any]] = json.loads(
        (CALIBRATION_DIR / "row_overrides.json").read_text(encoding="utf-8")
    )
    return {k: v for k, v in data.items() if not k.startswith("_")}


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


# --------------------------------------------------------------------------------------------
# Free-text columns → fitplan vocabulary
# --------------------------------------------------------------------------------------------


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
    if method != "full" and framework == "peft" and fields["recipe"] != "fp32":
        # PEFT keeps adapters in fp32 by default (autocast_adapter_dtype=True)
        fields["adapter_dtype"] = "fp32"
        notes.append("PEFT default: adapters in fp32 (autocast_adapter_dtype=True)")
    return fields, notes


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
    if "offload" in low and "activation" not in low:
        fields["offload"] = "all" if ("param" in low or "zero-3" in low) else "optimizer"
        fields.setdefault("zero", 3 if fields["offload"] == "all" else 2)
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


def _first_int(text: str) -> int | None:
    m = re.search(r"\d+", text.replace(",", ""))
    return int(m.group(0)) if m else None


def _number(text: str) -> float | None:
    m = re.search(r"[0-9]*\.?[0-9]+(?:e[+-]?\d+)?", text.replace(",", ""))
    return float(m.group(0)) if m else None


# --------------------------------------------------------------------------------------------
# Memory rows
# --------------------------------------------------------------------------------------------


def _framework(row: dict[str, str]) -> str:
    src = row.get("source", "").lower()
    for name in ("torchtune", "peft", "transformers", "ao", "deepspeed"):
        if name in src:
            return name
    return src


def memory_case(row: dict[str, str], extra: dict[str, Any] | None = None) -> MemoryCase:
    """Map one memory row to a :class:`MemoryCase` (or an excluded one, with its reason)."""
    row_id = row.get("id", "?")
    source = row.get("source", "")
    ov = dict(overrides().get(row_id, {}))
    if extra:
        ov.update(extra)
    assumptions: list[str] = list(ov.get("assumptions", []))
    if ov.get("exclude"):
        return MemoryCase(row_id, source, excluded=str(ov["exclude"]))
    trust = row.get("trust", "").lower()
    if trust in ("reject", "low"):
        reason = row.get("notes") or "no reason given"
        return MemoryCase(row_id, source, excluded=f"trust {trust}: {reason}")
    if not row.get("peak_memory"):
        return MemoryCase(row_id, source, excluded="no peak memory measured (e.g. a CPU run)")
    try:
        return _memory_case(row, ov, assumptions)
    except FitplanError as err:
        return MemoryCase(row_id, source, excluded=str(err))


def _memory_case(row: dict[str, str], ov: dict[str, Any], assumptions: list[str]) -> MemoryCase:
    row_id, source = row.get("id", "?"), row.get("source", "")
    structured = bool(row.get("fitplan_config"))
    spec = model_of(ov.get("model") or row.get("fitplan_model") or row["model"])
    gpu = gpu_of(ov.get("gpu") or row.get("fitplan_gpu") or row.get("gpu_type", ""))
    if structured:
        try:
            fields: dict[str, Any] = json.loads(row["fitplan_config"])
        except json.JSONDecodeError as err:
            raise FitplanError(f"row {row_id}: fitplan_config is not JSON ({err.msg})") from None
        if not isinstance(fields, dict):
            raise FitplanError(f"row {row_id}: fitplan_config must be a JSON object")
    else:
        fields = _fields_from_text(row, spec, gpu, assumptions)
    fields.update(ov.get("config", {}))
    config = TrainConfig(**fields)
    metric: Metric
    if ov.get("metric"):
        metric = ov["metric"]
    elif row.get("fitplan_metric"):
        if row["fitplan_metric"] not in METRICS:
            raise FitplanError(f"row {row_id}: fitplan_metric must be one of {METRICS}")
        metric = row["fitplan_metric"]
    else:
        metric, notes = metric_of(row.get("memory_metric", ""))
        assumptions += notes
    unit = float(ov["unit_bytes"]) if "unit_bytes" in ov else unit_of(row.get("memory_unit", ""))
    value = _number(row["peak_memory"])
    if value is None or value <= 0:
        raise FitplanError(f"row {row_id}: peak_memory '{row['peak_memory']}' is not a number")
    context = float(ov["context_mib"]) * MiB if "context_mib" in ov else None
    grads_persist = str(ov.get("grads_persist", ""))
    if grads_persist:
        assumptions.append(grads_persist)
    return MemoryCase(
        row_id,
        source,
        spec=spec,
        config=config,
        gpu=gpu,
        metric=metric,
        measured_bytes=value * unit,
        context_bytes=context,
        grads_persist=grads_persist,
        assumptions=tuple(dict.fromkeys(assumptions)),
    )


def _fields_from_text(
    row: dict[str, str], spec: ModelSpec, gpu: GpuSpec, assumptions: list[str]
) -> dict[str, Any]:
    framework = _framework(row)
    method = method_of(row.get("method", "full"))
    fields: dict[str, Any] = {"method": method}
    if method != "full":
        lora, notes = lora_of(row.get("adapter_details", ""), spec)
        fields.update(lora)
        assumptions += notes
    if method == "qlora":
        fields["quant"] = "nf4-dq" if framework == "torchtune" else "nf4"
        if framework == "torchtune":
            assumptions.append(
                "torchao NF4 (torchtune): 64-element blocks with 8-bit scalers ≈ nf4-dq"
            )
    rec, notes = recipe_of(
        row.get("weight_precision", ""),
        row.get("compute_precision", ""),
        row.get("optimizer", ""),
        method,
        framework,
    )
    fields.update(rec)
    assumptions += notes
    fields.update(optimizer_of(row.get("optimizer", "adamw")))
    mb = _first_int(row.get("micro_batch_size", ""))
    if mb:
        fields["micro_batch"] = mb
    seq = _first_int(row.get("seq_len", ""))
    if seq:
        fields["seq_len"] = seq
    note = row.get("seq_len_note", "").lower()
    if "padded to" in note or "longest" in note:
        assumptions.append(
            f"variable-length batches peak at their longest: the stated cap ({seq}) is used"
        )
    ckpt = checkpointing_of(row.get("grad_checkpointing", ""))
    if ckpt is not None:
        fields["checkpointing"] = ckpt
    fields["attention"] = attention_of(row.get("attention_impl", ""), gpu)
    gpus = _first_int(row.get("num_gpus", "1")) or 1
    fields.update(sharding_of(row.get("sharding_offload", ""), gpus))
    other = row.get("other_settings", "").lower()
    if "chunked" in other:
        fields["loss"] = "chunked"
    m = re.search(r"(?:ga|gradient_accumulation_steps)\s*=\s*(\d+)", other)
    if m:
        fields["grad_accum"] = int(m.group(1))
    if fields.get("optimizer_in_backward"):
        fields.pop("grad_accum", None)
    return fields


def load_memory_cases(paths: Iterable[str | Path] | None = None) -> list[MemoryCase]:
    cases: list[MemoryCase] = []
    for path in paths or [MEMORY_CSV]:
        for row in read_rows(path, REQUIRED_MEMORY_COLUMNS):
            cases.append(memory_case(row))
    return cases


def oom_cases() -> list[OomCase]:
    """Configurations the shipped sources report as out of memory (row_overrides 'oom')."""
    out = []
    rows = {r["id"]: r for r in read_rows(MEMORY_CSV, REQUIRED_MEMORY_COLUMNS)}
    for row_id, ov in overrides().items():
        if "oom" not in ov or row_id not in rows:
            continue
        mem_ov = {k: v for k, v in ov.items() if k != "exclude"}
        base = _memory_case(rows[row_id], mem_ov, [])
        assert base.spec is not None and base.config is not None and base.gpu is not None
        patch = ov["oom"]
        cfg = TrainConfig(**{**base.config.model_dump(), **patch["config"]})
        out.append(OomCase(row_id, base.spec, cfg, base.gpu, patch["what"]))
    return out


# --------------------------------------------------------------------------------------------
# Throughput rows
# --------------------------------------------------------------------------------------------


def _gpt_spec(row: dict[str, str]) -> ModelSpec:
    """A GPT-style decoder from a row's shape columns (MPT of llm-foundry, Megatron's GPT)."""
    h = int(row["d_model"])
    seq = int(row["seq_len"])
    spec = spec_from_hf_config(
        {
            "model_type": "gpt2",
            "n_embd": h,
            "n_head": int(row["n_heads"]),
            "n_layer": int(row["n_layers"]),
            "n_inner": int(row.get("ffn_dim") or 4 * h),
            "vocab_size": int(row["vocab_size"]),
            "n_positions": seq,
            "activation_function": "gelu",
            "resid_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "embd_pdrop": 0.0,
        },
        id=re.sub(r"\s+", "-", row["model"].lower()),
        name=row["model"],
        source=f"{row.get('source', '')}: shape columns of row {row.get('row_id', '?')}",
    )
    return spec


def throughput_case(row: dict[str, str]) -> ThroughputCase:
    row_id = f"tp-{row.get('row_id', '?')}"
    source = row.get("source", "")
    ov = dict(overrides().get(row_id, {}))
    assumptions: list[str] = list(ov.get("assumptions", []))
    if ov.get("exclude"):
        return ThroughputCase(row_id, source, excluded=str(ov["exclude"]))
    try:
        return _throughput_case(row, row_id, source, ov, assumptions)
    except FitplanError as err:
        return ThroughputCase(row_id, source, excluded=str(err))
    except (KeyError, ValueError) as err:
        return ThroughputCase(row_id, source, excluded=f"missing or bad column: {err}")


def _throughput_case(
    row: dict[str, str], row_id: str, source: str, ov: dict[str, Any], assumptions: list[str]
) -> ThroughputCase:
    if ov.get("from_memory_row"):
        return _throughput_from_memory_row(row, row_id, source, ov, assumptions)
    low_src = source.lower()
    if "llm-foundry" in low_src:
        spec = _gpt_spec(row)
        assumptions.append(
            "MPT as a GPT-2-shaped decoder (LayerNorm, GELU 4x, learned positions); MPT has no "
            "biases, which are under 0.01 % of the weights and left in"
        )
    elif ov.get("model"):
        spec = model_of(ov["model"])
    else:
        try:
            spec = model_of(row["model"])
        except FitplanError:
            spec = _gpt_spec(row)
    gpu = gpu_of(ov.get("gpu") or row["gpu"])
    gpus = int(row["gpu_count"])
    tp = int(row.get("tp") or 1)
    pp = int(row.get("pp") or 1)
    dp = int(row.get("dp") or gpus // (tp * pp))
    prec = row.get("precision", "").lower()
    fields: dict[str, Any] = {"seq_len": int(row["seq_len"]), "tp": tp, "pp": pp, "dp": dp}
    if "amp_fp8" in prec:
        fields.update(recipe="amp", compute_dtype="fp8")
    elif "amp" in prec:
        fields.update(recipe="amp")
    elif "pure" in prec:
        fields.update(recipe="bf16-master")
    elif "fp16" in prec:
        fields.update(recipe="bf16-master", compute_dtype="fp16")
    else:
        fields.update(recipe="bf16-torch")
    if row.get("micro_batch_seqs"):
        fields["micro_batch"] = int(row["micro_batch_seqs"])
    if row.get("grad_accum"):
        fields["grad_accum"] = int(row["grad_accum"])
    ckpt = checkpointing_of(row.get("activation_checkpointing", ""))
    if ckpt is not None:
        fields["checkpointing"] = ckpt
    sharding = row.get("sharding", "").upper()
    if sharding == "FULL_SHARD" and dp > 1:
        fields["zero"] = 3
    elif sharding == "SHARD_GRAD_OP" and dp > 1:
        fields["zero"] = 2
    fields["attention"] = "flash" if gpu.supports_flash_attention else "sdpa"
    fields.update(ov.get("config", {}))
    config = TrainConfig(**fields)
    measured = _measured_tokens_per_gpu(row, spec)
    inter = float(ov.get("inter_node_gb_s", 0.0))
    if not inter:
        caveats = row.get("caveats", "").lower()
        if "1600 gbps" in caveats and "a100" in row.get("gpu", "").lower():
            inter = 1600 / 8 / 8  # 1600 Gb/s RoCE per 8-GPU node → 25 GB/s per GPU
        else:
            inter = 50.0
            if gpus > 8:
                assumptions.append("inter-node bandwidth not stated: 400 Gb/s per GPU assumed")
    return ThroughputCase(
        row_id,
        source,
        spec=spec,
        config=config,
        gpu=gpu,
        inter_node_gb_s=inter,
        measured_tokens_per_s_per_gpu=measured,
        assumptions=tuple(dict.fromkeys(assumptions)),
    )


def _throughput_from_memory_row(
    row: dict[str, str], row_id: str, source: str, ov: dict[str, Any], assumptions: list[str]
) -> ThroughputCase:
    """A throughput row whose configuration the matching memory row spells out."""
    mem_id = str(ov["from_memory_row"])
    rows = {r["id"]: r for r in read_rows(MEMORY_CSV, REQUIRED_MEMORY_COLUMNS)}
    mem_ov = {k: v for k, v in overrides().get(mem_id, {}).items() if k != "exclude"}
    mem = _memory_case(rows[mem_id], mem_ov, list(mem_ov.get("assumptions", [])))
    assert mem.spec is not None and mem.gpu is not None
    return ThroughputCase(
        row_id,
        source,
        spec=mem.spec,
        config=mem.config,
        gpu=mem.gpu,
        measured_tokens_per_s_per_gpu=_measured_tokens_per_gpu(row, mem.spec),
        assumptions=tuple(dict.fromkeys([f"configuration of memory row {mem_id}", *assumptions])),
    )


def _measured_tokens_per_gpu(row: dict[str, str], spec: ModelSpec) -> float:
    if row.get("tokens_per_sec_per_gpu"):
        return float(row["tokens_per_sec_per_gpu"])
    if row.get("tokens_per_sec_total"):
        return float(row["tokens_per_sec_total"]) / int(row["gpu_count"])
    raise FitplanError("no measured tokens/s")


def load_throughput_cases(paths: Iterable[str | Path] | None = None) -> list[ThroughputCase]:
    cases: list[ThroughputCase] = []
    for path in paths or [THROUGHPUT_CSV]:
        for row in read_rows(path, REQUIRED_THROUGHPUT_COLUMNS):
            cases.append(throughput_case(row))
    return cases


# --------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryResult:
    case: MemoryCase
    predicted_bytes: float
    #: parts of the prediction: allocated, allocator slack, CUDA context (fitting uses them)
    allocated: float
    slack: float
    context: float
    phase: str
    fits_predicted: bool
    fits_predicted_no_headroom: bool

    @property
    def error(self) -> float:
        """Signed relative error, (predicted − measured) / measured."""
        return self.predicted_bytes / self.case.measured_bytes - 1.0


def predict_memory(case: MemoryCase) -> MemoryResult:
    from constraints.breakdown import breakdown_of, verdict_of

    assert case.spec is not None and case.config is not None and case.gpu is not None
    config = case.config
    if case.grads_persist and config.grad_accum == 1 and not config.optimizer_in_backward:
        # the memory model holds gradients through the forward when accumulating; with
        # set_to_none=False they are held the same way, so evaluate it as accumulating
        config = config.model_copy(update={"grad_accum": 2})
    b = breakdown_of(case.spec, [config], case.gpu)[0]
    context = float(case.context_bytes if case.context_bytes is not None else b.cuda_context)
    allocated = float(b.allocated)
    slack = float(b.allocator_slack)
    predicted = {
        "allocated": allocated,
        "reserved": allocated + slack,
        "nvml": allocated + slack + context,
    }[case.metric]
    return MemoryResult(
        case,
        predicted,
        allocated,
        slack,
        context,
        b.phase,
        verdict_of(b, case.gpu, 0.1).fits,
        verdict_of(b, case.gpu, 0.0).fits,
    )


@dataclass(frozen=True)
class ThroughputResult:
    case: ThroughputCase
    predicted_tokens_per_s_per_gpu: float

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_s_per_gpu / self.case.measured_tokens_per_s_per_gpu - 1.0


def predict_throughput(
    cases: Sequence[ThroughputCase], **constants: float
) -> list[ThroughputResult]:
    """Tokens/s per GPU of each case; ``constants`` override ETA_GEMM etc. (for the fit)."""
    import numpy as np

    from constraints.config import ConfigBatch
    from constraints.memory import memory_arrays
    from constraints.throughput import throughput_arrays

    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(cases):
        assert c.spec is not None and c.gpu is not None
        groups.setdefault((c.spec, c.gpu, c.gpus_per_node, c.inter_node_gb_s), []).append(i)
    out = np.zeros(len(cases))
    for (spec, gpu, per_node, inter), idx in groups.items():
        batch = ConfigBatch.from_configs([cases[i].config for i in idx])  # type: ignore[misc]
        mem = _memory_cached(spec, batch, gpu, tuple(idx), memory_arrays)
        t = throughput_arrays(
            spec,
            batch,
            gpu,
            gpus_per_node=per_node,
            inter_node_gb_s=inter,
            memory=mem,
            **constants,
        )
        out[idx] = t["tokens_per_s"] / batch.gpus
    return [ThroughputResult(c, float(v)) for c, v in zip(cases, out, strict=True)]


_MEM_CACHE: dict[tuple[Any, ...], Any] = {}


def _memory_cached(spec: ModelSpec, batch: Any, gpu: GpuSpec, key: tuple[int, ...], fn: Any) -> Any:
    k = (spec, gpu, key, tuple(batch.micro_batch), tuple(batch.seq_len), tuple(batch.checkpointing))
    if k not in _MEM_CACHE:
        _MEM_CACHE[k] = fn(spec, batch, gpu)
    return _MEM_CACHE[k]


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    used: int
    excluded: int
    median_abs_error: float
    worst_abs_error: float
    worst_row: str
    by_source: dict[str, tuple[int, float, float]] = field(default_factory=dict)


def summarize(errors: Sequence[tuple[str, str, float]], excluded: int) -> Summary:
    """(row id, source, signed error) → median and worst absolute error, per source too."""
    import numpy as np

    if not errors:
        return Summary(0, excluded, math.nan, math.nan, "")
    abs_err = np.abs([e for _, _, e in errors])
    worst = int(np.argmax(abs_err))
    by: dict[str, list[float]] = {}
    for _, src, e in errors:
        by.setdefault(src, []).append(abs(e))
    return Summary(
        used=len(errors),
        excluded=excluded,
        median_abs_error=float(np.median(abs_err)),
        worst_abs_error=float(abs_err[worst]),
        worst_row=errors[worst][0],
        by_source={
            s: (len(v), float(np.median(v)), float(np.max(v))) for s, v in sorted(by.items())
        },
    )


def memory_report(
    paths: Sequence[str | Path] | None = None,
) -> tuple[list[MemoryResult], list[MemoryCase], Summary]:
    cases = load_memory_cases(paths)
    results: list[MemoryResult] = []
    excluded = [c for c in cases if c.excluded is not None]
    for c in cases:
        if c.excluded is None:
            try:
                results.append(predict_memory(c))
            except FitplanError as err:  # e.g. LoRA targets that match no module
                excluded.append(MemoryCase(c.row_id, c.source, excluded=str(err)))
    summary = summarize([(r.case.row_id, r.case.source, r.error) for r in results], len(excluded))
    return results, excluded, summary


def throughput_report(
    paths: Sequence[str | Path] | None = None,
) -> tuple[list[ThroughputResult], list[ThroughputCase], Summary]:
    cases = load_throughput_cases(paths)
    used = [c for c in cases if c.excluded is None]
    excluded = [c for c in cases if c.excluded is not None]
    results = predict_throughput(used)
    summary = summarize([(r.case.row_id, r.case.source, r.error) for r in results], len(excluded))
    return results, excluded, summary


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _kind_of(path: str | Path) -> str:
    """'memory' or 'throughput', from the CSV header."""
    read_rows(path, ())  # one clear error for a missing or unreadable file
    with Path(path).open(encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    if "peak_memory" in header:
        return "memory"
    if "tokens_per_sec_per_gpu" in header or "tokens_per_sec_total" in header:
        return "throughput"
    raise FitplanError(
        f"{path} is neither a memory CSV (peak_memory column) nor a throughput CSV "
        "(tokens_per_sec_per_gpu column)",
        "see constraints/data/calibration/README.md for the formats",
    )


def accuracy_json(
    mem: tuple[list[MemoryResult], list[MemoryCase], Summary] | None,
    thr: tuple[list[ThroughputResult], list[ThroughputCase], Summary] | None,
    ooms: list[tuple[OomCase, bool]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if mem is not None:
        results, excluded, s = mem
        out["memory"] = {
            "summary": vars(s),
            "rows": [
                {
                    "id": r.case.row_id,
                    "source": r.case.source,
                    "metric": r.case.metric,
                    "measured_bytes": r.case.measured_bytes,
                    "predicted_bytes": r.predicted_bytes,
                    "error": r.error,
                    "phase": r.phase,
                    "fits_predicted": r.fits_predicted,
                    "fits_predicted_no_headroom": r.fits_predicted_no_headroom,
                    "assumptions": list(r.case.assumptions),
                }
                for r in results
            ],
            "excluded": [{"id": c.row_id, "reason": c.excluded} for c in excluded],
            "oom_checks": [
                {"id": o.row_id, "what": o.what, "fitplan_says_fits": fits} for o, fits in ooms
            ],
        }
    if thr is not None:
        results_t, excluded_t, st = thr
        out["throughput"] = {
            "summary": vars(st),
            "rows": [
                {
                    "id": r.case.row_id,
                    "source": r.case.source,
                    "measured_tokens_per_s_per_gpu": r.case.measured_tokens_per_s_per_gpu,
                    "predicted_tokens_per_s_per_gpu": r.predicted_tokens_per_s_per_gpu,
                    "error": r.error,
                    "assumptions": list(r.case.assumptions),
                }
                for r in results_t
            ],
            "excluded": [{"id": c.row_id, "reason": c.excluded} for c in excluded_t],
        }
    return out


def cmd_accuracy(args: Any) -> int:
    import sys

    from constraints.breakdown import explain

    files = list(args.csv or [])
    mem_paths = [f for f in files if _kind_of(f) == "memory"]
    thr_paths = [f for f in files if f not in mem_paths]
    if not files:
        mem_paths, thr_paths = [str(MEMORY_CSV)], [str(THROUGHPUT_CSV)]
    mem = memory_report(mem_paths) if mem_paths else None
    thr = throughput_report(thr_paths) if thr_paths else None
    ooms = (
        [(o, explain(o.spec, o.config, o.gpu).verdict.fits) for o in oom_cases()]
        if not files
        else []
    )
    if args.json:
        sys.stdout.write(json.dumps(accuracy_json(mem, thr, ooms), indent=2, default=str) + "\n")
        return 0
    lines: list[str] = []
    if mem is not None:
        results, excluded, s = mem
        lines.append(
            "Peak memory: predicted vs measured, on the metric each row reports "
            "(allocated = max_memory_allocated, reserved = max_memory_reserved, nvml = device used)"
        )
        lines.append(
            f"  {'row':16s} {'metric':9s} {'measured GiB':>12s} {'predicted GiB':>13s} "
            f"{'error':>7s}  fits at its GPU (10 % / 0 % headroom)"
        )
        for r in results:
            c = r.case
            verdict = f"{'yes' if r.fits_predicted else 'NO'} / {'yes' if r.fits_predicted_no_headroom else 'NO'}"
            lines.append(
                f"  {c.row_id:16s} {c.metric:9s} {c.measured_bytes / GiB:12.2f} "
                f"{r.predicted_bytes / GiB:13.2f} {r.error:+7.1%}  {verdict}"
            )
        lines.append(_summary_line("memory", s))
        for src, (n, med, worst) in s.by_source.items():
            lines.append(f"    {src}: {n} rows, median {med:.1%}, worst {worst:.1%}")
        ran = len(results)
        said_fit = sum(r.fits_predicted_no_headroom for r in results)
        lines.append(
            f"  fit verdicts: fitplan says {said_fit} of the {ran} measured runs fit their GPU "
            f"(0 % headroom); {sum(r.fits_predicted for r in results)} with the default 10 %"
        )
        for o, fits in ooms:
            lines.append(
                f"  out-of-memory check {o.row_id}: {o.what}: fitplan says "
                f"{'it fits (WRONG)' if fits else 'it does not fit (right)'}"
            )
        if args.excluded:
            lines += [f"  excluded {c.row_id}: {c.excluded}" for c in excluded]
    if thr is not None:
        results_t, excluded_t, st = thr
        lines.append("Throughput: tokens/s per GPU, predicted vs measured")
        shown = results_t if args.all else sorted(results_t, key=lambda r: -abs(r.error))[:10]
        if not args.all and len(results_t) > len(shown):
            lines.append(f"  the {len(shown)} largest errors (--all for every row):")
        for rt in shown:
            ct = rt.case
            assert ct.spec is not None and ct.gpu is not None and ct.config is not None
            lines.append(
                f"  {ct.row_id:8s} {ct.spec.name[:18]:18s} {ct.gpu.id:10s} x{ct.config.gpus:<5d} "
                f"{ct.measured_tokens_per_s_per_gpu:10.0f} "
                f"{rt.predicted_tokens_per_s_per_gpu:10.0f} {rt.error:+7.1%}"
            )
        lines.append(_summary_line("throughput", st))
        for src, (n, med, worst) in st.by_source.items():
            lines.append(f"    {src}: {n} rows, median {med:.1%}, worst {worst:.1%}")
        if args.excluded:
            lines += [f"  excluded {c.row_id}: {c.excluded}" for c in excluded_t]
    if not args.excluded:
        lines.append("(--excluded lists the rows left out and why)")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _summary_line(what: str, s: Summary) -> str:
    if not s.used:
        return f"  {what}: no usable rows ({s.excluded} excluded)"
    return (
        f"  {what}: {s.used} rows used, {s.excluded} excluded; median absolute error "
        f"{s.median_abs_error:.1%}, worst {s.worst_abs_error:.1%} ({s.worst_row})"
    )
