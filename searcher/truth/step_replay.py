"""The replayed caching allocator's peaks on a step trace (searcher/truth/step_trace.py)."""

from __future__ import annotations

from typing import Any

from constraints.allocator_replay import AllocatorSettings, ReplayResult


def with_replay(
    trace: Any,
    settings: AllocatorSettings | None,
    shallow: ReplayResult | None,
    deeper: ReplayResult | None,
    extra: float,
) -> Any:
    """The replayed peaks at the model's depth, set on ``trace`` (a StepTrace). From two traced depths (``extra``: layers beyond
    the deeper trace, in units of the depth step) the replay's allocated peak is linear in the
    depth and its slack (reserved − allocated) is the deeper trace's: which cached blocks serve
    which request is not linear in the depth (the reserved peak itself extrapolated linearly
    missed full-depth replays by −20 … +73 %; the deeper trace's slack by −6.5 … +0.3 %,
    docs/allocator_replay.md)."""
    if settings is None or shallow is None or deeper is None:
        return trace
    allocated = deeper.peak_allocated + round(
        extra * (deeper.peak_allocated - shallow.peak_allocated)
    )
    trace.replayed_allocated_bytes = allocated
    trace.peak_reserved_bytes = allocated + deeper.peak_reserved - deeper.peak_allocated
    trace.segments_at_peak = len(deeper.segments_at_peak)
    trace.allocator = settings.conf()
    if deeper.oom_at is not None:
        trace.oom_request_bytes = deeper.oom_request
    if extra:
        trace.notes.append(
            "reserved: the extrapolated allocated peak plus the deeper trace's allocator slack "
            "(without --fast every layer is traced and replayed)"
        )
    return trace
