"""A replay of PyTorch's CUDA caching allocator over one stream's allocations and frees.

Given the ordered ``malloc(key, nbytes)`` / ``free(key)`` calls of a step (the fake-tensor trace
records them), the replay does what ``DeviceCachingAllocator`` does with them and reports what
``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` would read, and the segments held
when reserved memory peaked. No maintained package replays the allocator (torch's ``MemTracker``
only rounds to 512 B; awslabs' 2023 ``TorchCachingAllocatorSimulator`` has no small pool, no
round-up options and no expandable segments), so the rules are coded here from the source:

pytorch ``c10/cuda/CUDACachingAllocator.cpp`` at 001074d (``malloc``, ``round_size``,
``get_pool``, ``get_allocation_size``, ``get_free_block``, ``should_split``,
``alloc_found_block``, ``free_block``, ``try_merge_blocks``, ``alloc_block``,
``release_available_cached_blocks``, ``release_cached_blocks``, ``release_blocks``,
``find_expandable_block``, ``map_block``, ``unmap_block``, ``ExpandableSegment::map/unmap``),
with ``max_non_split_rounding`` (PR #136174, torch 2.6) and the ``roundup_power2_divisions``
list parsing of ``c10/core/AllocatorConfig.cpp`` (torch 2.9 on); these rules are unchanged
through torch 2.13, the release fitplan's stack pins.

What is not replayed: other streams (a block is reused only by its allocation stream; NCCL and
FSDP's side streams hold pools of their own, ``constraints/backend_memory.py``), ``record_stream``
events, CUDA-graph private pools, ``garbage_collection_threshold`` (only active after
``set_per_process_memory_fraction``) and free-memory callbacks. cudaMalloc addresses are taken
in increasing order; they only break ties between free blocks of equal size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sortedcontainers import SortedList

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
#: the address range an expandable segment reserves, a multiple of its page; large enough that
#: the replay never runs out of addresses (torch reserves 1 1/8 of the card's memory)
EXPANDABLE_ADDRESS_SPACE = 1 << 48


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


# ---- blocks, pools, segments -----------------------------------------------------------------


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


class CachingAllocator:
    """``DeviceCachingAllocator`` on one stream, without a GPU: ``malloc``/``free`` by key."""

    def __init__(self, settings: AllocatorSettings | None = None) -> None:
        self.settings = settings or AllocatorSettings()
        self.small = Pool(is_small=True)
        self.large = Pool(is_small=False)
        self.live: dict[object, Block] = {}
        self.allocated = 0
        self.requested = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_requested = 0
        self.peak_reserved = 0
        self.device_allocs = 0
        self.alloc_retries = 0
        self._segments_at_peak: tuple[SegmentView, ...] = ()
        self._peak_pending = False
        self._next_address = 1 << 40
        self._segment_heads: dict[int, Block] = {}
        self._expandable_heads: dict[bool, Block] = {}

    # ---- public calls ------------------------------------------------------------------------

    def malloc(self, key: object, nbytes: int) -> Block:
        """Allocate ``nbytes`` for ``key`` (a 0-byte tensor holds no block in torch: skip it)."""
        if key in self.live:
            raise ValueError(f"{key!r} is already allocated")
        settings = self.settings
        size = round_size(nbytes, settings.divisions(nbytes))
        pool = self.small if size <= SMALL_REQUEST_MAX_BYTES else self.large
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, size)
        if block is None and self._release_available_cached_blocks(pool, size):
            block = self._alloc_block(pool, size)
        if block is None and self._release_cached_blocks():
            block = self._alloc_block(pool, size, retry=True)
        if block is None:
            raise OutOfMemory(size, self.reserved, self.allocated)
        block = self._alloc_found_block(block, size, nbytes, self._should_split(block, size))
        self.live[key] = block
        if self._peak_pending:  # the segments as the request that raised the peak left them
            self._segments_at_peak = self.segments()
            self._peak_pending = False
        return block

    def free(self, key: object) -> None:
        block = self.live.pop(key)
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        self._free_block(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: release every whole free segment (expandable: unmap
        every fully free page)."""
        self._release_cached_blocks()

    def reset_peak(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()``: peaks restart from the current values."""
        self.peak_allocated, self.peak_requested = self.allocated, self.requested
        self.peak_reserved = self.reserved
        self._segments_at_peak = self.segments()

    def segments(self) -> tuple[SegmentView, ...]:
        """The segments now held, largest first (``torch.cuda.memory_snapshot``'s segments)."""
        views = []
        heads = list(self._segment_heads.values())
        for head in self._expandable_heads.values():
            # an expandable segment is reported as one segment per contiguous mapped range
            b: Block | None = head
            while b is not None:
                if b.mapped and (b.prev is None or not b.prev.mapped):
                    heads.append(b)
                b = b.next
        for head in heads:
            size = allocated = largest = 0
            b = head
            while b is not None and b.mapped:
                size += b.size
                if b.allocated:
                    allocated += b.size
                else:
                    largest = max(largest, b.size)
                b = b.next
            views.append(SegmentView(size, allocated, head.pool.is_small, head.expandable, largest))
        return tuple(sorted(views, key=lambda v: -v.size))

    def result(self, oom_at: int | None = None, oom_request: int = 0) -> ReplayResult:
        return ReplayResult(
            peak_allocated=self.peak_allocated,
            peak_reserved=self.peak_reserved,
            peak_requested=self.peak_requested,
            allocated=self.allocated,
            reserved=self.reserved,
            segments_at_peak=self._segments_at_peak,
            device_allocs=self.device_allocs,
            alloc_retries=self.alloc_retries,
            oom_at=oom_at,
            oom_request=oom_request,
        )

    # ---- get_free_block / should_split / alloc_found_block -----------------------------------

    def _get_free_block(self, pool: Pool, size: int) -> Block | None:
        blocks = pool.blocks
        i = blocks.bisect_key_left((size, -1))
        if i == len(blocks):
            return None
        block: Block = blocks[i]
        if block.expandable:
            # best fit counts a block by what it can grow to (its size and the unmapped range
            # after it): a smaller grown size further on in size order is taken instead
            def grown(b: Block) -> int:
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

            while (
                blocks[i].expandable
                and i + 1 < len(blocks)
                and grown(blocks[i + 1]) < grown(blocks[i])
            ):
                i += 1
            block = blocks[i]
        limit = self.settings.split_limit
        if size < limit <= block.size:
            return None  # an oversize block is not handed to a smaller request
        if size >= limit and block.size >= size + self.settings.max_non_split_rounding:
            return None
        del blocks[i]
        return block

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.pool.is_small or self.settings.expandable_segments:
            return remaining >= MIN_BLOCK_BYTES
        return size < self.settings.split_limit and remaining > SMALL_REQUEST_MAX_BYTES

    def _alloc_found_block(self, block: Block, size: int, nbytes: int, split: bool) -> Block:
        if split:
            remaining = block
            block = Block(
                block.ptr,
                size,
                remaining.pool,
                remaining.segment,
                expandable=remaining.expandable,
                prev=remaining.prev,
                next=remaining,
            )
            if block.prev is not None:
                block.prev.next = block
            if self._segment_heads.get(remaining.segment) is remaining:
                self._segment_heads[remaining.segment] = block
            if self._expandable_heads.get(remaining.pool.is_small) is remaining:
                self._expandable_heads[remaining.pool.is_small] = block
            remaining.prev = block
            remaining.ptr += size
            remaining.size -= size
            remaining.pool.blocks.add(remaining)
        block.allocated = True
        block.requested = nbytes
        self.allocated += block.size
        self.requested += nbytes
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        self.peak_requested = max(self.peak_requested, self.requested)
        return block

    # ---- free_block / try_merge_blocks -------------------------------------------------------

    def _free_block(self, block: Block) -> None:
        pool = block.pool
        for neighbour in (block.prev, block.next):
            self._try_merge(block, neighbour, pool)
        pool.blocks.add(block)

    def _try_merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:  # [src dst]
            (pool.blocks if src.mapped else pool.unmapped).remove(src)
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            self._replace_head(src, dst)
        else:  # [dst src]
            (pool.blocks if src.mapped else pool.unmapped).remove(src)
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _replace_head(self, old: Block, new: Block) -> None:
        if self._segment_heads.get(old.segment) is old:
            self._segment_heads[old.segment] = new
        if self._expandable_heads.get(old.pool.is_small) is old:
            self._expandable_heads[old.pool.is_small] = new

    # ---- alloc_block: cudaMalloc, or mapping pages of the expandable segment -----------------

    def _fits(self, nbytes: int) -> bool:
        capacity = self.settings.capacity
        return capacity is None or self.reserved + nbytes <= capacity

    def _grow(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.device_allocs += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
            self._peak_pending = True

    def _alloc_block(self, pool: Pool, size: int, retry: bool = False) -> Block | None:
        if retry:
            self.alloc_retries += 1
        if self.settings.expandable_segments:
            return self._try_allocate_expandable_block(pool, size)
        segment_bytes = allocation_size(size)
        if not self._fits(segment_bytes):
            return None
        block = Block(self._next_address, segment_bytes, pool, segment=self._next_address)
        self._next_address += segment_bytes + LARGE_ROUND_BYTES
        self._segment_heads[block.segment] = block
        self._grow(segment_bytes)
        return block

    def _find_expandable_block(self, pool: Pool, size: int) -> Block:
        """The lowest-address run of free and unmapped blocks with room for ``size``."""

        def allocatable(b: Block | None) -> bool:
            return b is not None and not b.allocated

        def has_room(b: Block | None) -> bool:
            room = 0
            while room < size and b is not None and allocatable(b):
                room += b.size
                b = b.next
            return room >= size

        for candidate in pool.unmapped:
            c = candidate.prev if allocatable(candidate.prev) else candidate
            if has_room(c):
                return c
        base = self._next_address
        self._next_address += EXPANDABLE_ADDRESS_SPACE
        block = Block(
            base, EXPANDABLE_ADDRESS_SPACE, pool, segment=base, mapped=False, expandable=True
        )
        pool.unmapped.add(block)
        self._expandable_heads.setdefault(pool.is_small, block)
        return block

    def _map_block(self, to_map: Block, nbytes: int) -> bool:
        """ExpandableSegment::map: whole pages from the block's (page-aligned) start."""
        pool = to_map.pool
        mapped = -(-nbytes // pool.page) * pool.page
        if not self._fits(mapped):
            return False
        pool.unmapped.remove(to_map)
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(
                to_map.ptr + mapped,
                to_map.size - mapped,
                pool,
                to_map.segment,
                mapped=False,
                expandable=True,
                prev=to_map,
                next=to_map.next,
            )
            if to_map.next is not None:
                to_map.next.prev = rest
            to_map.next = rest
            pool.unmapped.add(rest)
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.blocks.add(to_map)
        self._grow(mapped)
        return True

    def _try_allocate_expandable_block(self, pool: Pool, size: int) -> Block | None:
        candidate = self._find_expandable_block(pool, size)
        if not candidate.mapped and not self._map_block(candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:
            following = candidate.next
            assert following is not None
            if not self._map_block(following, min(size - candidate.size, following.size)):
                return None
            candidate = following
        pool.blocks.remove(candidate)
        return candidate

    # ---- releasing cached memory before an OOM -----------------------------------------------

    def _release_block(self, block: Block) -> None:
        block.pool.blocks.remove(block)
        del self._segment_heads[block.segment]
        self.reserved -= block.size

    def _release_available_cached_blocks(self, pool: Pool, size: int) -> bool:
        """With max_split_size set: free one oversize cached segment big enough, or several of
        the largest until enough bytes are returned."""
        limit = self.settings.max_split_size
        if limit is None:
            return False
        target = max(size, limit)
        blocks = pool.blocks
        i = blocks.bisect_key_left((target, -1))
        if i < len(blocks):
            self._release_block(blocks[i])
            return True
        released = 0
        i -= 1
        while i >= 0 and released < target and blocks[i].size >= limit:
            released += blocks[i].size
            self._release_block(blocks[i])
            i -= 1
        return released >= target

    def _release_cached_blocks(self) -> bool:
        for pool in (self.large, self.small):
            to_unmap = []
            for block in list(pool.blocks):
                if block.expandable:
                    to_unmap.append(block)
                elif not block.is_split:
                    self._release_block(block)
            for block in to_unmap:
                self._unmap_block(block)
        return True

    def _unmap_block(self, block: Block) -> None:
        """ExpandableSegment::unmap: the whole pages inside a free block are returned."""
        pool = block.pool
        base = block.segment
        begin = base + -(-(block.ptr - base) // pool.page) * pool.page
        end = base + (block.ptr + block.size - base) // pool.page * pool.page
        if begin >= end:
            return
        pool.blocks.remove(block)
        if begin > block.ptr:
            before = Block(
                block.ptr,
                begin - block.ptr,
                pool,
                base,
                expandable=True,
                prev=block.prev,
                next=block,
            )
            if block.prev is not None:
                block.prev.next = before
            self._replace_head(block, before)
            block.prev = before
            pool.blocks.add(before)
        if block.ptr + block.size > end:
            after = Block(
                end,
                block.ptr + block.size - end,
                pool,
                base,
                expandable=True,
                prev=block,
                next=block.next,
            )
            if block.next is not None:
                block.next.prev = after
            block.next = after
            pool.blocks.add(after)
        block.ptr, block.size, block.mapped = begin, end - begin, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.unmapped.add(block)
        self.reserved -= end - begin


Event = tuple[str, object, int]


def replay(
    events: Iterable[Event] | Sequence[Event], settings: AllocatorSettings | None = None
) -> ReplayResult:
    """Replay ``("alloc", key, nbytes)`` and ``("free", key, 0)`` events in order; an
    ``("empty_cache", None, 0)`` event empties the cache and ``("reset_peak", None, 0)`` restarts
    the peaks (the second step of a trace is the steady state). An OOM stops the replay and is
    reported as ``oom_at``, the index of the failing event."""
    allocator = CachingAllocator(settings)
    for index, (op, key, nbytes) in enumerate(events):
        if op == "alloc":
            if nbytes <= 0:
                continue
            try:
                allocator.malloc(key, nbytes)
            except OutOfMemory as oom:
                return allocator.result(oom_at=index, oom_request=oom.size)
        elif op == "free":
            if key in allocator.live:
                allocator.free(key)
        elif op == "empty_cache":
            allocator.empty_cache()
        elif op == "reset_peak":
            allocator.reset_peak()
        else:
            raise ValueError(f"unknown allocator event {op!r}")
    return allocator.result()
