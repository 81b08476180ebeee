"""Memory rows → :class:`MemoryCase` s (or excluded ones, with the reason)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.units import MiB
from searcher.truth.cases import (
    MEMORY_CSV,
    METRICS,
    REQUIRED_MEMORY_COLUMNS,
    MemoryCase,
    Metric,
    OomCase,
    overrides,
    read_rows,
)
from searcher.truth.row_vocabulary import (
    attention_of,
    checkpointing_of,
    first_int,
    first_number,
    gpu_of,
    lora_of,
    method_of,
    metric_of,
    model_of,
    optimizer_of,
    recipe_of,
    sharding_of,
    unit_of,
)


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
        return map_memory_row(row, ov, assumptions)
    except FitplanError as err:
        return MemoryCase(row_id, source, excluded=str(err))
    except (KeyError, ValueError) as err:  # as a throughput row: a cell that is not a value
        return MemoryCase(row_id, source, excluded=f"missing or bad column: {err}")


def map_memory_row(row: dict[str, str], ov: dict[str, Any], assumptions: list[str]) -> MemoryCase:
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
        spec = _as_built(row, spec, assumptions)
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
    value = first_number(row["peak_memory"])
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


#: ``other_settings`` words saying the framework builds the output head as its own tensor even
#: where the checkpoint ties it to the embedding: litgpt (00af8b0d, 2024-09) has no weight tying
#: (model.py ``GPT.__init__``: ``lm_head = nn.Linear`` beside ``wte = nn.Embedding``) and its
#: converter copies the embedding into ``lm_head.weight`` (scripts/convert_hf_checkpoint.py)
_UNTIED = re.compile(r"\buntied (?:lm_head|output head|head)\b")


#: a weight_precision cell naming bitsandbytes' nested quantisation of the absmax
#: (``bnb_4bit_use_double_quant``, ``--use_nested_quant``) → ``nf4-dq``
_DOUBLE_QUANT = re.compile(r"double[ -]quant|nested quant|nf4-dq")


def _as_built(row: dict[str, str], spec: ModelSpec, assumptions: list[str]) -> ModelSpec:
    """The model as the row's framework materialises it (an untied head copy where it says so)."""
    if spec.tie_embeddings and _UNTIED.search(row.get("other_settings", "").lower()):
        assumptions.append(
            f"the framework holds the output head as a copy of the embedding, not tied: "
            f"+{spec.vocab * spec.hidden / 1e6:.0f} M parameters in the weights' dtype"
        )
        return dataclasses.replace(spec, tie_embeddings=False)
    return spec


#: training loops that run every micro-batch but the last under FSDP's ``no_sync``: litgpt
#: (litgpt/finetune/full.py at 00af8b0d: ``fabric.no_backward_sync(model,
#: enabled=is_accumulating)``, FSDP1 ``no_sync`` under Lightning's FSDPStrategy) and the HF
#: Trainer (trainer.py: accelerate ``no_sync`` unless sync_each_batch, DeepSpeed or the last
#: micro-batch), which the PEFT docs' FSDP runs used
_NO_SYNC_LOOPS = ("litgpt", "peft", "transformers")

#: the bitsandbytes release a source's QLoRA runs installed, where the source pins one: litgpt's
#: pyproject.toml has ``bitsandbytes==0.42.0`` from 929f9c79 (2024-03-15) to d2ed13c3
#: (2024-12-28, ">=0.44.0,<0.44.2"), which covers its README table's rows (2024-04-26 to
#: 2024-09-27, read at 00af8b0d)
_BITSANDBYTES_PINS = {"litgpt": "0.42.0"}


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
        double_quant = _DOUBLE_QUANT.search(row.get("weight_precision", "").lower())
        fields["quant"] = "nf4-dq" if framework == "torchtune" or double_quant else "nf4"
        if framework == "torchtune":
            assumptions.append(
                "torchao NF4 (torchtune): 64-element blocks with 8-bit scalers ≈ nf4-dq"
            )
        fields["kbit_saves_input"] = _old_bitsandbytes(row, assumptions)
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
    mb = first_int(row.get("micro_batch_size", ""))
    if mb:
        fields["micro_batch"] = mb
    seq = first_int(row.get("seq_len", ""))
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
    gpus = first_int(row.get("num_gpus", "1")) or 1
    fields.update(sharding_of(row.get("sharding_offload", ""), gpus))
    other = row.get("other_settings", "").lower()
    if "chunked" in other:
        fields["loss"] = "chunked"
    m = re.search(r"(?:ga|gradient_accumulation_steps)\s*=\s*(\d+)", other)
    if m:
        fields["grad_accum"] = int(m.group(1))
    if fields.get("optimizer_in_backward"):
        fields.pop("grad_accum", None)
    if (
        fields.get("grad_accum", 1) > 1
        and fields.get("zero", 0) >= 2
        and "fsdp" in row.get("sharding_offload", "").lower()
        and any(loop in row.get("source", "").lower() for loop in _NO_SYNC_LOOPS)
    ):
        fields["grad_sync"] = "last-micro-batch"
        assumptions.append(
            "gradients reduced on the last micro-batch only: the framework's loop runs the "
            "others under FSDP no_sync, which holds them unsharded"
        )
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
        base = map_memory_row(rows[row_id], mem_ov, [])
        assert base.spec is not None and base.config is not None and base.gpu is not None
        patch = ov["oom"]
        cfg = TrainConfig(**{**base.config.model_dump(), **patch["config"]})
        out.append(OomCase(row_id, base.spec, cfg, base.gpu, patch["what"]))
    return out


def _old_bitsandbytes(row: dict[str, str], assumptions: list[str]) -> bool:
    """Whether the row's source pins a bitsandbytes whose 4-bit matmul keeps its input."""
    from searcher.search.stack_profile import kbit_keeps_input

    source = row.get("source", "").lower()
    for name, version in _BITSANDBYTES_PINS.items():
        if name in source and kbit_keeps_input(version):
            assumptions.append(
                f"bitsandbytes {version} ({name}'s pin): each 4-bit linear keeps its input "
                "for the backward"
            )
            return True
    return False
