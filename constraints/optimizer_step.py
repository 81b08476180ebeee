"""The optimizer step's time: memory-bound over the states on the GPU; on the host's CPUs plus the
PCIe copies when offloaded; paged optimizer states migrating over PCIe (part of the step time
model, :mod:`constraints.throughput`)."""

from __future__ import annotations

import numpy as np

from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.gpus import GpuSpec
from constraints.throughput_constants import (
    CPU_ADAM_PARAMS_PER_S,
    CPU_THREAD_DRAM_GB_S,
    PCIE_EFFICIENCY,
)


def optimizer_step_seconds(
    batch: ConfigBatch,
    gpu: GpuSpec,
    mem: dict[str, np.ndarray],
    *,
    local_trainable: np.ndarray,
    gathered_weight_bytes: np.ndarray,
    backward_s: np.ndarray,
    gpus_per_node: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(optimizer step, parameter streaming) seconds per optimizer step; the streaming is the
    whole H2D copy time of offloaded parameters, which the caller hides with the all-gathers.

    ``local_trainable``: trainable parameters this rank steps; ``gathered_weight_bytes``: bytes of
    the weights one rank's all-gathers assemble (its tp/pp share); ``backward_s``: one micro-batch's backward."""
    local = local_trainable
    dp = batch.dp.astype(np.float64)
    accum = batch.grad_accum.astype(np.float64)
    # bytes the update reads and writes per parameter: weights (read + write), gradient, two
    # Adam states (read + write), the fp32 master (read + write)
    opt_bytes = local * (
        2.0 * np.where(batch.is_lora, batch.adapter_bytes, batch.weight_bytes)
        + batch.grad_bytes
        + 2.0 * batch.state_bytes * 2.0
        + 2.0 * batch.master_bytes
    )
    offload = batch.offload != CODE["offload"]["none"]
    offload_all = batch.offload == CODE["offload"]["all"]
    pcie = gpu.pcie_gb_s * 1e9 * PCIE_EFFICIENCY
    # DeepSpeedCPUAdam: the node's CPU Adam rate, shared by the ranks on that node
    ranks_on_node = np.minimum(batch.gpus, gpus_per_node).astype(np.float64)
    # FSDP's CPUOffloadPolicy steps a torch optimizer on each rank's CPU shard. torchrun starts
    # every rank with OMP_NUM_THREADS=1 (torch/distributed/run.py), so each rank's (fused)
    # AdamW is one thread streaming its states through DRAM: the ranks run side by side, each
    # at one core's memory bandwidth
    from constraints.backends import BACKEND_CODE

    torch_cpu_optimizer = (batch.backend == BACKEND_CODE["fsdp2"]) | (
        batch.backend == BACKEND_CODE["fsdp1"]
    )
    cpu_step = np.where(
        torch_cpu_optimizer,
        opt_bytes / (CPU_THREAD_DRAM_GB_S * 1e9),
        local * ranks_on_node / CPU_ADAM_PARAMS_PER_S,
    )
    # gradients down; the 16-bit weights back up where only the optimizer is offloaded (with the
    # parameters offloaded too, the next forward streams them up: the parameter stream)
    upload = np.where(offload_all, 0.0, 2.0)
    t_opt = np.where(
        offload,
        cpu_step + local * (batch.grad_bytes + upload) / pcie,
        opt_bytes / (gpu.bandwidth_gb_s * 1e9),
    )
    # offloaded parameters are copied up for each all-gather, forward and backward, on the
    # all-gather's stream just before the gather (FSDP2 FSDPParam: to(device,
    # non_blocking=True) from pinned memory): the caller hides copy + gather behind the compute
    stream = accum * 2.0 * gathered_weight_bytes / np.maximum(dp, 1) / pcie
    t_param_stream = np.where(offload_all, stream, 0.0)
    # paged optimizer states live in unified memory: what the card has no room for is paged out
    # to the host and back over PCIe at every step
    # (the paged states are inside mem["total"]: what exceeds the card is what pages)
    paged = mem["paged_optimizer"]
    t_paging = 2.0 * np.minimum(paged, np.maximum(mem["total"] - gpu.memory_bytes, 0.0)) / pcie
    # stepped inside backward, the page migrations overlap the backward compute
    t_paging = np.where(batch.opt_in_bwd, np.maximum(t_paging - backward_s, 0.0), t_paging)
    return t_opt + t_paging, t_param_stream
