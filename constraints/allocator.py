"""The CUDA caching allocator: what it reserves beyond the bytes a step has allocated.

The rules are PyTorch's (c10/cuda/CUDACachingAllocator.cpp, read at pytorch/pytorch 001074d):

- every request is rounded up to 512 bytes (``round_size``; with
  ``roundup_power2_divisions:N`` a request is rounded up to the next of N equal steps between
  two powers of two instead);
- requests of at most 1 MiB are "small" and are carved from 2 MiB segments; larger ones are
  "large": between 1 and 10 MiB they are carved from a 20 MiB segment, from 10 MiB on the
  segment is ``cudaMalloc``'ed for the request itself, rounded up to 2 MiB
  (``get_allocation_size``);
- a free cached block is split for a smaller request only if the rest is at least 512 B (small
  pool) or more than 1 MiB (large pool; ``should_split``); blocks of ``max_split_size`` or more
  are never split;
- "once freed, blocks can be re-allocated on the same stream, but not on any other stream": each
  stream has its own cached blocks;
- ``expandable_segments:True`` maps physical pages (2 MiB small pool, 20 MiB large pool) into one
  growing virtual segment per stream and splits blocks at 512 B granularity: the slivers at the
  ends of per-request segments disappear, freed neighbours coalesce across what would have been
  separate ``cudaMalloc`` segments.

What the rules force exactly (rounding) is computed here; what depends on the order of requests
(fragmentation: freed blocks that later, larger requests cannot reuse) is a fraction of the bytes
the step allocates and frees, one per regime and segment mode (data/allocator_slack.json), fitted
to the allocator replayed over traced steps (constraints/allocator_replay.py,
benchmarks/replay_fit.py; residuals in docs/replay_sweep.md): recomputing a checkpointed layer
between gradients, and eager attention's score matrices, leave freed blocks later requests cannot
reuse; a step without either reuses nearly every block.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from constraints.config import CODE
from constraints.units import MiB

SLACK_TABLE = Path(__file__).parent / "data" / "allocator_slack.json"

# ---- the allocator's own constants (c10/cuda/CUDACachingAllocator.cpp) ----------------------

#: kMinBlockSize: every request is rounded up to a multiple of 512 bytes
MIN_BLOCK_BYTES = 512
#: kSmallSize: the largest "small" request
SMALL_REQUEST_MAX_BYTES = 1 * MiB
#: kSmallBuffer: small requests are packed into 2 MiB segments
SMALL_SEGMENT_BYTES = 2 * MiB
#: kLargeBuffer: requests between 1 and 10 MiB are carved from 20 MiB segments
LARGE_SEGMENT_BYTES = 20 * MiB
#: kMinLargeAlloc: from this size on, a request gets a segment of its own
OWN_SEGMENT_MIN_BYTES = 10 * MiB
#: kRoundLarge: own segments are rounded up to 2 MiB
LARGE_ROUND_BYTES = 2 * MiB


def round_request(nbytes: int, power2_divisions: int = 0) -> int:
    """Bytes of the block a request of ``nbytes`` asks for (``round_size``); 0 stays 0.

    ``power2_divisions`` is ``roundup_power2_divisions``: 0 or 1 = off (512-byte rounding).
    """
    if nbytes <= 0:
        return 0
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    if power2_divisions > 1 and nbytes > MIN_BLOCK_BYTES * power2_divisions:
        if nbytes & (nbytes - 1) == 0:
            return nbytes
        floor = 1 << (nbytes.bit_length() - 1)
        step = floor >> (power2_divisions.bit_length() - 1)
        if step == 0:
            return floor << 1
        low = nbytes & ~(step - 1)
        return nbytes if low == nbytes else low + step
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_bytes(request: int) -> int:
    """Bytes ``cudaMalloc``'ed when no cached block fits a (rounded) request
    (``get_allocation_size``)."""
    if request <= SMALL_REQUEST_MAX_BYTES:
        return SMALL_SEGMENT_BYTES
    if request < OWN_SEGMENT_MIN_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-request // LARGE_ROUND_BYTES) * LARGE_ROUND_BYTES


def own_segment_waste(nbytes: int, expandable: bool = False) -> int:
    """Reserved beyond the request of a tensor of ``nbytes`` that has a segment of its own
    (10 MiB and more): the 2 MiB round-up, or 512 B when segments are expandable (the rest of
    a page stays usable by the next block). Smaller requests share segments: 0 here."""
    rounded = round_request(nbytes)
    if rounded < OWN_SEGMENT_MIN_BYTES:
        return 0
    if expandable:
        return rounded - nbytes
    return segment_bytes(rounded) - nbytes


def rounding_slack(sizes: list[int] | np.ndarray, expandable: bool = False) -> int:
    """Reserved beyond the requests of live tensors of these sizes in bytes, from the rounding
    rules alone (what the rules force whatever the order; the tracer feeds its live blocks)."""
    return int(sum(own_segment_waste(int(n), expandable) for n in sizes))


#: Steps on several GPUs: the replay covers one stream, not the collectives' buckets and side
#: streams, so they keep the flat fractions fitted by tools/calibrate.py (before this table) to
#: the measured rows reporting max_memory_reserved or NVML used: 0.15 over 21 rows with default
#: segments, 0.16 over the two expandable-segment rows (ao-f8-1, titan-perf-1: torchtitan FSDP2 on
#: 8 × H100).
MULTI_GPU_FRACTION = 0.15
MULTI_GPU_FRACTION_EXPANDABLE = 0.16

#: the regimes' axes, in the order of their names ("eager/ckpt/16bit/mixed")
REGIME_AXES = (("fused", "eager"), ("nockpt", "ckpt"), ("16bit", "qlora"), ("mixed", "fp32"))


def regime_name(eager: bool, checkpointed: bool, quantised: bool, fp32: bool) -> str:
    """The cell of the slack table: attention kernel, checkpointing, quantised base, and
    whether the step computes in fp32 (one size class per activation) or in a mixed or 16-bit
    recipe (cast copies beside their sources)."""
    flags = (eager, checkpointed, quantised, fp32)
    return "/".join(axis[int(flag)] for axis, flag in zip(REGIME_AXES, flags, strict=True))


def regime_names() -> list[str]:
    return [
        regime_name(*(bool(i >> k & 1) for k in (3, 2, 1, 0))) for i in range(1 << len(REGIME_AXES))
    ]


@cache
def _slack_table() -> dict[str, dict[str, float]]:
    data = json.loads(SLACK_TABLE.read_text(encoding="utf-8"))
    return {"default": data["default"], "expandable": data["expandable"]}


def fragmentation_fraction(expandable: np.ndarray, regime: tuple[np.ndarray, ...]) -> np.ndarray:
    """The fraction of the step's allocated-and-freed bytes held as cached blocks that later
    requests could not reuse, per configuration (data/allocator_slack.json); ``regime``: the
    four boolean axes of :func:`batch_regime`."""
    table = _slack_table()
    out = np.zeros(np.broadcast(expandable, *regime).shape)
    for i in range(1 << len(REGIME_AXES)):
        flags = tuple(bool(i >> k & 1) for k in (3, 2, 1, 0))
        name = regime_name(*flags)
        cell = np.logical_and.reduce(
            [axis == flag for axis, flag in zip(regime, flags, strict=True)]
        )
        out = np.where(
            cell, np.where(expandable, table["expandable"][name], table["default"][name]), out
        )
    return out


def batch_regime(batch: object) -> tuple[np.ndarray, ...]:
    """(eager attention, fully checkpointed, quantised base, fp32 compute) of a ConfigBatch."""
    b: Any = batch
    return (
        np.asarray(b.attention == CODE["attention"]["eager"]),
        # selective recompute (the attention core) is not in the replayed sweep: as without
        np.asarray(b.checkpointing == CODE["checkpointing"]["full"]),
        np.asarray(b.quant != CODE["quant"]["none"]),
        np.asarray(b.compute_bytes >= 4),
    )


def allocator_slack(
    dynamic: np.ndarray | float,
    batch: object,
    other_stream_cached: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Reserved − allocated at one moment of the step, bytes:

    fragmentation       fraction(regime, segment mode) × the bytes allocated and freed during
                         the step (it includes the segments' round-up, which needs each tensor's
                         size: ``rounding_slack`` gives it where the sizes are known, e.g. the
                         tracer)
    + other streams      blocks cached by another stream's pool and not alive now (they cannot
                         serve this stream's requests, expandable or not)
    """
    b: Any = batch
    expandable = np.asarray(b.expandable)
    fraction = np.where(
        b.gpus > 1,
        np.where(expandable, MULTI_GPU_FRACTION_EXPANDABLE, MULTI_GPU_FRACTION),
        fragmentation_fraction(expandable, batch_regime(batch)),
    )
    return fraction * dynamic + other_stream_cached


def slack_basis(cfg: object) -> tuple[float, str]:
    """The fraction of the step's allocated-and-freed bytes one configuration's slack is, and
    where it comes from, in words (what explain says under its table)."""
    from constraints.config_batch import ConfigBatch

    c: Any = cfg
    batch = ConfigBatch.from_configs([c])
    expandable = bool(batch.expandable[0])
    segments = "expandable segments" if expandable else "default segments"
    if c.gpus > 1:
        fraction = MULTI_GPU_FRACTION_EXPANDABLE if expandable else MULTI_GPU_FRACTION
        return fraction, f"{segments}; steps on several GPUs keep the flat fraction"
    regime = batch_regime(batch)
    fraction = float(fragmentation_fraction(np.array([expandable]), regime)[0])
    eager, checkpointed, quantised, fp32 = (bool(r[0]) for r in regime)
    words = [
        "eager attention" if eager else "fused attention",
        "full checkpointing" if checkpointed else "no full checkpointing",
        "quantised base" if quantised else "16-bit base",
        "fp32 compute" if fp32 else "mixed precision",
        segments,
    ]
    return fraction, ", ".join(words) + "; fitted to PyTorch's caching allocator replayed"
