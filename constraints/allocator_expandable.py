"""Expandable segments (``expandable_segments:True``) in the caching-allocator replay.

One growing virtual range per pool: physical pages (20 MiB large pool, 2 MiB small) are mapped at
the lowest address with room and only whole free pages are unmapped (pytorch
``c10/cuda/CUDACachingAllocator.cpp``: ``find_expandable_block``, ``map_block``,
``try_allocate_expandable_block``, ``unmap_block``, ``ExpandableSegment::map/unmap``).
:class:`constraints.allocator_replay.CachingAllocator` takes these methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from constraints.allocator_blocks import EXPANDABLE_ADDRESS_SPACE, Block, Pool


class ExpandableSegments(ABC):
    """The expandable-segment half of the allocator; the other half (CachingAllocator) supplies
    the bookkeeping hooks below."""

    _next_address: int
    _expandable_heads: dict[bool, Block]

    @abstractmethod
    def _fits(self, nbytes: int) -> bool: ...

    @abstractmethod
    def _grow(self, nbytes: int) -> None: ...

    @abstractmethod
    def _try_merge(self, dst: Block, src: Block | None, pool: Pool) -> int: ...

    @abstractmethod
    def _replace_head(self, old: Block, new: Block) -> None: ...

    @abstractmethod
    def _shrink(self, nbytes: int) -> None: ...

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
            )
            rest.splice(to_map, to_map.next)
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
            before = Block(block.ptr, begin - block.ptr, pool, base, expandable=True)
            before.splice(block.prev, block)
            self._replace_head(block, before)
            pool.blocks.add(before)
        if block.ptr + block.size > end:
            after = Block(end, block.ptr + block.size - end, pool, base, expandable=True)
            after.splice(block, block.next)
            pool.blocks.add(after)
        block.ptr, block.size, block.mapped = begin, end - begin, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.unmapped.add(block)
        self._shrink(end - begin)
