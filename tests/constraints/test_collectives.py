"""Collectives from topology: the inter-domain share of a ring collective spreads over the
domain's NICs; NVLink domains can span nodes (GB200 NVL72). Golden numbers are hand arithmetic of
the formula in constraints/collectives.py's docstring (NCCL rings, one per NIC)."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.collectives import collective_seconds, nvlink_domain_size
from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.speed import speed_of

GB = 1e9


@pytest.mark.parametrize(
    ("ranks", "per_domain", "expected_s"),
    [
        (8, 8, 1.0 * 7 / 8 / 100),  # one node: NVLink only
        (16, 8, 1.0 * 7 / 8 / 100),  # 2 nodes: intra 8.75 ms > inter 0.5/(8·10) = 6.25 ms
        (64, 8, 1.0 * 7 / 8 / (8 * 10)),  # 8 nodes: inter 10.9 ms over 8 NICs
        (64, 64, 1.0 * 63 / 64 / 100),  # one 64-GPU NVLink domain
    ],
)
def test_ring_collective_seconds(ranks: int, per_domain: int, expected_s: float) -> None:
    got = collective_seconds(
        np.array([1.0 * GB]),
        np.array([float(ranks)]),
        np.array([float(per_domain)]),
        100 * GB,
        10 * GB,
    )
    assert got[0] == pytest.approx(expected_s)


def test_nvlink_domain_from_gpu_row_or_pool() -> None:
    assert nvlink_domain_size(resolve_gpu("gb200"), 4) == 72
    assert nvlink_domain_size(resolve_gpu("h100-sxm"), 8) == 8
    assert nvlink_domain_size(resolve_gpu("h100-sxm"), 8, nvlink_domain=16) == 16


def test_nvl72_domain_speeds_up_fsdp_across_nodes() -> None:
    spec = catalog_model("llama-3.1-70b")
    cfg = TrainConfig(micro_batch=1, seq_len=4096, zero=3, dp=64, recipe="amp")
    gpu = resolve_gpu("gb200")
    rack = speed_of(spec, cfg, gpu, gpus_per_node=4)
    nodes = speed_of(spec, cfg, gpu, gpus_per_node=4, nvlink_domain=4, inter_node_gb_s=25.0)
    # in the rack the gathers hide behind compute; over 25 GB/s NICs they do not
    assert rack.parts["dp_comm_s"] == 0.0
    assert nodes.parts["dp_comm_s"] > 1.0
    assert rack.step_time_s < nodes.step_time_s / 2
