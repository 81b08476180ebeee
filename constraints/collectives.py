"""Collectives from topology: how long an all-reduce, all-gather or reduce-scatter takes.

NCCL runs a collective over ranks that span several NVLink domains (a node of 8, or a GB200 NVL72
rack) hierarchically, or as as many rings as the domain has NICs: the ranks of one domain exchange
over NVLink (or PCIe), and the share that belongs to other domains crosses the network spread
over the domain's g NICs, one per GPU. For g ranks per domain and N domains, per-rank traffic
``volume`` × (n − 1)/n of a ring collective takes::

    t_intra = volume · (g − 1)/g / B_nvlink
    t_inter = volume · (N − 1)/N / (g · B_nic)     (each NIC carries 1/g of the domain's data)
    t       = max(t_intra, t_inter)                 (the two stages pipeline in NCCL)

Sources: NCCL's hierarchical / multi-ring algorithms (Jeaugey, "Massively scale your deep
learning training with NCCL 2.4", NVIDIA blog 2019: the ring's inter-node bandwidth is the sum
of the NICs); Sergeev & Del Balso (Horovod, 2018) hierarchical all-reduce. Before issue 12 the
inter-node term charged the whole volume to one NIC (g times too slow).
"""

from __future__ import annotations

import numpy as np

from constraints.gpus import GpuSpec
from constraints.throughput_constants import NCCL_EFFICIENCY, PCIE_EFFICIENCY

__all__ = ["collective_seconds", "intra_node_bandwidth", "nvlink_domain_size"]


def intra_node_bandwidth(gpu: GpuSpec) -> float:
    """Bytes/s a GPU moves to its NVLink domain's peers: NVLink where it has one, else PCIe."""
    intra = gpu.interconnect_gb_s if gpu.interconnect_gb_s > 0 else gpu.pcie_gb_s * PCIE_EFFICIENCY
    return intra * 1e9 * NCCL_EFFICIENCY


def nvlink_domain_size(gpu: GpuSpec, gpus_per_node: int, nvlink_domain: int | None = None) -> int:
    """GPUs that reach each other over NVLink: the pool's say, else the GPU row's (72 for GB200
    NVL72), else the node; never smaller than one node's GPUs when the GPU has NVLink."""
    if nvlink_domain:
        return max(int(nvlink_domain), 1)
    if gpu.nvlink_domain > gpus_per_node and gpu.interconnect_gb_s > 0:
        return gpu.nvlink_domain
    return max(gpus_per_node, 1)


def collective_seconds(
    volume: np.ndarray,
    ranks: np.ndarray,
    ranks_per_domain: np.ndarray,
    intra: float,
    inter: float,
) -> np.ndarray:
    """Seconds of a ring-style collective over ``ranks`` whose per-rank traffic is ``volume``
    × (n − 1)/n, ``ranks_per_domain`` of them in each NVLink domain (node or rack); ``intra`` the
    NVLink bus bandwidth and ``inter`` the network bandwidth per GPU (one NIC each), bytes/s."""
    g = np.maximum(np.minimum(ranks_per_domain, ranks), 1.0)
    domains = np.maximum(ranks / g, 1.0)
    t_intra = volume * (g - 1.0) / g / intra
    t_inter = volume * (domains - 1.0) / domains / (g * inter)
    return np.where(ranks > 1, np.maximum(t_intra, t_inter), 0.0)
