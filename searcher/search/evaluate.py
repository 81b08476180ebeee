"""Evaluate candidate configurations: memory, feasibility, throughput, cost, fidelity — vectorised.

Objectives (all minimised for the Pareto front): throughput cost ($ per million tokens, or
seconds per million tokens when no price applies), peak memory per GPU, and −fidelity.

Fidelity ranks how close a configuration stays to full fine-tuning: full (3) > LoRA (2 + rank/1024)
> QLoRA (1 + rank/1024), so every LoRA rank beats every QLoRA rank and a higher rank beats a
lower one. Two small tie-breakers keep numerically safer variants visible on the front: +0.01
for an fp32 master copy, +0.005 for 32-bit optimizer states.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from constraints.config import CODE
from constraints.config_batch import ConfigBatch
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

    def objectives(self, by_price: bool | None = None) -> np.ndarray:
        """(n, 3) minimisation objectives at the resolution a person decides at: cost in steps of
        ``COST_RESOLUTION`` (relative), peak memory in steps of ``memory_step`` bytes, −fidelity.

        Cost is $ per million tokens when ``by_price`` (default: when any row has a price),
        else seconds per million tokens."""
        return objective_columns(
            self.throughput, self.needed, self.fidelity, self.memory_step, by_price
        )

    def speed(self) -> np.ndarray:
        """Tokens/s per row, 0 where it was not computed (a row that does not fit)."""
        return np.nan_to_num(self.throughput["tokens_per_s"], nan=0.0)

    def take(self, index: np.ndarray) -> Evaluation:
        """The rows ``index`` of this evaluation (a copy)."""
        return Evaluation(
            batch=self.batch.take(index),
            memory={k: v[index] for k, v in self.memory.items()},
            needed=self.needed[index],
            usable=self.usable,
            hardware=self.hardware[index],
            cpu_ok=self.cpu_ok[index],
            fits=self.fits[index],
            throughput={k: v[index] for k, v in self.throughput.items()},
            fidelity=self.fidelity[index],
        )

    @property
    def memory_step(self) -> float:
        return memory_step_bytes(self.usable)


def objective_columns(
    throughput: dict[str, np.ndarray],
    needed: np.ndarray,
    fidelity_: np.ndarray,
    memory_step: float,
    by_price: bool | None = None,
) -> np.ndarray:
    """The (n, 3) objectives of :meth:`Evaluation.objectives` from its columns (also used on
    bounds: each column is monotone in the quantity it quantises)."""
    cost = throughput["usd_per_mtok"]
    if by_price is None:
        by_price = not np.isnan(cost).all()
    if not by_price:
        cost = 1e6 / throughput["tokens_per_s"]  # seconds per million tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        cost_q = np.ceil(np.log(cost) / np.log1p(COST_RESOLUTION))
    cost_q = np.where(np.isnan(cost_q), 0.0, cost_q)  # a custom card: memory and fidelity only
    memory_q = np.ceil(needed / memory_step)
    return np.stack([cost_q, memory_q, -fidelity_], axis=1)


def memory_step_bytes(usable: float) -> float:
    """Bytes per step of the memory objective."""
    return max(MEMORY_RESOLUTION_BYTES, MEMORY_RESOLUTION_FRACTION * usable)


def usable_bytes(problem: SearchProblem) -> float:
    from constraints.breakdown import usable_bytes as usable

    return float(usable(problem.gpu, problem.headroom)[0])


def evaluate(
    problem: SearchProblem, batch: ConfigBatch, with_throughput: bool = True
) -> Evaluation:
    """Memory for all; throughput only where it fits (the expensive half is skipped for the rest)."""
    from constraints.breakdown import needed_bytes
    from constraints.cuda_context import context_bytes

    spec, gpu = problem.model, problem.gpu
    mem = memory_arrays(spec, batch, gpu)
    usable = usable_bytes(problem)
    needed = needed_bytes(mem["total"], mem["paged_optimizer"], usable, context=context_bytes(gpu))
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
            nvlink_domain=problem.nvlink_domain,
            memory=sub_mem,
        )
        for k in tput:
            tput[k][idx] = t[k]
    return Evaluation(batch, mem, needed, usable, hw, cpu_ok, fits, tput, fidelity(batch))


def concat(parts: list[Evaluation]) -> Evaluation:
    """One Evaluation from several (e.g. chunks or optuna generations)."""
    if len(parts) == 1:
        return parts[0]
    b0 = parts[0].batch
    cols = {
        f.name: np.concatenate([getattr(p.batch, f.name) for p in parts])
        for f in fields(b0)
        if f.name != "target_names"
    }
    batch = ConfigBatch(**cols, target_names=b0.target_names)
    return Evaluation(
        batch=batch,
        memory={k: np.concatenate([p.memory[k] for p in parts]) for k in parts[0].memory},
        needed=np.concatenate([p.needed for p in parts]),
        usable=parts[0].usable,
        hardware=np.concatenate([p.hardware for p in parts]),
        cpu_ok=np.concatenate([p.cpu_ok for p in parts]),
        fits=np.concatenate([p.fits for p in parts]),
        throughput={
            k: np.concatenate([p.throughput[k] for p in parts]) for k in parts[0].throughput
        },
        fidelity=np.concatenate([p.fidelity for p in parts]),
    )
