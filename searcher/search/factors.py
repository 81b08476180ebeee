"""The exhaustive space as two factors: static variants × layout rows, built lazily.

A configuration of the grid is a pair (static variant ``s``, layout row ``r``): the static
variant holds the knobs that do not depend on the layout (method, rank, recipe, optimizer,
checkpointing, loss, … whatever :func:`static_variants` yields), the layout row holds tensor /
pipeline / data parallel degrees, micro-batch, accumulation, ZeRO stage and offload. Its place in
the grid is ``key = s × rows + r``: the order of :func:`searcher.search.space.grid`, which
breaks ties between equal configurations the same way whether the grid is built at once or a
chunk at a time.

Rows come in *groups* that differ only in the micro-batch (and so the accumulation): the
group's *corner* is its micro-batch-1 row. Pruning (:mod:`searcher.search.stream`) evaluates
corners first and bounds the other rows of a group by them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np

from constraints.backends import BACKEND_CODE
from constraints.config import CODE, COLUMN_DTYPES
from constraints.config_batch import ConfigBatch
from searcher.search.layout_refusal import checked_layout_rows
from searcher.search.space import SearchProblem, pair_ok, static_variants

#: the row columns, in the order the layout rows carry them
ROW_COLUMNS = ("tp", "pp", "dp", "micro_batch", "grad_accum", "zero", "offload", "backend")
#: the row columns that stay fixed inside a group (all but micro-batch and accumulation)
GROUP_COLUMNS = ("tp", "pp", "dp", "zero", "offload", "backend")
#: layout-row values held as names, coded into ConfigBatch integers
_ROW_CODES = {"offload": CODE["offload"], "backend": BACKEND_CODE}
#: (variant, row) pairs the backend rule is applied to at once while the grid is built
_RULE_CHUNK = 1 << 16


@cache
def _static_columns(items: tuple[tuple[str, Any], ...], seq_len: int) -> dict[str, float]:
    """One static variant as ConfigBatch columns (through TrainConfig, the one place that knows
    how a recipe becomes bytes); cached, since the same variants recur across models and pools."""
    from constraints.config import TrainConfig

    return TrainConfig(**dict(items), micro_batch=1, seq_len=seq_len).columns()


#: static knobs whose value TrainConfig.columns() turns into columns of their own and nothing
#: else: a variant's columns are those of the first variant agreeing with it on every other
#: knob (its *reference*), with each differing knob's columns laid over, as one TrainConfig
#: with that knob changed gives them (768 single-node variants: 80 TrainConfigs, not 768).
#: Two knobs changing one column fall back to the variant's own TrainConfig;
#: tests/search/test_fronts_unchanged.py holds the result to every variant's own columns.
SEPARABLE_KNOBS = ("lora_rank", "optimizer", "checkpointing", "loss", "optimizer_in_backward")


#: the same, as a set (read for every knob of every variant)
_SEPARABLE = frozenset(SEPARABLE_KNOBS)


def _variant_parts(
    statics: list[dict[str, Any]], seq_len: int
) -> Iterator[tuple[int, dict[str, float], list[dict[str, float]] | dict[str, float]]]:
    """Per variant (see :data:`SEPARABLE_KNOBS`): the index of its reference (its core's first
    variant), that reference's columns, and either the column changes its differing knobs make
    (one dict per knob, their columns disjoint) or, where two knobs change one column, its own
    TrainConfig's columns."""
    # per core (every knob but the separable ones): its reference's index, variant and columns
    refs: dict[tuple[Any, ...], tuple[int, dict[str, Any], dict[str, float]]] = {}
    # (reference index, knob, value): the columns that value changes from the reference's, and
    # to what (the index stands for the core: a long tuple's hash is not kept)
    diffs: dict[tuple[int, str, Any], dict[str, float]] = {}
    for i, st in enumerate(statics):
        core = tuple([kv for kv in st.items() if kv[0] not in _SEPARABLE])
        entry = refs.get(core)
        if entry is None:
            entry = refs[core] = (i, st, _static_columns(tuple(st.items()), seq_len))
        at, ref, base = entry
        applied: list[dict[str, float]] = []
        touched: set[str] = set()
        for k in SEPARABLE_KNOBS:
            value = st.get(k)
            if value == ref.get(k):
                continue
            key = (at, k, value)
            diff = diffs.get(key)
            if diff is None:
                probe = _static_columns(tuple({**ref, k: value}.items()), seq_len)
                diff = diffs[key] = {c: x for c, x in probe.items() if x != base[c]}
            if touched & diff.keys():  # two knobs change one column: its own TrainConfig
                yield at, base, _static_columns(tuple(st.items()), seq_len)
                break
            touched.update(diff)
            applied.append(diff)
        else:
            yield at, base, applied


def static_columns(statics: list[dict[str, Any]], seq_len: int) -> list[dict[str, float]]:
    """Each static variant's ConfigBatch columns (see :data:`SEPARABLE_KNOBS`)."""
    out: list[dict[str, float]] = []
    for _, base, parts in _variant_parts(statics, seq_len):
        if isinstance(parts, dict):
            out.append(parts)
            continue
        cols = base
        for diff in parts:
            cols = {**cols, **diff}
        out.append(cols)
    return out


def static_arrays(
    statics: list[dict[str, Any]], seq_len: int, names: list[str]
) -> dict[str, np.ndarray]:
    """``static_columns`` as one array per column of ``names`` (dtype ``COLUMN_DTYPES``), with
    the same values, without a dict per variant: each column is its references' values spread
    over their variants, then the few values the differing knobs change written over them (the
    768 single-node variants, ~30 columns: ~4,000 values written instead of ~23,000 read)."""
    reference = np.zeros(len(statics), dtype=np.int64)
    bases: dict[int, dict[str, float]] = {}
    changed: dict[str, tuple[list[int], list[float]]] = {k: ([], []) for k in names}
    for i, (at, base, parts) in enumerate(_variant_parts(statics, seq_len)):
        reference[i] = at
        bases[at] = base
        for diff in [parts] if isinstance(parts, dict) else parts:
            for c, x in diff.items():
                where = changed.get(c)
                if where is not None:
                    where[0].append(i)
                    where[1].append(x)
    refs = sorted(bases)
    slot = np.zeros(len(statics), dtype=np.int64)
    slot[refs] = np.arange(len(refs))
    out: dict[str, np.ndarray] = {}
    for k in names:
        dtype = COLUMN_DTYPES[k]
        column: np.ndarray = np.array([bases[r][k] for r in refs], dtype=dtype)[slot[reference]]
        rows, values = changed[k]
        if rows:
            column[rows] = np.array(values, dtype=dtype)
        out[k] = column
    return out


class Factors:
    """The grid of a problem as static variants × layout rows, with the pairing rule."""

    def __init__(self, problem: SearchProblem) -> None:
        self.problem = problem
        self.statics = static_variants(problem)
        self.rows = checked_layout_rows(problem)
        self.n_static, self.n_rows = len(self.statics), len(self.rows)
        names = [
            k for k in COLUMN_DTYPES if k not in ROW_COLUMNS and k not in ("targets", "seq_len")
        ]
        self.static_arr: dict[str, np.ndarray] = static_arrays(self.statics, problem.seq_len, names)
        self.row_arr: dict[str, np.ndarray] = {
            k: np.array(
                [_ROW_CODES[k][str(r[k])] if k in _ROW_CODES else r[k] for r in self.rows],
                dtype=COLUMN_DTYPES[k],
            )
            for k in ROW_COLUMNS
        }
        self.deepspeed_arr = self._deepspeed_columns(names)
        self.target_names = (self.statics[0]["lora_targets"],)
        self._opt_in_bwd = np.array([st["optimizer_in_backward"] for st in self.statics])
        self._eight_bit = np.array(
            [st["optimizer"] in ("adamw-8bit", "paged-adamw-8bit") for st in self.statics]
        )
        self.corner = self._corners()
        ra = self.row_arr
        self._pair_masks = {
            (oib, eight): np.asarray(
                pair_ok(
                    oib,
                    eight,
                    ra["grad_accum"],
                    ra["dp"] * ra["tp"] * ra["pp"],
                    ra["zero"],
                    ra["offload"],
                ),
                dtype=bool,
            )
            for oib in (False, True)
            for eight in (False, True)
        }
        self._runnable = self._runnable_masks()

    def _deepspeed_columns(self, names: list[str]) -> dict[str, np.ndarray]:
        """The static columns that differ on a DeepSpeed row: its 16-bit engine casts the whole
        model to the weight dtype, so adapters left to the stack's default are not PEFT's fp32
        there (TrainConfig.engine_casts_adapters). Empty when no row runs DeepSpeed."""
        if not (self.row_arr["backend"] == BACKEND_CODE["deepspeed"]).any():
            return {}
        on_ds = [{**st, "backend": "deepspeed"} for st in self.statics]
        arr = static_arrays(on_ds, self.problem.seq_len, names)
        return {k: v for k, v in arr.items() if not np.array_equal(v, self.static_arr[k])}

    def _corners(self) -> np.ndarray:
        """For each row, the index of its group's micro-batch-1 row (itself when it has none)."""
        ra = self.row_arr
        group = np.zeros(self.n_rows, dtype=np.int64)
        for k in GROUP_COLUMNS:
            _, inv = np.unique(ra[k], return_inverse=True)
            group = group * (int(inv.max()) + 1) + inv
        corner = np.arange(self.n_rows)
        ones = np.flatnonzero(ra["micro_batch"] == 1)
        first = dict(zip(group[ones].tolist(), ones.tolist(), strict=True))
        for r in range(self.n_rows):
            corner[r] = first.get(int(group[r]), r)
        return corner

    def _runnable_masks(self) -> list[np.ndarray] | None:
        """Per static variant, the rows whose backend runs it (constraints/data/backends.json).
        None where no backend runs any of the pins: then the rows stay, and the run reports the
        backend rule that refused them.

        The rule reads only :data:`RUNNABLE_STATIC_COLUMNS` of a static variant (and the pairing
        rule only its optimizer-in-backward and 8-bit flags), so it is evaluated once per
        distinct combination of those (72 classes of the 768 single-node variants) and the
        mask shared (read-only) by every variant with it; the classes' pairs go through the
        vectorised rule together, not one call per class."""
        from constraints.backend_rules import RUNNABLE_STATIC_COLUMNS, runnable_mask

        signature = np.stack(
            [self.static_arr[k].astype(np.int64) for k in RUNNABLE_STATIC_COLUMNS]
            + [self._opt_in_bwd.astype(np.int64), self._eight_bit.astype(np.int64)],
            axis=1,
        )
        _, first, variant_class = np.unique(
            signature, axis=0, return_index=True, return_inverse=True
        )
        every_row = np.arange(self.n_rows)
        class_masks = [np.zeros(self.n_rows, dtype=bool) for _ in first]
        # the classes' (variant, row) pairs, the rule applied to ~64 Ki pairs at a time
        pending: list[tuple[int, np.ndarray]] = []
        held = 0
        for c, s in enumerate(first.tolist()):
            paired = self._pair_masks[(bool(self._opt_in_bwd[s]), bool(self._eight_bit[s]))]
            pending.append((c, every_row[paired]))
            held += pending[-1][1].size
            if held >= _RULE_CHUNK or c == len(first) - 1:
                s_idx = np.concatenate([np.full(r.size, first[k]) for k, r in pending])
                r_idx = np.concatenate([r for _, r in pending])
                ok = runnable_mask(self.batch(s_idx.astype(np.int64), r_idx))
                at = 0
                for k, r in pending:
                    class_masks[k][r] = ok[at : at + r.size]
                    at += r.size
                pending, held = [], 0
        for m in class_masks:
            m.flags.writeable = False
        masks = [class_masks[c] for c in np.asarray(variant_class).reshape(-1).tolist()]
        return masks if any(m.any() for m in class_masks) else None

    def _mask(self, s: int) -> np.ndarray:
        paired = self._pair_masks[(bool(self._opt_in_bwd[s]), bool(self._eight_bit[s]))]
        return paired if self._runnable is None else self._runnable[s]

    @property
    def size(self) -> int:
        return int(sum(int(self._mask(s).sum()) for s in range(self.n_static)))

    def size_by_gpus(self) -> dict[int, int]:
        """Configurations in the grid per GPU count."""
        gpus = self.row_arr["dp"] * self.row_arr["tp"] * self.row_arr["pp"]
        per_row = np.zeros(self.n_rows, dtype=np.int64)
        for s in range(self.n_static):
            per_row += self._mask(s)
        out: dict[int, int] = {}
        for g, n in zip(gpus.tolist(), per_row.tolist(), strict=True):
            out[g] = out.get(g, 0) + n
        return out

    def rows_of(self, s: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The rows (of ``rows``, default all) that static variant ``s`` pairs with."""
        mask = self._mask(s)
        return np.flatnonzero(mask) if rows is None else rows[mask[rows]]

    def pairs(self, rows: np.ndarray | None, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(static index, row index) arrays of every valid pair with a row in ``rows``, in grid
        order, ``chunk`` pairs at a time."""
        buf_s: list[np.ndarray] = []
        buf_r: list[np.ndarray] = []
        held = 0
        for s in range(self.n_static):
            r = self.rows_of(s, rows)
            start = 0
            while start < r.size:
                take = r[start : start + chunk - held]
                buf_s.append(np.full(take.size, s, dtype=np.int64))
                buf_r.append(take)
                held += take.size
                start += take.size
                if held >= chunk:
                    yield np.concatenate(buf_s), np.concatenate(buf_r)
                    buf_s, buf_r, held = [], [], 0
        if held:
            yield np.concatenate(buf_s), np.concatenate(buf_r)

    def key(self, s: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Each pair's index in the whole grid's order (static-major)."""
        return s.astype(np.int64) * self.n_rows + r

    def batch(self, s: np.ndarray, r: np.ndarray) -> ConfigBatch:
        """The configurations of the pairs as one ConfigBatch."""
        cols: dict[str, np.ndarray] = {}
        for k in COLUMN_DTYPES:
            if k in self.row_arr:
                cols[k] = self.row_arr[k][r]
            elif k == "seq_len":
                cols[k] = np.full(s.size, self.problem.seq_len, dtype=np.int64)
            elif k == "targets":
                cols[k] = np.zeros(s.size, dtype=np.int64)
            else:
                cols[k] = self.static_arr[k][s]
        if self.deepspeed_arr:
            on_ds = cols["backend"] == BACKEND_CODE["deepspeed"]
            for k, v in self.deepspeed_arr.items():
                cols[k] = np.where(on_ds, v[s], cols[k])
        return ConfigBatch(**cols, target_names=self.target_names)


def grid(problem: SearchProblem) -> ConfigBatch:
    """Every valid configuration of the problem as one ConfigBatch (exhaustive enumeration).

    Columns are built by broadcasting (:class:`searcher.search.factors.Factors`): the
    layout-independent part of each configuration is resolved once per distinct combination and
    then repeated across the layout rows. A search streams the same pairs in chunks instead.
    """
    factors = Factors(problem)
    empty = np.zeros(0, dtype=np.int64)
    s, r = next(factors.pairs(None, chunk=1 << 62), (empty, empty))
    return factors.batch(s, r)
