"""Pareto front of minimisation objectives, as in optuna's ``_multi_objective``: a pure numpy
function on an (n, k) array; infeasible points are filtered before it is called."""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values, as ``np.unique(values)``, by the path that returns the
    inverse too: numpy 2's plain path first asks ``np.ma.is_masked``, which imports numpy.ma
    (numpy/lib/_arraysetops_impl.py ``_unique1d``), a third of a cold ``search``'s numpy."""
    return np.unique(values, return_inverse=True)[0]


def pareto_front(objectives: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated rows of ``objectives`` (every column minimised), one per
    distinct objective vector (among duplicates the earliest row is kept), sorted by the columns.

    A row is dominated when another is ≤ in every column and < in one. When the last column takes
    few distinct values (fidelity levels), the front is built level by level with vectorised 2-D
    staircases; otherwise by one pass over the lexicographically sorted rows.
    """
    n = objectives.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(objectives.T[::-1])  # stable: ties keep their input order
    pts = objectives[order]
    unique = np.ones(n, dtype=bool)
    unique[1:] = np.any(pts[1:] != pts[:-1], axis=1)
    order, pts = order[unique], pts[unique]
    if pts.shape[1] == 3 and len(distinct(pts[:, 2])) <= 256:
        keep = _front_by_levels(pts)
    else:
        keep = _front_by_sweep(pts)
    return order[keep]


def _front_by_sweep(pts: np.ndarray) -> np.ndarray:
    front: list[int] = []
    front_pts = np.empty((0, pts.shape[1]))
    for i in range(len(pts)):
        if front_pts.shape[0] and np.any(np.all(front_pts <= pts[i], axis=1)):
            continue
        front.append(i)
        front_pts = np.vstack([front_pts, pts[i]])
    return np.asarray(front, dtype=np.int64)


def _staircase(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices (into x, y, already sorted by x then y) of the 2-D minimisation skyline."""
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], y[:-1]]))
    return np.flatnonzero(y < best_before)


def _front_by_levels(pts: np.ndarray) -> np.ndarray:
    """3 objectives, the third discrete: a point survives if no point of an equal-or-better
    level is ≤ in the first two (strictly better somewhere, which duplicates removal ensures)."""
    keep: list[np.ndarray] = []
    stair_x = np.empty(0)
    stair_y = np.empty(0)
    for level in distinct(pts[:, 2]):
        idx = np.flatnonzero(pts[:, 2] == level)  # sorted by (x, y) already
        sky = idx[_staircase(pts[idx, 0], pts[idx, 1])]
        if stair_x.size:
            # the best y among better-level points whose x ≤ this point's x
            pos = np.searchsorted(stair_x, pts[sky, 0], side="right") - 1
            best_y = np.where(pos >= 0, np.minimum.accumulate(stair_y)[np.maximum(pos, 0)], np.inf)
            sky = sky[best_y > pts[sky, 1]]
        keep.append(sky)
        merged_x = np.concatenate([stair_x, pts[sky, 0]])
        merged_y = np.concatenate([stair_y, pts[sky, 1]])
        o = np.lexsort((merged_y, merged_x))
        stair_x, stair_y = merged_x[o], merged_y[o]
    out = np.concatenate(keep) if keep else np.zeros(0, dtype=np.int64)
    return np.sort(out)


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(a <= b) and np.any(a < b))


def hypervolume_2d(points: np.ndarray, reference: np.ndarray) -> float:
    """Area dominated by 2-objective minimisation points up to ``reference``: sweep along x,
    each point's strip reaches to the next point's x at the best y seen so far."""
    pts = points[np.all(points < reference, axis=1)]
    if pts.shape[0] == 0:
        return 0.0
    pts = pts[np.argsort(pts[:, 0], kind="stable")]
    xs = [*pts[:, 0].tolist(), float(reference[0])]
    area, best_y = 0.0, float(reference[1])
    for i in range(len(pts)):
        best_y = min(best_y, float(pts[i, 1]))
        area += (xs[i + 1] - xs[i]) * (float(reference[1]) - best_y)
    return area


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Dominated hypervolume of minimisation points up to ``reference`` (exact, by slicing
    along the last objective; fine for the few hundred points of a front)."""
    pts = points[np.all(points < reference, axis=1)]
    if pts.shape[0] == 0:
        return 0.0
    if pts.shape[1] == 2:
        return hypervolume_2d(pts, reference)
    pts = pts[np.argsort(pts[:, -1])]
    volume = 0.0
    for i in range(len(pts)):
        top = reference[-1] if i + 1 == len(pts) else pts[i + 1, -1]
        depth = float(top - pts[i, -1])
        if depth <= 0:
            continue
        volume += depth * hypervolume(pts[: i + 1, :-1], reference[:-1])
    return volume
