"""The stack search's front held to the four-objective front of every feasible configuration."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from searcher.search.pareto import dominates
from searcher.search.run import run_search
from searcher.search.strategies import ExhaustiveStrategy


def assert_front_by_brute_force(
    result: Any, spaces: Iterable[Any], outside: Callable[[Any], bool]
) -> None:
    """Every feasible configuration of ``spaces`` with its objectives and a fourth, 1 when
    ``outside(config)`` (it needs a package beyond the stack): the front is sound (no member
    dominated) and complete (every non-dominated objective vector has a member)."""
    rows: list[tuple[Any, np.ndarray]] = []
    for space in spaces:
        ev = run_search(space, ExhaustiveStrategy(), keep_evaluation=True).evaluation
        assert ev is not None
        obj = ev.objectives()
        for i in np.flatnonzero(ev.feasible):
            cfg = ev.batch.config(int(i))
            rows.append((cfg, np.append(obj[i], 1.0 if outside(cfg) else 0.0)))
    points = np.array([r[1] for r in rows])
    by_config = {cfg: vec for cfg, vec in rows}
    members = np.array([by_config[m.config] for m in result.front])
    for vec in members:
        assert not np.any(np.all(points <= vec, axis=1) & np.any(points < vec, axis=1)), vec
    shown = {tuple(v) for v in members}
    for vec in {tuple(p) for p in points}:
        if not any(dominates(p, np.array(vec)) for p in points):
            assert vec in shown, vec
