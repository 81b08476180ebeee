"""The speed work leaves the answers alone.

- The search's answers on the small cases of benchmarks/compare_fronts.py equal the golden file
  written from the tree named in it (main before the cold-start and cluster-scale work merged),
  by that tree's own code: the front in its order (configurations exactly, figures to 1e-9),
  the rejection reasons and the counts. A physics change on purpose regenerates it from the tree
  before that change: ``python benchmarks/compare_fronts.py --write-golden TREE``.
- The shortcuts taken to build the grid faster equal the plain computation they replace, written
  out here: the backend rule evaluated per static variant, the layout rows enumerated knob by
  knob, the divisors by trial division.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from constraints.backend_rules import RUNNABLE_STATIC_COLUMNS, runnable_mask
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.search.factors import ROW_COLUMNS, Factors
from searcher.search.run import run_search
from searcher.search.space import (
    MAX_MICRO_BATCH,
    SearchProblem,
    backend_options,
    divisors,
    layout_rows,
    layouts,
    sharding_options,
)
from searcher.search.strategies import ExhaustiveStrategy
from searcher.search.views import result_json

GOLDEN = json.loads((Path(__file__).parent / "data" / "fronts_golden.json").read_text())
MEMBER_KEYS = ("config", "fidelity", "needed_bytes", "step_time_s", "tokens_per_s", "usd_per_mtok")


def _problem(kw: dict[str, Any]) -> SearchProblem:
    kw = dict(kw)
    kw["model"], kw["gpu"] = resolve_model(kw["model"]), resolve_gpu(kw["gpu"])
    return SearchProblem(**kw)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9)
    return bool(a == b)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=[c["label"] for c in GOLDEN["cases"]])
def test_answers_equal_the_golden_tree(case: dict[str, Any]) -> None:
    got = result_json(run_search(_problem(case["problem"]), ExhaustiveStrategy()))
    want = case["answer"]
    assert got["evaluated"] == want["evaluated"]
    assert got["feasible"] == want["feasible"]
    assert got["rejected"] == want["rejected"]
    assert len(got["front"]) == len(want["front"])
    for i, (g, w) in enumerate(zip(got["front"], want["front"], strict=True)):
        assert g["config"] == w["config"], (i, g["config"], w["config"])
        for k in MEMBER_KEYS[1:]:
            assert _close(g[k], w[k]), (i, k, g[k], w[k])


PROBLEMS = [
    dict(model="llama-3.1-8b", gpu="h100-sxm", max_gpus=8, target_batch=64, seq_len=4096),
    dict(model="llama-3.2-1b", gpu="t4", max_gpus=4, target_batch=12, seq_len=2048),
    dict(model="llama-3.2-3b", gpu="a10g", max_gpus=16, target_batch=48, seq_len=1024,
         pins={"method": "lora", "zero": 3}),
    dict(model="qwen2.5-1.5b", gpu="rtx-4090", max_gpus=1, target_batch=8, seq_len=1024,
         pins={"optimizer": "paged-adamw-8bit"}),
    dict(model="llama-3.1-70b", gpu="h100-sxm", max_gpus=64, target_batch=256, seq_len=8192),
]  # fmt: skip


@pytest.mark.parametrize("kw", PROBLEMS, ids=lambda kw: f"{kw['model']}-{kw['gpu']}")
def test_shared_runnable_masks_equal_the_rule_per_variant(kw: dict[str, Any]) -> None:
    """Factors evaluates the backend rule once per class of static variants; the plain way
    evaluates it for every variant on every row it pairs with."""
    f = Factors(_problem(kw))
    every_row = np.arange(f.n_rows)
    for s in range(f.n_static):
        paired = f._pair_masks[(bool(f._opt_in_bwd[s]), bool(f._eight_bit[s]))]
        plain = np.zeros(f.n_rows, dtype=bool)
        rows = every_row[paired]
        plain[rows] = runnable_mask(f.batch(np.full(rows.size, s, dtype=np.int64), rows))
        assert np.array_equal(f._mask(s), plain), (s, f.statics[s])


class _Reads:
    """A ConfigBatch that records which of its columns are read."""

    def __init__(self, batch: Any) -> None:
        self._batch, self.read = batch, set()

    def __len__(self) -> int:
        return len(self._batch)

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self._batch, name)


def test_the_rule_reads_no_other_static_column() -> None:
    """The sharing is sound only while runnable_mask reads, of a variant's static columns,
    just RUNNABLE_STATIC_COLUMNS (``gpus`` is tp·pp·dp, a layout figure)."""
    f = Factors(_problem(PROBLEMS[0]))
    rows = np.arange(f.n_rows)
    probe = _Reads(f.batch(np.zeros(rows.size, dtype=np.int64), rows))
    runnable_mask(probe)  # type: ignore[arg-type]
    assert probe.read, "the probe saw no reads"
    assert probe.read <= set(RUNNABLE_STATIC_COLUMNS) | set(ROW_COLUMNS) | {"gpus"}


def _plain_layout_rows(problem: SearchProblem) -> list[dict[str, int | str]]:
    """The layout rows knob by knob, each row's backends asked afresh (the code before)."""
    out: list[dict[str, int | str]] = []
    for lay in layouts(problem):
        per_replica = problem.target_batch // lay.dp
        for mb in range(1, per_replica + 1):
            if per_replica % mb or mb > MAX_MICRO_BATCH:
                continue
            for zero, offload in sharding_options(problem, lay.dp):
                for backend in backend_options(problem, lay, zero, offload):
                    out.append(dict(tp=lay.tp, pp=lay.pp, dp=lay.dp, micro_batch=mb,
                                    grad_accum=per_replica // mb, zero=zero, offload=offload,
                                    backend=backend))  # fmt: skip
    return out


@pytest.mark.parametrize("kw", PROBLEMS, ids=lambda kw: f"{kw['model']}-{kw['gpu']}")
def test_layout_rows_equal_the_plain_enumeration(kw: dict[str, Any]) -> None:
    p = _problem(kw)
    assert layout_rows(p) == _plain_layout_rows(p)


def test_divisors_by_trial_division() -> None:
    rng = random.Random(3)
    for n in [1, 2, 12, 256, 4096, 16384, *(rng.randrange(1, 5000) for _ in range(50))]:
        for cap in (None, 1, 7, 256):
            want = [d for d in range(1, n + 1) if n % d == 0 and (cap is None or d <= cap)]
            assert divisors(n, cap) == want, (n, cap)


def _plain_pairs(f: Factors, rows: np.ndarray, chunk: int) -> list[tuple[list[int], list[int]]]:
    """Variant by variant, its rows among ``rows`` in their order, cut every ``chunk`` pairs."""
    flat = [(s, int(r)) for s in range(f.n_static) for r in rows[f._mask(s)[rows]]]
    return [
        ([s for s, _ in flat[i : i + chunk]], [r for _, r in flat[i : i + chunk]])
        for i in range(0, len(flat), chunk)
    ]


@pytest.mark.parametrize("kw", PROBLEMS[:3], ids=lambda kw: f"{kw['model']}-{kw['gpu']}")
def test_pairs_equal_the_plain_loop_over_variants(kw: dict[str, Any]) -> None:
    f = Factors(_problem(kw))
    rng = np.random.default_rng(5)
    every = np.arange(f.n_rows)
    for rows in (every, every[::3], np.sort(rng.choice(every, size=f.n_rows // 2, replace=False))):
        for chunk in (1, 97, 4096, 1 << 40):
            got = [(s.tolist(), r.tolist()) for s, r in f.pairs(rows, chunk)]
            assert got == _plain_pairs(f, rows, chunk), (len(rows), chunk)
    assert f.size == sum(int(f._mask(s).sum()) for s in range(f.n_static))


@pytest.mark.parametrize("kw", PROBLEMS, ids=lambda kw: f"{kw['model']}-{kw['gpu']}")
def test_static_columns_equal_each_variants_own(kw: dict[str, Any]) -> None:
    """The variants' columns built from a few TrainConfigs (factors.SEPARABLE_KNOBS) equal
    each variant's own TrainConfig.columns(), column for column."""
    from constraints.config import TrainConfig
    from searcher.search.factors import static_columns
    from searcher.search.space import static_variants

    p = _problem(kw)
    statics = static_variants(p)
    got = static_columns(statics, p.seq_len)
    for st, cols in zip(statics, got, strict=True):
        assert cols == TrainConfig(**st, micro_batch=1, seq_len=p.seq_len).columns(), st


def _arrays_of(columns: list[dict[str, float]], names: list[str]) -> dict[str, np.ndarray]:
    from constraints.config import COLUMN_DTYPES

    return {k: np.array([c[k] for c in columns], dtype=COLUMN_DTYPES[k]) for k in names}


@pytest.mark.parametrize("clash", [False, True], ids=["as-searched", "a-knob-twice"])
@pytest.mark.parametrize("kw", PROBLEMS[:3], ids=lambda kw: f"{kw['model']}-{kw['gpu']}")
def test_static_arrays_equal_each_variants_own_columns(
    kw: dict[str, Any], clash: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Factors' arrays, built without a dict per variant, hold each variant's own
    TrainConfig.columns(), value for value and in the same dtype; ``clash`` lists the rank knob
    twice, so a variant of another rank has two knobs changing one column and takes the path
    of the variants that need their own TrainConfig (no searched pair of knobs does)."""
    from constraints.config import TrainConfig
    from searcher.search import factors
    from searcher.search.space import static_variants

    if clash:
        knobs = (*factors.SEPARABLE_KNOBS, "lora_rank")
        monkeypatch.setattr(factors, "SEPARABLE_KNOBS", knobs)
        monkeypatch.setattr(factors, "_SEPARABLE", frozenset(knobs))
    p = _problem(kw)
    statics = static_variants(p)
    names = list(Factors(p).static_arr)
    own = [TrainConfig(**st, micro_batch=1, seq_len=p.seq_len).columns() for st in statics]
    got = factors.static_arrays(statics, p.seq_len, names)
    want = _arrays_of(own, names)
    assert list(got) == names
    for k in names:
        assert got[k].dtype == want[k].dtype, k
        assert np.array_equal(got[k], want[k]), k
    parts = [p for _, _, p in factors._variant_parts(statics, p.seq_len)]
    assert any(isinstance(x, dict) for x in parts) == clash  # the own-columns path ran
