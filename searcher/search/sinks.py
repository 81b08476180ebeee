"""What a search keeps of the configurations it evaluates, a chunk at a time.

A *sink* sees every evaluated chunk (``add``) with each row's place in the grid (``keys``, the
tie-breaker that makes a streamed search give the answer of an all-at-once one), and keeps only
what its answer needs: the running Pareto front, each method family's best for the rejection
reasons, the fastest configuration per group (GPU count, family). Before a chunk is evaluated a
sink may be asked which of its rows it can do without (``prunable``), given lower bounds on
their memory and cost and an upper bound on their speed: the search skips a row only when every
sink agrees, so pruning never changes an answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from constraints.config import CODE, TrainConfig
from constraints.errors import FitplanError
from constraints.hardware import describe
from constraints.units import GiB
from searcher.search.alternatives import Alternatives
from searcher.search.briefs import knobs_brief
from searcher.search.evaluate import Evaluation, concat, memory_step_bytes, objective_columns
from searcher.search.members import FrontMember, member_at
from searcher.search.pareto import distinct, pareto_front
from searcher.search.space import SearchProblem, knob_values

FAMILY_NAMES = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}


@dataclass
class Bounds:
    """What is known of rows before they are evaluated: exact knobs, bounded results."""

    keys: np.ndarray
    method: np.ndarray  # method code
    gpus: np.ndarray
    fidelity: np.ndarray
    needed_lb: np.ndarray  # bytes that must fit, at least
    objectives_lb: np.ndarray  # (n, 3): each objective, at least
    speed_ub: np.ndarray  # tokens/s, at most (0 where not computed)
    hardware: np.ndarray  # exact rule mask
    corner_hardware: np.ndarray  # the rule mask of the row whose memory bounds this one


@dataclass
class Rejection:
    family: str
    reason: str
    best_needed: int | None = None
    best_config: TrainConfig | None = None


def _among(table: np.ndarray | None, gpus: np.ndarray) -> np.ndarray:
    """Rows whose GPU count a sink is about (all when it is about every count)."""
    if table is None:
        return np.ones(gpus.shape, dtype=bool)
    return table[np.minimum(gpus, table.size - 1)]


def _count_table(gpu_counts: Sequence[int] | None) -> np.ndarray | None:
    """A lookup table: entry g is True when g is among ``gpu_counts`` (the last entry False)."""
    if gpu_counts is None:
        return None
    table = np.zeros(max(gpu_counts, default=0) + 2, dtype=bool)
    table[list(gpu_counts)] = True
    return table


class FrontSink:
    """The running feasible Pareto front, one member per objective vector: among equals the
    fastest, then the fewest GPUs, then the earliest in grid order."""

    def __init__(self, problem: SearchProblem, gpu_counts: Sequence[int] | None = None):
        self.by_price = bool(problem.gpu.usd_per_gpu_hour)
        # the GPU counts this front is about (a fleet pool's), all when None
        self.gpu_counts = _count_table(gpu_counts)
        self.kept: Evaluation | None = None
        self.keys = np.zeros(0, dtype=np.int64)
        self.objectives = np.zeros((0, 3))
        self.feasible = 0
        self.alternatives = Alternatives()
        self._members: list | None = None

    def _front(
        self, obj: np.ndarray, speed: np.ndarray, gpus: np.ndarray, keys: np.ndarray
    ) -> np.ndarray:
        order = np.lexsort((keys, gpus, -speed))
        return order[pareto_front(obj[order])]

    def add(self, ev: Evaluation, keys: np.ndarray) -> None:
        f = np.flatnonzero(ev.feasible & _among(self.gpu_counts, ev.batch.gpus))
        self.feasible += int(f.size)
        if not f.size:
            return
        obj = ev.objectives(self.by_price)
        sel = f[self._front(obj[f], ev.speed()[f], ev.batch.gpus[f], keys[f])]
        part = ev.take(sel)
        merged = part if self.kept is None else concat([self.kept, part])
        m_keys = np.concatenate([self.keys, keys[sel]])
        m_obj = np.concatenate([self.objectives, obj[sel]])
        keep = self._front(m_obj, merged.speed(), merged.batch.gpus, m_keys)
        left = np.setdiff1d(np.arange(self.keys.size), keep)  # former members (the chunk's: f)
        self.kept, self.keys, self.objectives = merged.take(keep), m_keys[keep], m_obj[keep]
        self.alternatives.gather(
            [(merged, left, m_keys, m_obj), (ev, f, keys, obj)], self.objectives, self.keys
        )

    def prunable(self, b: Bounds) -> np.ndarray:
        """Rows strictly dominated by a member already kept (so by the final front too)."""
        out = ~_among(self.gpu_counts, b.gpus)
        if not len(self.keys):
            return out
        c, m, f = self.objectives[:, 0], self.objectives[:, 1], self.objectives[:, 2]
        lb = b.objectives_lb
        levels, inverse = np.unique(lb[:, 2], return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        edges = np.searchsorted(inverse[order], np.arange(levels.size + 1))
        for j, level in enumerate(levels):
            rows = order[edges[j] : edges[j + 1]]
            cx, my = lb[rows, 0], lb[rows, 1]
            better = f < level  # strictly higher fidelity: ≤ in cost and memory is enough
            equal = f == level  # same fidelity: strictly better in cost or memory
            hit = _staircase_leq(c[better], m[better], cx, my, strict=False)
            hit |= _staircase_leq(c[equal], m[equal], cx, my, strict=True)
            out[rows] |= hit
        return out

    def cached_members(self) -> list:
        """The members ranked by cost, built once."""
        if self._members is None:
            self._members = self.members("cost")
        return self._members

    def members(self, rank_by: str) -> list:
        if self.kept is None:
            return []
        ev, obj = self.kept, self.objectives
        keep = self._front(obj, ev.speed(), ev.batch.gpus, self.keys)
        speed = ev.speed()
        if rank_by == "speed":
            order = np.lexsort((ev.needed[keep], obj[keep, 0], -speed[keep]))
        else:
            order = np.lexsort((ev.needed[keep], -speed[keep], obj[keep, 0]))
        return [self._with_alternatives(member_at(ev, int(i)), obj[i]) for i in keep[order]]

    def _with_alternatives(self, member: FrontMember, vector: np.ndarray) -> FrontMember:
        rows = self.alternatives.rows_of(vector)
        if not rows:
            return member
        kept = self.alternatives.kept
        assert kept is not None
        return dataclasses.replace(member, alternatives=tuple(kept.batch.config(i) for i in rows))


def _staircase_leq(
    cx: np.ndarray, my: np.ndarray, c: np.ndarray, m: np.ndarray, strict: bool
) -> np.ndarray:
    """For each (c, m): is there a point (cx, my) ≤ it in both (and, if ``strict``, < in one)?"""
    if not cx.size:
        return np.zeros(c.size, dtype=bool)
    order = np.argsort(cx, kind="stable")
    xs, best = cx[order], np.minimum.accumulate(my[order])
    pos = np.searchsorted(xs, c, side="right") - 1  # points with cx ≤ c
    best_leq = np.where(pos >= 0, best[np.maximum(pos, 0)], np.inf)
    if not strict:
        return best_leq <= m
    pos_lt = np.searchsorted(xs, c, side="left") - 1  # points with cx < c
    best_lt = np.where(pos_lt >= 0, best[np.maximum(pos_lt, 0)], np.inf)
    return (best_lt <= m) | (best_leq < m)


@dataclass
class _FamilyStats:
    feasible: bool = False
    hw_ok: bool = False
    masks: frozenset[int] = frozenset()
    mem_ok: bool = False
    mem_cpu_ok: bool = False
    best_needed: tuple[float, int, Evaluation] | None = None  # among hw_ok: (needed, key, row)
    best_cpu: tuple[float, int, Evaluation] | None = None  # among mem_ok: (cpu bytes, key, row)


def _better(old: tuple[float, int, Evaluation] | None, value: float, key: int) -> bool:
    return old is None or (value, key) < (old[0], old[1])


class RejectionSink:
    """Per method family, what its reason needs when nothing of it is feasible."""

    def __init__(self, problem: SearchProblem, gpu_counts: Sequence[int] | None = None):
        self.problem = problem
        self.gpu_counts = _count_table(gpu_counts)
        self.families = list(knob_values(problem)["method"])
        self.stats = {f: _FamilyStats() for f in self.families}
        self.usable: float | None = None

    def add(self, ev: Evaluation, keys: np.ndarray) -> None:
        self.usable = ev.usable
        base = _among(self.gpu_counts, ev.batch.gpus)
        feasible = ev.feasible
        for family in self.families:
            sel = base & (ev.batch.method == CODE["method"][family])
            if not sel.any():
                continue
            st = self.stats[family]
            if (feasible & sel).any():
                st.feasible = True
            if st.feasible:
                continue
            hw_ok = sel & (ev.hardware == 0)
            st.masks = st.masks | frozenset(int(x) for x in distinct(ev.hardware[sel]))
            if not hw_ok.any():
                continue
            st.hw_ok = True
            idx = np.flatnonzero(hw_ok)
            i = int(idx[np.lexsort((keys[idx], ev.needed[idx]))[0]])
            if _better(st.best_needed, float(ev.needed[i]), int(keys[i])):
                st.best_needed = (float(ev.needed[i]), int(keys[i]), ev.take(np.array([i])))
            mem_ok = hw_ok & ev.fits
            if mem_ok.any():
                st.mem_ok = True
                st.mem_cpu_ok |= bool((mem_ok & ev.cpu_ok).any())
                idx = np.flatnonzero(mem_ok)
                cpu = ev.memory["cpu_bytes"]
                i = int(idx[np.lexsort((keys[idx], cpu[idx]))[0]])
                if _better(st.best_cpu, float(cpu[i]), int(keys[i])):
                    st.best_cpu = (float(cpu[i]), int(keys[i]), ev.take(np.array([i])))

    def prunable(self, b: Bounds) -> np.ndarray:
        """Rows of a family already feasible, and rows that cannot fit whose bounding row (same
        rules broken, less memory, earlier in the grid) stands in for them in the reason."""
        known = np.zeros(len(b.keys), dtype=bool)
        for family in self.families:
            if self.stats[family].feasible:
                known |= b.method == CODE["method"][family]
        usable = np.inf if self.usable is None else self.usable
        cannot_fit = (b.needed_lb > usable) & (b.hardware == b.corner_hardware)
        return known | cannot_fit | ~_among(self.gpu_counts, b.gpus)

    def rejections(self) -> list[Rejection]:
        from constraints.breakdown import peak_bytes, room_bytes

        problem = self.problem
        out: list[Rejection] = []
        for family in self.families:
            st = self.stats[family]
            if st.feasible or not st.masks:
                continue
            name = FAMILY_NAMES[family]
            if not st.hw_ok:
                problems = sorted(
                    {p for m in st.masks for p in describe(int(m), problem.model, problem.gpu)}
                )
                out.append(
                    Rejection(
                        family, f"{name}: cannot run on {problem.gpu.name}: {'; '.join(problems)}"
                    )
                )
                continue
            if st.mem_ok and not st.mem_cpu_ok and st.best_cpu is not None:
                row = st.best_cpu[2]
                cfg = row.batch.config(0)
                need = row.memory["cpu_bytes"][0] * min(cfg.gpus, problem.gpus_per_node) / GiB
                out.append(
                    Rejection(
                        family,
                        f"{name}: fits the GPU only with CPU offload, which needs {need:.1f} GiB of CPU RAM per node "
                        f"({knobs_brief(cfg)}); {problem.cpu_ram_per_node / GiB:.1f} GiB available (--cpu-ram)",
                        round(float(row.needed[0])),
                        cfg,
                    )
                )
                continue
            assert st.best_needed is not None
            row = st.best_needed[2]
            cfg = row.batch.config(0)
            out.append(
                Rejection(
                    family,
                    f"{name}: peaks at {peak_bytes(float(row.needed[0]), problem.gpu) / GiB:.1f} "
                    f"GiB per GPU at best ({knobs_brief(cfg)}); room "
                    f"{room_bytes(problem.gpu, problem.headroom) / GiB:.1f} GiB "
                    "(capacity − headroom)",
                    round(float(row.needed[0])),
                    cfg,
                )
            )
        return out


class BestPerSink:
    """Per group (``group`` of an evaluation: GPU count, method code …), the first feasible row
    by (fastest, highest fidelity, least memory, earliest in the grid)."""

    def __init__(
        self,
        group: Callable[[Evaluation], np.ndarray],
        bound_group: Callable[[Bounds], np.ndarray],
        gpu_counts: Sequence[int] | None = None,
    ):
        self.group, self.bound_group = group, bound_group
        self.gpu_counts = _count_table(gpu_counts)
        self.best: dict[int, tuple[tuple[float, float, float, int], Evaluation]] = {}
        self.usable: float | None = None

    def add(self, ev: Evaluation, keys: np.ndarray) -> None:
        self.usable = ev.usable
        f = np.flatnonzero(ev.feasible & _among(self.gpu_counts, ev.batch.gpus))
        if not f.size:
            return
        speed, groups = ev.speed()[f], self.group(ev)[f]
        order = np.lexsort((keys[f], ev.needed[f], -ev.fidelity[f], -speed, groups))
        firsts = order[np.flatnonzero(np.r_[True, groups[order][1:] != groups[order][:-1]])]
        for j in firsts:
            i = int(f[j])
            rank = (-float(speed[j]), -float(ev.fidelity[i]), float(ev.needed[i]), int(keys[i]))
            g = int(groups[j])
            if g not in self.best or rank < self.best[g][0]:
                self.best[g] = (rank, ev.take(np.array([i])))

    def prunable(self, b: Bounds) -> np.ndarray:
        """Rows that cannot fit, and rows slower at best than their group's best so far."""
        usable = np.inf if self.usable is None else self.usable
        out = (b.needed_lb > usable) | ~_among(self.gpu_counts, b.gpus)
        if self.best:
            known = np.array(sorted(self.best), dtype=np.int64)
            fastest = np.array([-self.best[int(g)][0][0] for g in known])
            groups = self.bound_group(b)
            pos = np.minimum(np.searchsorted(known, groups), known.size - 1)
            out |= (known[pos] == groups) & (b.speed_ub < fastest[pos])
        return out

    def rows(self) -> list[tuple[int, Evaluation]]:
        """(group, one-row evaluation) per group, groups ascending."""
        return [(g, self.best[g][1]) for g in sorted(self.best)]


def check_rank_by(rank_by: str) -> None:
    if rank_by not in ("cost", "speed"):
        raise FitplanError(f"--rank-by {rank_by}: use cost or speed")


def bound_objectives(
    throughput: dict[str, np.ndarray],
    needed_lb: np.ndarray,
    fidelity: np.ndarray,
    usable: float,
    by_price: bool,
) -> np.ndarray:
    """Lower bounds of the objectives from a throughput upper bound and a memory lower bound."""
    return objective_columns(throughput, needed_lb, fidelity, memory_step_bytes(usable), by_price)
