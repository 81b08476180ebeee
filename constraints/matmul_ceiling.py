"""How close each GPU's dense GEMMs come to its datasheet peak: the measured matmul ceiling.

A datasheet peak is the tensor cores' rate at the boost clock; no GEMM reaches it, and the share a
GEMM does reach differs by part: under a full matmul load a 700 W H100 SXM cannot hold the clock
its 989 TFLOPS assume, and the larger the tensor cores' rate per byte of on-chip bandwidth, the
further the best tile schedule falls short. The maximum achievable matmul FLOPS (MAMF: the best
``torch.matmul`` over a brute-force scan of bf16 shapes, mean of 100 iterations after 50 warm-up;
stas00/ml-engineering, ``compute/accelerator/README.md``) measure that share per part:
``constraints/data/matmul_ceilings.csv``, one row per catalog GPU with the torch build it ran.

``ETA_GEMM`` (fitted) is a GEMM's share of the reference part's peak, the A100 SXM's: most of the
rows it was fitted to ran on A100s, and the A100 is the part whose MAMF share is highest of those
measured. Another measured GPU runs at ``ETA_GEMM`` × its MAMF share ÷ the A100's (H100 SXM
0.803 / 0.869 = 0.92); a GPU the table does not measure keeps ``ETA_GEMM`` as it is. The same
scale applies to fp8 GEMMs (their recipe share, constraints/fp8.py, stays relative to bf16).
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from constraints.gpus import GpuSpec

__all__ = ["REFERENCE_GPU", "gemm_ceiling_scale", "matmul_ceiling_share"]

_DATA = Path(__file__).with_name("data") / "matmul_ceilings.csv"

#: The part ``ETA_GEMM`` is a share of (the bulk of the fitted rows: llm-foundry's A100 tables).
REFERENCE_GPU = "a100-80gb"


@cache
def _ceilings() -> dict[str, float]:
    """MAMF / datasheet peak for every measured catalog GPU."""
    with _DATA.open(encoding="utf-8") as f:
        return {
            row["gpu"]: float(row["mamf_tflops"]) / float(row["theory_tflops"])
            for row in csv.DictReader(f)
        }


def matmul_ceiling_share(gpu_id: str) -> float | None:
    """The measured MAMF share of the datasheet bf16 peak; None where not measured."""
    return _ceilings().get(gpu_id)


def gemm_ceiling_scale(gpu: GpuSpec) -> float:
    """Multiplier on ``ETA_GEMM`` for ``gpu``: its MAMF share over the reference's (1 where the
    table has no measurement for it, custom cards included)."""
    share = matmul_ceiling_share(gpu.id)
    if share is None:
        return 1.0
    reference = matmul_ceiling_share(REFERENCE_GPU)
    assert reference is not None
    return share / reference
