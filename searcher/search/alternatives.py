"""A front member's alternatives: the other configurations with its objective vector.

The front keeps one configuration per objective vector (cost within 2 %, memory within the
memory step, the same quality: searcher.search.evaluate ``objective_columns``), the fastest, then
the one on fewest GPUs, then the earliest in grid order. The others with that vector differ from
it only in knobs that move no objective past its resolution (NF4 with or without double
quantisation where the base is offloaded, micro-batch 2 × 16 beside 1 × 32 at the same speed);
they are kept here, up to :data:`KEPT` per vector in the same order, so a reader sees the choice
instead of losing it. The order is total, so a streamed search keeps what an all-at-once one
does.
"""

from __future__ import annotations

import numpy as np

from searcher.search.evaluate import Evaluation, concat

#: alternatives kept per objective vector
KEPT = 4


def matching(vectors: np.ndarray, front: np.ndarray) -> np.ndarray:
    """For each row of ``vectors``, the index of the equal row of ``front`` (-1 where none)."""
    out = np.full(len(vectors), -1, dtype=np.int64)
    near = np.flatnonzero(np.isin(vectors[:, 0], front[:, 0]))  # few rows share a cost step
    if near.size:
        equal = np.all(vectors[near, None, :] == front[None, :, :], axis=2)
        out[near] = np.where(equal.any(axis=1), equal.argmax(axis=1), -1)
    return out


class Alternatives:
    """Rows whose objective vector is a front member's, the member itself excluded."""

    def __init__(self) -> None:
        self.kept: Evaluation | None = None
        self.keys = np.zeros(0, dtype=np.int64)
        self.objectives = np.zeros((0, 3))

    def gather(
        self,
        candidates: list[tuple[Evaluation, np.ndarray, np.ndarray, np.ndarray]],
        front_objectives: np.ndarray,
        front_keys: np.ndarray,
    ) -> None:
        """Keep, among the stored rows and the ``candidates`` (rows, the index of those to
        consider, and every row's key and objective vector), those with a vector of the front
        that are not its members, at most :data:`KEPT` per vector."""
        parts = []
        if self.kept is not None:
            parts.append((self.kept, np.arange(self.keys.size), self.keys, self.objectives))
        matched = []
        for rows, index, keys, obj in [*parts, *candidates]:
            slot = matching(obj[index], front_objectives)
            hit = (slot >= 0) & ~np.isin(keys[index], front_keys)
            if hit.any():
                rows_hit = index[hit]
                matched.append((rows.take(rows_hit), keys[rows_hit], obj[rows_hit], slot[hit]))
        if not matched:
            self.kept, self.keys, self.objectives = None, self.keys[:0], self.objectives[:0]
            return
        ev = concat([m[0] for m in matched])
        keys, obj, slot = (np.concatenate([m[i] for m in matched]) for i in (1, 2, 3))
        order = np.lexsort((keys, ev.batch.gpus, -ev.speed(), slot))
        _, first = np.unique(slot[order], return_index=True)
        rank = np.arange(order.size) - np.repeat(first, np.diff(np.append(first, order.size)))
        keep = order[rank < KEPT]
        self.kept, self.keys, self.objectives = ev.take(keep), keys[keep], obj[keep]

    def rows_of(self, vector: np.ndarray) -> list[int]:
        """The stored rows with ``vector``, in the front's order of preference (as kept)."""
        if self.kept is None:
            return []
        return [int(i) for i in np.flatnonzero(np.all(self.objectives == vector, axis=1))]
