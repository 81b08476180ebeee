"""The caching allocator's blocks, pools and what a replay reports (constraints/allocator_replay.py).

``Block`` and ``BlockPool`` of pytorch ``c10/cuda/CUDACachingAllocator.cpp``: free blocks are
ordered by (size, address) (``BlockComparatorSize``), unmapped ranges of expandable segments by
address (``BlockComparatorAddress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sortedcontainers import SortedList

from constraints.allocator import LARGE_SEGMENT_BYTES, SMALL_SEGMENT_BYTES

#: the address range an expandable segment reserves, a multiple of its page; large enough that
#: the replay never runs out of addresses (torch reserves 1 1/8 of the card's memory)
EXPANDABLE_ADDRESS_SPACE = 1 << 48


@dataclass(eq=False)
class Block:
    """A range of one segment: allocated to a tensor, cached free, or (expandable) unmapped."""

    ptr: int
    size: int
    pool: Pool
    segment: int
    allocated: bool = False
    mapped: bool = True
    requested: int = 0
    prev: Block | None = None
    next: Block | None = None
    expandable: bool = False

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: Block | None, after: Block | None) -> None:
        """Link this block between ``before`` and ``after`` of its segment (``Block::splice``)."""
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


def _size_order(b: Block) -> tuple[int, int]:
    return (b.size, b.ptr)


def _address_order(b: Block) -> int:
    return b.ptr


@dataclass(eq=False)
class Pool:
    """A BlockPool: the free blocks of the small (≤ 1 MiB) or the large pool, by (size, address);
    with expandable segments also the unmapped ranges, by address."""

    is_small: bool
    blocks: SortedList = field(default_factory=lambda: SortedList(key=_size_order))
    unmapped: SortedList = field(default_factory=lambda: SortedList(key=_address_order))

    @property
    def page(self) -> int:
        """The expandable segment's mapping unit: kSmallBuffer or kLargeBuffer."""
        return SMALL_SEGMENT_BYTES if self.is_small else LARGE_SEGMENT_BYTES


@dataclass(frozen=True)
class SegmentView:
    """One segment (a cudaMalloc, or one mapped range of an expandable segment) at a moment."""

    size: int
    allocated: int
    is_small: bool
    expandable: bool
    #: the largest free block: what a request can still get without a new segment
    largest_free: int


@dataclass(frozen=True)
class ReplayResult:
    """What torch's memory statistics would read after the replayed calls, in bytes."""

    #: max_memory_allocated: block bytes (512-byte rounding, unsplit blocks counted whole)
    peak_allocated: int
    #: max_memory_reserved: segment bytes cudaMalloc'ed (expandable: pages mapped)
    peak_reserved: int
    #: the requested bytes at the moment of peak_allocated (what the tensors' nbytes add to)
    peak_requested: int
    allocated: int
    reserved: int
    #: the segments held when reserved memory last rose to its peak, largest first
    segments_at_peak: tuple[SegmentView, ...]
    #: cudaMalloc calls (expandable: page mappings) and retries after releasing cached blocks
    device_allocs: int
    alloc_retries: int
    #: index of the malloc that found no memory even after releasing every cached block, and
    #: the bytes it asked for (rounded)
    oom_at: int | None = None
    oom_request: int = 0

    @property
    def slack(self) -> int:
        """Reserved − allocated at the peaks: what nvidia-smi shows beyond the tensors' blocks."""
        return self.peak_reserved - self.peak_allocated


class OutOfMemory(Exception):
    """The replayed malloc found no cached block and no capacity left after releasing the cache."""

    def __init__(self, size: int, reserved: int, allocated: int) -> None:
        super().__init__(
            f"tried to allocate {size} B with {reserved} B reserved, {allocated} B allocated"
        )
        self.size = size
