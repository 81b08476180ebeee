"""Exhaustive search in bounded memory: stream the grid in chunks, prune exactly, keep little.

Two passes over the grid (:class:`searcher.search.factors.Factors`), ``chunk`` configurations at
a time, each chunk evaluated and handed to the sinks (:mod:`searcher.search.sinks`), which keep
only what their answer needs — so memory is bounded by the chunk, not the space.

1. **Corners, exactly.** Every row with micro-batch 1, every row without accumulation, every row
   of a group that has no micro-batch-1 row (a pinned micro-batch).
2. **The rest, bounded first.** A row that differs from its group's corner only in a larger
   micro-batch (still accumulating) is bounded by the corner's evaluation: its memory needs at
   least the corner's (activations, logits and the allocator's share grow with the micro-batch;
   nothing shrinks while accumulation stays on), and its throughput is at most what the
   throughput model gives it with the corner's memory figures (a model that reads more bytes of
   activations or has less room left never runs faster). The sinks then skip the rows they can
   do without — those that cannot fit, those strictly dominated by a front member already
   found — and only the others are evaluated.

Both contracts are about the physics as a whole, not a list of knobs: whatever static knobs the
space grows (a backend, a kernel recipe), a group is every knob but the micro-batch. The
exactness test (tests/search/test_pruning.py) compares the pruned answers with the unpruned ones
on a few hundred random problems, and checks each bound against the exact value.

Pruning is asked for (``prune=True``), not the default of a search (``ExhaustiveStrategy``) or
of the fleet: a bound runs the throughput model on the row it bounds, so a kept row pays for
it twice, and on the benchmarks' grids pruning (11–24 % of the rows) lost 1.7–1.9× in CPU time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from constraints.hardware import hardware_mask
from constraints.throughput import throughput_arrays
from searcher.search.evaluate import (
    Evaluation,
    evaluate,
    fidelity,
    memory_step_bytes,
    usable_bytes,
)
from searcher.search.factors import Factors
from searcher.search.pareto import distinct
from searcher.search.sinks import Bounds, bound_objectives
from searcher.search.space import SearchProblem

#: configurations per chunk: about 60 MB of columns and results at a time
DEFAULT_CHUNK = 1 << 16


class Sink(Protocol):
    def add(self, ev: Evaluation, keys: np.ndarray) -> None: ...

    def prunable(self, b: Bounds) -> np.ndarray: ...


@dataclass
class StreamCount:
    """How many configurations the space has, and how many were evaluated (the rest pruned)."""

    space: int
    evaluated: int

    @property
    def pruned(self) -> int:
        return self.space - self.evaluated


class _Recorder(dict[str, Any]):
    """A memory dict that remembers which entries the throughput model reads."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)


def _throughput(problem: SearchProblem, batch: Any, memory: dict[str, np.ndarray]) -> dict:
    return throughput_arrays(
        problem.model,
        batch,
        problem.gpu,
        gpus_per_node=problem.gpus_per_node,
        inter_node_gb_s=problem.inter_node_gb_s,
        memory=memory,
    )


def memory_reads(problem: SearchProblem, ev: Evaluation) -> tuple[str, ...]:
    """The memory figures the throughput model reads (found by running it on one row)."""
    one = ev.take(np.array([0]))
    rec = _Recorder(one.memory)
    _throughput(problem, one.batch, rec)
    return tuple(sorted(rec.read))


def stream_search(
    problem: SearchProblem,
    sinks: Sequence[Sink],
    *,
    chunk: int = DEFAULT_CHUNK,
    prune: bool = True,
    progress: Any = None,
    factors: Factors | None = None,
) -> StreamCount:
    """Feed every configuration of the problem's grid to ``sinks`` (pruned ones excepted)."""
    factors = factors or Factors(problem)
    total = factors.size
    ra = factors.row_arr
    rows = np.arange(factors.n_rows)
    is_corner = factors.corner == rows
    exact_rows = is_corner | (ra["grad_accum"] == 1) if prune else np.ones(rows.size, bool)
    done = evaluated = 0
    rec_keys: list[np.ndarray] = []
    rec: dict[str, list[np.ndarray]] = {}
    reads: tuple[str, ...] | None = None
    for s, r in factors.pairs(rows[exact_rows], chunk):
        ev = evaluate(problem, factors.batch(s, r))
        keys = factors.key(s, r)
        for sink in sinks:
            sink.add(ev, keys)
        if prune and not exact_rows.all():
            if reads is None:
                reads = memory_reads(problem, ev)
            c = np.flatnonzero(is_corner[r])
            rec_keys.append(keys[c])
            for k, v in (("needed", ev.needed), ("hardware", ev.hardware)):
                rec.setdefault(k, []).append(v[c])
            for k in reads:
                rec.setdefault("m:" + k, []).append(ev.memory[k][c])
        done += s.size
        evaluated += s.size
        if progress:
            progress(done, total)
    if not rec_keys:  # no pruning asked, or nothing left to bound
        return StreamCount(total, evaluated)
    corner_keys = np.concatenate(rec_keys)
    bound = {k: np.concatenate(v) for k, v in rec.items()}
    usable = usable_bytes(problem)
    by_price = bool(problem.gpu.usd_per_gpu_hour)
    # larger micro-batches one level at a time, each bounded by its group's largest evaluated
    # smaller one (the corner, or a row of an earlier level that was not pruned)
    interior = rows[~exact_rows]
    for level in distinct(ra["micro_batch"][interior]):
        level_rows = interior[ra["micro_batch"][interior] == level]
        for s, r in factors.pairs(level_rows, chunk):
            batch = factors.batch(s, r)
            keys = factors.key(s, r)
            pos = np.searchsorted(corner_keys, factors.key(s, factors.corner[r]))
            keep = _unpruned(problem, sinks, batch, keys, bound, pos, usable, by_price)
            if keep.size:
                ev = evaluate(problem, batch.take(keep))
                for sink in sinks:
                    sink.add(ev, keys[keep])
                at = pos[keep]
                bound["needed"][at] = ev.needed
                bound["hardware"][at] = ev.hardware
                for k in reads or ():
                    bound["m:" + k][at] = ev.memory[k]
            done += s.size
            evaluated += int(keep.size)
            if progress:
                progress(done, total)
    return StreamCount(total, evaluated)


def _unpruned(
    problem: SearchProblem,
    sinks: Sequence[Sink],
    batch: Any,
    keys: np.ndarray,
    bound: dict[str, np.ndarray],
    pos: np.ndarray,
    usable: float,
    by_price: bool,
) -> np.ndarray:
    """Indices of the rows some sink needs evaluated, given the bounding rows at ``pos``.

    First without throughput: rows every sink drops even at the best cost and speed are
    skipped (they cannot fit, say); the throughput bound is run only on the others."""
    n = len(batch)
    needed_lb = bound["needed"][pos]
    fid = fidelity(batch)
    hw = hardware_mask(problem.model, batch, problem.gpu)

    def bounds(cost: np.ndarray, speed: np.ndarray, idx: np.ndarray) -> Bounds:
        obj = np.stack([cost, np.ceil(needed_lb[idx] / memory_step_bytes(usable)), -fid[idx]], 1)
        return Bounds(
            keys=keys[idx],
            method=batch.method[idx],
            gpus=batch.gpus[idx],
            fidelity=fid[idx],
            needed_lb=needed_lb[idx],
            objectives_lb=obj,
            speed_ub=speed,
            hardware=hw[idx],
            corner_hardware=bound["hardware"][pos][idx],
        )

    def agreed(b: Bounds) -> np.ndarray:
        out = np.ones(len(b.keys), dtype=bool)
        for sink in sinks:
            out &= sink.prunable(b)
            if not out.any():  # some sink needs every row: the others need not be asked
                break
        return out

    every = np.arange(n)
    best_case = agreed(bounds(np.full(n, -np.inf), np.full(n, np.inf), every))
    middle = np.flatnonzero(~best_case)
    skip = best_case.copy()
    if middle.size:
        sub = batch.take(middle)
        memory_lb = {k[2:]: v[pos[middle]] for k, v in bound.items() if k.startswith("m:")}
        if problem.gpu.custom:  # no compute figures: memory and fidelity only
            cost = np.zeros(middle.size)
            speed = np.zeros(middle.size)
        else:
            tput = _throughput(problem, sub, memory_lb)
            obj = bound_objectives(tput, needed_lb[middle], fid[middle], usable, by_price)
            cost, speed = obj[:, 0], np.nan_to_num(tput["tokens_per_s"], nan=0.0)
        skip[middle] = agreed(bounds(cost, speed, middle))
    return np.flatnonzero(~skip)
