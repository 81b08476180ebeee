"""The caching allocator's settings (``PYTORCH_CUDA_ALLOC_CONF``) and its request arithmetic.

From pytorch ``c10/cuda/CUDACachingAllocator.cpp`` (``round_size``,
``roundup_power2_next_division``, ``get_allocation_size``) and ``c10/core/AllocatorConfig.cpp``
(the option parsing of torch 2.9 on); constraints/allocator_replay.py replays the allocator with
them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from constraints.allocator import (
    LARGE_ROUND_BYTES,
    LARGE_SEGMENT_BYTES,
    MIN_BLOCK_BYTES,
    OWN_SEGMENT_MIN_BYTES,
    SMALL_REQUEST_MAX_BYTES,
    SMALL_SEGMENT_BYTES,
)
from constraints.errors import FitplanError
from constraints.units import MiB

#: kRoundUpPowerOfTwoIntervals: roundup_power2_divisions holds one value per power of two from
#: 1 MiB to 32 GiB (CUDAAllocatorConfig::roundup_power2_divisions)
POWER2_INTERVALS = 16


@dataclass(frozen=True)
class AllocatorSettings:
    """``PYTORCH_CUDA_ALLOC_CONF`` as the allocator reads it, and the bytes cudaMalloc can get.

    capacity: bytes the allocator can hold at once (the card's memory less the CUDA context and
    whatever else holds memory); None = unbounded, so nothing is ever released to retry.
    """

    expandable_segments: bool = False
    #: max_split_size_mb in bytes; None = unlimited (the default)
    max_split_size: int | None = None
    #: max_non_split_rounding_mb in bytes (default kLargeBuffer)
    max_non_split_rounding: int = LARGE_SEGMENT_BYTES
    #: one division count per power-of-two interval from 1 MiB; () = 512-byte rounding only
    roundup_power2_divisions: tuple[int, ...] = ()
    capacity: int | None = None

    @property
    def split_limit(self) -> int:
        return self.max_split_size if self.max_split_size is not None else 1 << 64

    def divisions(self, nbytes: int) -> int:
        """roundup_power2_divisions for a request: interval ⌊log2 n⌋ − 20, clamped to 0..15."""
        if not self.roundup_power2_divisions:
            return 0
        index = min(max(nbytes.bit_length() - 1 - 20, 0), POWER2_INTERVALS - 1)
        return self.roundup_power2_divisions[index]

    def conf(self) -> str:
        """The settings as ``PYTORCH_CUDA_ALLOC_CONF`` would say them ("" = the defaults)."""
        parts = []
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.max_split_size is not None:
            parts.append(f"max_split_size_mb:{self.max_split_size // MiB}")
        if self.max_non_split_rounding != LARGE_SEGMENT_BYTES:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding // MiB}")
        if any(self.roundup_power2_divisions):
            table = ",".join(f"{1 << i}:{d}" for i, d in enumerate(self.roundup_power2_divisions))
            parts.append(f"roundup_power2_divisions:[{table}]")
        return ",".join(parts)

    @classmethod
    def from_conf(cls, conf: str, capacity: int | None = None) -> AllocatorSettings:
        """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string, e.g.
        ``expandable_segments:True,max_split_size_mb:512,roundup_power2_divisions:[256:1,>:4]``."""
        settings: dict[str, object] = {}
        for key, value in _conf_items(conf):
            if key == "expandable_segments":
                if value not in ("True", "False"):
                    raise _conf_error(conf, "expandable_segments takes True or False")
                settings["expandable_segments"] = value == "True"
            elif key == "max_split_size_mb":
                mb = _conf_int(conf, value)
                if mb <= LARGE_SEGMENT_BYTES // MiB:
                    raise _conf_error(conf, "max_split_size_mb must be more than 20")
                settings["max_split_size"] = mb * MiB
            elif key == "max_non_split_rounding_mb":
                mb = _conf_int(conf, value)
                if mb < LARGE_SEGMENT_BYTES // MiB:
                    raise _conf_error(conf, "max_non_split_rounding_mb must be at least 20")
                settings["max_non_split_rounding"] = mb * MiB
            elif key == "roundup_power2_divisions":
                settings["roundup_power2_divisions"] = _parse_divisions(conf, value)
            elif key in (
                "garbage_collection_threshold",
                "backend",
                "release_lock_on_cudamalloc",
                "pinned_use_cuda_host_register",
                "pinned_num_register_threads",
                "pinned_use_background_threads",
                "graph_capture_record_stream_reuse",
            ):
                if key == "backend" and value != "native":
                    raise _conf_error(conf, "only the native allocator is replayed")
            else:
                raise _conf_error(conf, f"unknown option {key!r}")
        return cls(capacity=capacity, **settings)  # type: ignore[arg-type]


def _conf_error(conf: str, what: str) -> FitplanError:
    return FitplanError(
        f"PYTORCH_CUDA_ALLOC_CONF {conf!r}: {what}",
        "write options as key:value separated by commas, e.g. "
        "expandable_segments:True,max_split_size_mb:512",
    )


def _conf_items(conf: str) -> list[tuple[str, str]]:
    items = []
    for part in re.split(r",(?![^\[]*\])", conf.strip()):
        if not part.strip():
            continue
        key, sep, value = part.partition(":")
        if not sep:
            raise _conf_error(conf, f"{part!r} has no value")
        items.append((key.strip(), value.strip()))
    return items


def _conf_int(conf: str, value: str) -> int:
    if not value.isdigit():
        raise _conf_error(conf, f"{value!r} is not a whole number")
    return int(value)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _parse_divisions(conf: str, value: str) -> tuple[int, ...]:
    """``4`` (every interval) or ``[256:1,512:2,>:8]`` (interval in MiB: divisions; the first
    entry also covers the intervals below it, ``>`` those above the last)."""
    if not value.startswith("["):
        n = _conf_int(conf, value)
        if not _power_of_two(n):
            raise _conf_error(conf, "roundup_power2_divisions must be a power of two")
        return (n,) * POWER2_INTERVALS
    if not value.endswith("]"):
        raise _conf_error(conf, "roundup_power2_divisions list must end with ]")
    table = [0] * POWER2_INTERVALS
    first, last = True, 0
    for entry in filter(None, (e.strip() for e in value[1:-1].split(","))):
        interval, _, divisions = entry.partition(":")
        n = _conf_int(conf, divisions)
        if n != 0 and not _power_of_two(n):
            raise _conf_error(conf, "roundup_power2_divisions must be 0 or a power of two")
        if interval.strip() == ">":
            table[last + 1 :] = [n] * (POWER2_INTERVALS - last - 1)
            continue
        mb = _conf_int(conf, interval.strip())
        if not _power_of_two(mb):
            raise _conf_error(conf, "roundup_power2_divisions intervals must be powers of two")
        index = min(mb.bit_length() - 1, POWER2_INTERVALS - 1)
        if first:
            table[:index] = [n] * index
            first = False
        table[index] = n
        last = index
    return tuple(table)


# ---- the allocator's arithmetic --------------------------------------------------------------


def round_size(nbytes: int, divisions: int = 0) -> int:
    """``round_size``: 512-byte multiples, or the next of ``divisions`` steps between two powers
    of two when divisions > 1 and the request exceeds 512 × divisions."""
    if nbytes < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    if divisions > 1 and nbytes > MIN_BLOCK_BYTES * divisions:
        if _power_of_two(nbytes):
            return nbytes
        floor = 1 << (nbytes.bit_length() - 1)
        step = floor >> (divisions.bit_length() - 1)
        if step == 0:
            return floor << 1
        low = nbytes & ~(step - 1)
        return nbytes if low == nbytes else low + step
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def allocation_size(size: int) -> int:
    """``get_allocation_size``: bytes cudaMalloc'ed for a rounded request no cached block fits."""
    if size <= SMALL_REQUEST_MAX_BYTES:
        return SMALL_SEGMENT_BYTES
    if size < OWN_SEGMENT_MIN_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-size // LARGE_ROUND_BYTES) * LARGE_ROUND_BYTES
