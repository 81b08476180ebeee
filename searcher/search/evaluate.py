"""Evaluate candidate configurations: memory, feasibility, throughput, cost, fidelity — vectorised.

Objectives (all minimised for the Pareto front): throughput cost ($ per million tokens, or
seconds per million tokens when no price applies), peak memory per GPU, and −fidelity.

Fidelity ranks how close a configuration stays to full fine-tuning: full (3) > LoRA (2 + rank/1024)
> QLoRA (1 + rank/1024), so every LoRA rank beats every QLoRA rank and a higher rank beats a
lower one. Two small tie-breakers keep numerically safer variants visible on the front: +0.01
for an fp32 master copy, +0.005 for 32-bit optimizer states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constraints.config import CODE, ConfigBatch
from constraints.hardware import hardware_mask
from constraints.memory import memory_arrays
from constraints.throughput import throughput_arrays
from searcher.search.space import SearchProblem

#: Objective resolution: costs within 2 % and peaks within max(0.25 GiB, 1 % of usable memory)
#: are the same to a person choosing a configuration (and well inside the model's error).
COST_RESOLUTION = 0.02
MEMORY_RESOLUTION_BYTES = 0.25 * 2**30
MEMORY_RESOLUTION_FRACTION = 0.01

_EIGHT_BIT = (CODE["optimizer"]["adamw-8bit"], CODE["optimizer"]["paged-adamw-8bit"])


def fidelity(batch: ConfigBatch) -> np.ndarray:
    m = batch.method
    tier = np.select([m == CODE["method"]["full"], m == CODE["method"]["lora"]], [3.0, 2.0], 1.0)
    rank_term = np.where(m == CODE["method"]["full"], 0.0, np.minimum(batch.rank, 1023) / 1024.0)
    master = np.where(batch.master_bytes > 0, 0.01, 0.0)
    states32 = np.where(np.isin(batch.optimizer, _EIGHT_BIT), 0.0, 0.005)
    return tier + rank_term + master + states32


@dataclass
class Evaluation:
    """Arrays over the evaluated configurations (``batch``)."""

    batch: ConfigBatch
    memory: dict[str, np.ndarray]
    needed: np.ndarray
    usable: float
    hardware: np.ndarray
    cpu_ok: np.ndarray
    fits: np.ndarray
    throughput: dict[str, np.ndarray]
    fidelity: np.ndarray

    @property
    def feasible(self) -> np.ndarray:
        return self.fits & (self.hardware == 0) & self.cpu_ok

    def objectives(self) -> np.ndarray:
        """(n, 3) minimisation objectives at the resolution a person decides at: cost in steps of
        ``COST_RESOLUTION`` (relative), peak memory in steps of ``memory_step`` bytes, −fidelity."""
        cost = self.throughput["usd_per_mtok"]
        if np.isnan(cost).all():
            cost = 1e6 / self.throughput["tokens_per_s"]  # seconds per million tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            cost_q = np.ceil(np.log(cost) / np.log1p(COST_RESOLUTION))
        cost_q = np.where(np.isnan(cost_q), 0.0, cost_q)  # a custom card: memory and fidelity only
        memory_q = np.ceil(self.needed / self.memory_step)
        return np.stack([cost_q, memory_q, -self.fidelity], axis=1)

    @property
    def memory_step(self) -> float:
        return max(MEMORY_RESOLUTION_BYTES, MEMORY_RESOLUTION_FRACTION * self.usable)


def usable_bytes(problem: SearchProblem) -> float:
    from constraints.breakdown import usable_bytes as usable

    return float(usable(problem.gpu, problem.headroom)[0])


def evaluate(
    problem: SearchProblem, batch: ConfigBatch, with_throughput: bool = True
) -> Evaluation:
    """Memory for all; throughput only where it fits (the expensive half is skipped for the rest)."""
    from constraints.breakdown import needed_bytes

    spec, gpu = problem.model, problem.gpu
    mem = memory_arrays(spec, batch, gpu)
    needed = needed_bytes(mem["total"])
    usable = usable_bytes(problem)
    hw = hardware_mask(spec, batch, gpu)
    ranks_per_node = np.minimum(batch.gpus, problem.gpus_per_node)
    cpu_ok = mem["cpu_bytes"] * ranks_per_node <= problem.cpu_ram_per_node
    fits = needed <= usable
    n = len(batch)
    tput = {
        k: np.full(n, np.nan)
        for k in ("step_time_s", "tokens_per_s", "mfu", "usd_per_mtok", "tokens_per_step")
    }
    ok = fits & (hw == 0) & cpu_ok
    if with_throughput and ok.any() and not gpu.custom:  # a custom card has no compute figures
        idx = np.flatnonzero(ok)
        sub = batch.take(idx)
        sub_mem = {k: v[idx] for k, v in mem.items()}
        t = throughput_arrays(
            spec,
            sub,
            gpu,
            gpus_per_node=problem.gpus_per_node,
            inter_node_gb_s=problem.inter_node_gb_s,
            memory=sub_mem,
        )
        for k in tput:
            tput[k][idx] = t[k]
    return Evaluation(batch, mem, needed, usable, hw, cpu_ok, fits, tput, fidelity(batch))
