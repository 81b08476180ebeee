"""What a calibration row becomes: the CSV formats, the case types, reading the files.

A measurement row (``constraints/data/calibration/measured_memory.csv`` or any CSV in its format,
documented in that folder's README) becomes a :class:`MemoryCase`: a :class:`ModelSpec`, a
:class:`TrainConfig`, a :class:`GpuSpec`, the metric the row reports (``allocated`` =
torch.cuda.max_memory_allocated / peak active, ``reserved`` = max_memory_reserved, ``nvml`` =
nvidia-smi used) and the measured bytes; or it is excluded with the reason. fitplan predicts the
same metric: peak allocated = total − overhead, peak reserved = total − CUDA context, NVML used =
the total (see :mod:`constraints.breakdown`).

What a row cannot say in words lives in ``constraints/data/calibration/row_overrides.json`` (per
row: a config patch, an assumption with its reason, or an exclusion with its reason). Rows written
by ``fitplan measure`` carry structured ``fitplan_*`` columns and need no parsing.

Throughput rows (``measured_throughput.csv``) become :class:`ThroughputCase` s the same way;
fitplan predicts tokens/s per GPU. The mapping itself: :mod:`searcher.truth.memory_rows`,
:mod:`searcher.truth.throughput_rows`, in the vocabulary of :mod:`searcher.truth.row_vocabulary`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import DATA_DIR, ModelSpec

CALIBRATION_DIR = DATA_DIR / "calibration"
MEMORY_CSV = CALIBRATION_DIR / "measured_memory.csv"
THROUGHPUT_CSV = CALIBRATION_DIR / "measured_throughput.csv"
#: published peak-memory rows that nothing is fitted to (README.md there: "Held-out rows")
HELDOUT_MEMORY_CSV = CALIBRATION_DIR / "heldout_memory.csv"

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
#: throughput rows from this id on are held out of the fit (tools/calibrate.py): the public rows
#: issue 12 added (torchtitan docs/performance.md, torchao float8 benchmarks) measure accuracy on
#: runs the fitted constants never saw
FIRST_HELD_OUT_THROUGHPUT_ROW = 400


def held_out(row_id: str) -> bool:
    """Whether a throughput case ('tp-<row_id>') is held out of the fit."""
    digits = row_id.removeprefix("tp-")
    return digits.isdigit() and int(digits) >= FIRST_HELD_OUT_THROUGHPUT_ROW


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


@frozen
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


@frozen
class ThroughputCase:
    row_id: str
    source: str
    spec: ModelSpec | None = None
    config: TrainConfig | None = None
    gpu: GpuSpec | None = None
    gpus_per_node: int = 8
    inter_node_gb_s: float = 50.0
    #: GPUs per NVLink domain when it spans nodes (None: the GPU row's, else the node)
    nvlink_domain: int | None = None
    measured_tokens_per_s_per_gpu: float = 0.0
    assumptions: tuple[str, ...] = ()
    excluded: str | None = None


@frozen
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
    from constraints.limits import excerpt, read_text

    p = Path(path)
    text = read_text(p, "CSV")
    try:
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or []
        rows = [dict(r) for r in reader]
    except csv.Error as err:
        raise FitplanError(
            f"{p}:{reader.line_num}: not a readable CSV ({excerpt(str(err), 80)[1:-1]})"
        ) from None
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
