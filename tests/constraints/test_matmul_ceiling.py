"""Each GPU's measured matmul ceiling (MAMF share of peak) scales the GEMM efficiency."""

from __future__ import annotations

import csv

import pytest

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import gpu_catalog, resolve_gpu
from constraints.matmul_ceiling import _DATA, gemm_ceiling_scale, matmul_ceiling_share
from constraints.models import resolve_model
from constraints.throughput import throughput_arrays


def test_every_ceiling_row_names_a_catalog_gpu() -> None:
    with _DATA.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        assert row["gpu"] in gpu_catalog(), row["gpu"]
        assert row["source"].strip(), row["gpu"]
        assert 0.3 < float(row["mamf_tflops"]) / float(row["theory_tflops"]) < 1.0


def test_the_published_shares() -> None:
    """stas00/ml-engineering compute/accelerator/README.md @744d01e, MAMF table, BF16 rows:
    A100 SXM 271.2 of 312 (86.9 %), H100 SXM 794.5 of 989 (80.3 %), B200 1745.0 of 2250 (77.6 %)."""
    assert matmul_ceiling_share("a100-80gb") == pytest.approx(0.869, abs=5e-4)
    assert matmul_ceiling_share("h100-sxm") == pytest.approx(0.803, abs=5e-4)
    assert matmul_ceiling_share("b200") == pytest.approx(0.776, abs=5e-4)
    assert matmul_ceiling_share("rtx-4090") is None


def test_scale_is_the_share_over_the_a100s() -> None:
    """By hand: (794.5 / 989) / (271.2 / 312) = 0.8033 / 0.8692 = 0.9242."""
    assert gemm_ceiling_scale(resolve_gpu("a100-80gb")) == 1.0
    assert gemm_ceiling_scale(resolve_gpu("a100-40gb")) == 1.0
    assert gemm_ceiling_scale(resolve_gpu("h100-sxm")) == pytest.approx(0.9242, abs=1e-4)
    # not measured: ETA_GEMM as fitted
    assert gemm_ceiling_scale(resolve_gpu("rtx-4090")) == 1.0
    assert gemm_ceiling_scale(resolve_gpu("l40s")) == 1.0


def test_h100_gemm_time_grows_by_the_inverse_scale() -> None:
    """A compute-bound step's GEMM time on the H100 SXM is its time at ETA_GEMM divided by the
    scale: the same card under another id (not in the table) gives the unscaled time."""
    spec = resolve_model("llama-3.1-8b")
    batch = ConfigBatch.from_configs([TrainConfig(seq_len=4096, micro_batch=4, dp=8, zero=3)])
    h100 = resolve_gpu("h100-sxm")
    twin = h100.model_copy(update={"id": "h100-sxm-unmeasured"})
    measured = throughput_arrays(spec, batch, h100)["gemm_s"][0]
    unscaled = throughput_arrays(spec, batch, twin)["gemm_s"][0]
    assert measured / unscaled == pytest.approx(1.0 / 0.9242, rel=2e-3)
