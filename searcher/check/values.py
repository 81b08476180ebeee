"""The numbers a training config gives, checked once before any reader takes them: a key that
means a count (micro-batch, accumulation, sequence length, LoRA rank, ...) must hold a whole
number in its range, a dropout a fraction; ``"auto"`` (DeepSpeed, HF) and an empty value stay
allowed. A wrong value is refused with ``file:line: key ...`` instead of being skipped (the
file's own default would then be modelled silently) or crashing a reader."""

from __future__ import annotations

import math
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from constraints.limits import Bound, excerpt
from searcher.check.doc import Document, flat_keys, get, key_line

#: key (the last part of its dotted path) → the range its whole number must lie in
COUNT_KEYS: dict[str, Bound] = {
    "micro_batch_size": L.MICRO_BATCH,
    "per_device_train_batch_size": L.MICRO_BATCH,
    "train_micro_batch_size_per_gpu": L.MICRO_BATCH,
    "batch_size": L.MICRO_BATCH,
    "train_batch_size": L.TARGET_BATCH,
    "gradient_accumulation_steps": L.GRAD_ACCUM,
    "sequence_len": L.SEQ_LEN,
    "max_seq_length": L.SEQ_LEN,
    "max_seq_len": L.SEQ_LEN,
    "cutoff_len": L.SEQ_LEN,
    "lora_r": L.LORA_RANK_FLAG,
    "lora_rank": L.LORA_RANK_FLAG,
    "lora_alpha": L.LORA_ALPHA,
    "num_processes": L.GPU_COUNT,
    "num_machines": L.GPU_COUNT,
    "quantization_bit": Bound(1, 16, "bits"),
    "zero_stage": Bound(0, 3, "(a DeepSpeed ZeRO stage)"),
}
#: keys holding a dropout probability
FRACTION_KEYS = ("lora_dropout",)
#: sections whose keys name other settings rather than set them: DeepSpeed's autotuning
#: ``arg_mappings`` maps config keys to the training script's flags
#: (deepspeed/autotuning/config.py), e.g. "train_micro_batch_size_per_gpu": "--per_device_…"
MAPPING_SECTIONS = ("autotuning.",)
#: values that defer to another file or the framework's default
DEFERRED = ("auto",)


def check_values(doc: Document) -> None:
    """Refuse the first count or fraction of ``doc`` that is not a valid number."""
    if not isinstance(doc.data, dict):
        return
    _no_mapping_counts(doc, doc.data, "")
    for dotted, value in flat_keys(doc.data).items():
        if dotted.startswith(MAPPING_SECTIONS):
            continue
        key = dotted.rsplit(".", 1)[-1]
        if key == "r" and dotted == "r" and "peft_type" in doc.data:
            key = "lora_r"  # a PEFT adapter_config.json names the rank r
        if dotted == "peft_config.r":
            key = "lora_r"  # LLaMA-Factory v1's peft_config holds PEFT's LoraConfig keys
        if dotted.endswith("zero_optimization.stage"):
            key = "zero_stage"
        if value is None or value in DEFERRED:
            continue
        if key in COUNT_KEYS:
            _whole(doc, dotted, value, key)
        elif key in FRACTION_KEYS:
            _fraction(doc, dotted, value)


def _no_mapping_counts(doc: Document, data: dict[str, Any], prefix: str) -> None:
    """A count or fraction key holding a mapping (flat_keys would descend into it unseen)."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if not isinstance(value, dict) or dotted.startswith(MAPPING_SECTIONS):
            continue
        if value and (key in COUNT_KEYS or key in FRACTION_KEYS):
            raise FitplanError(
                f"{_where(doc, dotted)}: {dotted} must be a number, got a mapping {excerpt(value)}"
            )
        _no_mapping_counts(doc, value, dotted + ".")


def _where(doc: Document, dotted: str) -> str:
    line = key_line(doc, dotted)
    return f"{doc.path}:{line}" if line else str(doc.path)


def _whole(doc: Document, dotted: str, value: Any, key: str) -> None:
    bound = COUNT_KEYS[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise FitplanError(
            f"{_where(doc, dotted)}: {dotted} must be a whole number ({bound.describe()}), "
            f"got {excerpt(value)}"
        )
    bound.check(dotted, value, _where(doc, dotted))


def _fraction(doc: Document, dotted: str, value: Any) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value < 1:
        raise FitplanError(
            f"{_where(doc, dotted)}: {dotted} must be a probability from 0 to below 1, "
            f"got {excerpt(value)}"
        )


def section(doc: Document, dotted: str) -> dict[str, Any]:
    """The mapping at ``dotted`` in ``doc`` (``{}`` when absent or empty); any other value is
    refused with ``file:line``, as the framework reading the file would refuse it."""
    value = get(doc.data, dotted)
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise FitplanError(
            f"{_where(doc, dotted)}: {dotted} must be a mapping of keys, got {excerpt(value)}"
        )
    return value


def name_list(doc: Document, dotted: str) -> list[str]:
    """The list of names at ``dotted`` (``[]`` when absent or empty): torchtune's
    ``lora_attn_modules`` and ``custom_sharded_layers``; any other value is refused with
    ``file:line``, as the recipe's ``set(...)``/builder would fail on it."""
    value = get(doc.data, dotted)
    if value is None or value == "" or value == []:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FitplanError(
            f"{_where(doc, dotted)}: {dotted} must be a list of module names, got {excerpt(value)}"
        )
    return value
