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

from collections.abc import Iterable, Sequence

from constraints.allocator import LARGE_ROUND_BYTES, MIN_BLOCK_BYTES, SMALL_REQUEST_MAX_BYTES
from constraints.allocator_blocks import Block, OutOfMemory, Pool, ReplayResult, SegmentView
from constraints.allocator_expandable import ExpandableSegments
from constraints.allocator_settings import AllocatorSettings, allocation_size, round_size

__all__ = [
    "AllocatorSettings",
    "CachingAllocator",
    "OutOfMemory",
    "ReplayResult",
    "allocation_size",
    "replay",
    "round_size",
]


class CachingAllocator(ExpandableSegments):
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
                block.ptr, size, remaining.pool, remaining.segment, expandable=remaining.expandable
            )
            block.splice(remaining.prev, remaining)
            self._replace_head(remaining, block)
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

    def _shrink(self, nbytes: int) -> None:
        self.reserved -= nbytes


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
