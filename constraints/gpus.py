"""The GPU catalog (``data/gpus.csv``, one row per GPU with its source) and custom cards (``24GiB``).

Capacity is what the driver reports (nvidia-smi MiB, rocm-smi bytes), not the marketing number.
Peak TFLOPS are dense (sparse datasheet figures halved); GeForce bf16/fp16 use the fp32-accumulate
rate that training frameworks run at. ``usd_per_gpu_hour`` is a fitplan default, a round figure of
2025 public on-demand cloud prices; every command takes ``--price`` to override it.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from constraints.errors import FitplanError, unknown_name
from constraints.frozen import frozen
from constraints.record import Record, bounded
from constraints.units import looks_like_size, parse_size

DATA_DIR = Path(__file__).parent / "data"


@frozen(slots=True, kw_only=True)
class GpuSpec(Record):
    """One accelerator. Bandwidths in GB/s (1e9 bytes/s) per direction; compute in dense TFLOPS."""

    id: str
    name: str
    vendor: str = "custom"
    architecture: str = "custom"
    compute_capability: str = "9.0"
    memory_bytes: int = bounded(gt=0)
    memory_reported_as: str = ""
    bandwidth_gb_s: float = bounded(1000.0, gt=0)
    fp32_tflops: float = 0.0
    tf32_tflops: float = 0.0
    bf16_tflops: float = 0.0
    fp16_tflops: float = 0.0
    fp8_tflops: float = 0.0
    interconnect: str = "none"
    interconnect_gb_s: float = 0.0
    pcie: str = "PCIe 4.0 x16"
    pcie_gb_s: float = 32.0
    supports_bf16: bool = True
    supports_fp8: bool = False
    supports_flash_attention: bool = True
    usd_per_gpu_hour: float | None = None
    #: GPUs one NVLink domain joins when it spans more than a node (72 for GB200 NVL72); 0: the node
    nvlink_domain: int = bounded(0, ge=0)
    source: str = ""
    notes: str = ""
    custom: bool = False

    @property
    def sm(self) -> float | None:
        """NVIDIA compute capability as a number (8.0, 8.9, 9.0); None for AMD gfx targets."""
        try:
            return float(self.compute_capability)
        except ValueError:
            return None

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for a compute precision; 0.0 where the GPU has no tensor-core path for it."""
        return {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "bf16": self.bf16_tflops,
            "fp16": self.fp16_tflops,
            "fp8": self.fp8_tflops,
        }[precision]

    def with_price(self, usd_per_gpu_hour: float | None) -> GpuSpec:
        if usd_per_gpu_hour is None:
            return self
        if usd_per_gpu_hour < 0:
            raise FitplanError(f"--price {usd_per_gpu_hour} must not be negative")
        return self.model_copy(update={"usd_per_gpu_hour": usd_per_gpu_hour})


def _num(text: str) -> float:
    return float(text) if text.strip() else 0.0


@cache
def gpu_catalog() -> dict[str, GpuSpec]:
    rows = (DATA_DIR / "gpus.csv").read_text(encoding="utf-8")
    catalog: dict[str, GpuSpec] = {}
    for row in csv.DictReader(rows.splitlines()):
        catalog[row["id"]] = GpuSpec(
            id=row["id"],
            name=row["name"],
            vendor=row["vendor"],
            architecture=row["architecture"],
            compute_capability=row["compute_capability"],
            memory_bytes=int(row["memory_bytes"]),
            memory_reported_as=row["memory_reported_as"],
            bandwidth_gb_s=_num(row["bandwidth_gb_s"]),
            fp32_tflops=_num(row["fp32_tflops"]),
            tf32_tflops=_num(row["tf32_tflops"]),
            bf16_tflops=_num(row["bf16_tflops"]),
            fp16_tflops=_num(row["fp16_tflops"]),
            fp8_tflops=_num(row["fp8_tflops"]),
            interconnect=row["interconnect"],
            interconnect_gb_s=_num(row["interconnect_gb_s"]),
            pcie=row["pcie"],
            pcie_gb_s=_num(row["pcie_gb_s"]),
            supports_bf16=row["bf16"] == "yes",
            supports_fp8=row["fp8"] == "yes",
            supports_flash_attention=row["flash_attention"] == "yes",
            usd_per_gpu_hour=_num(row["usd_per_gpu_hour"]) or None,
            nvlink_domain=int(_num(row.get("nvlink_domain") or "")),
            source=row["source"],
            notes=row["notes"],
        )
    return catalog


@cache
def _gpu_aliases() -> dict[str, str]:
    rows = (DATA_DIR / "gpus.csv").read_text(encoding="utf-8")
    aliases: dict[str, str] = {}
    for row in csv.DictReader(rows.splitlines()):
        for name in [row["id"], row["name"], *row["aliases"].split(";")]:
            if name.strip():
                aliases[name.strip().lower()] = row["id"]
    return aliases


def custom_gpu(size_text: str) -> GpuSpec:
    """A card known only by its memory, e.g. ``24GiB``: no compute figures, so no throughput ranking.

    Compute capability is assumed 9.0 (bf16, fp8, flash available) so that only memory decides.
    """
    from constraints.limits import GPU_MEMORY, excerpt

    if len(size_text) > 40:
        raise FitplanError(f"--gpu {excerpt(size_text)} is not a GPU name or size")
    memory = parse_size(size_text)
    if not GPU_MEMORY.low <= memory <= GPU_MEMORY.high:
        raise FitplanError(
            f"--gpu {size_text.strip()}: no GPU has that much memory"
            if memory > GPU_MEMORY.high
            else f"--gpu {size_text.strip()}: too little memory for a training GPU",
            f"a card's memory is {GPU_MEMORY.unit}; {GPU_MEMORY.largest_real}",
        )
    return GpuSpec(
        id=f"custom-{size_text.strip()}",
        name=f"custom {size_text.strip()} card",
        memory_bytes=memory,
        memory_reported_as=size_text.strip(),
        supports_fp8=True,
        custom=True,
        notes="custom card: memory only; throughput and cost are not ranked",
    )


def resolve_gpu(name: str) -> GpuSpec:
    """A catalog id or alias (case-insensitive), or a size such as ``24GiB`` / ``16GB``."""
    from constraints.limits import excerpt

    key = name.strip().lower()
    if len(key) > 200:
        raise FitplanError(f"--gpu {excerpt(name)} is not a GPU name or size", "see `fitplan gpus`")
    if not key:
        raise FitplanError("--gpu is empty", "name a GPU such as rtx-4090 or a size such as 24GiB")
    aliases = _gpu_aliases()
    if key in aliases:
        return gpu_catalog()[aliases[key]]
    if looks_like_size(key):
        return custom_gpu(name)
    err = unknown_name("GPU", name, gpu_catalog().keys(), "fitplan gpus")
    raise FitplanError(err.message, f"{err.hint}, or give a card it lacks by memory: --gpu 16GiB")
