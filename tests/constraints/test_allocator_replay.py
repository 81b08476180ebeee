"""The caching-allocator replay against the allocator's stated behaviour.

Each expected figure follows by hand from ``c10/cuda/CUDACachingAllocator.cpp`` (the rule is named
on each test) or is copied from PyTorch's own test of segment counts and reserved bytes
(``test/test_cuda.py · test_graph_memory_stats_and_use_result_after_destroy_graph``).
"""

from __future__ import annotations

import pytest

from constraints.allocator_replay import (
    AllocatorSettings,
    CachingAllocator,
    OutOfMemory,
    allocation_size,
    replay,
    round_size,
)
from constraints.errors import FitplanError

KiB, MiB = 1 << 10, 1 << 20

# PyTorch's constants, as its test spells them
kSmallSize = 1048576
kSmallBuffer = 2097152
kLargeBuffer = 20971520
kMinLargeAlloc = 10485760
kRoundLarge = 2097152


def alloc(key: object, n: int) -> tuple[str, object, int]:
    return ("alloc", key, n)


def free(key: object) -> tuple[str, object, int]:
    return ("free", key, 0)


# ---- round_size / get_allocation_size --------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, 512), (511, 512), (512, 512), (513, 1024), (4 * MiB + 1, 4 * MiB + 512)],
)
def test_requests_round_up_to_512_bytes(n: int, expected: int) -> None:
    assert round_size(n) == expected


def test_power2_divisions_round_to_the_next_step_between_powers_of_two() -> None:
    # the source's own example (roundup_power2_next_division): 1200 with 4 divisions of
    # [1024, 2048) rounds to 1280; round_size applies it only above 512 × divisions
    assert round_size(1200, 4) == 1536  # 1200 ≤ 2048: plain 512-byte rounding
    assert round_size(5 * MiB + 1, 4) == 6 * MiB  # steps of 1 MiB in [4, 8) MiB
    assert round_size(8 * MiB, 4) == 8 * MiB  # powers of two stay
    assert round_size(5 * MiB + 1, 1) == 5 * MiB + 512  # 1 division is ignored


@pytest.mark.parametrize(
    ("size", "segment"),
    [
        (512, kSmallBuffer),
        (kSmallSize, kSmallBuffer),
        (kSmallSize + 512, kLargeBuffer),
        (kMinLargeAlloc - 512, kLargeBuffer),
        (kMinLargeAlloc, kMinLargeAlloc),
        (kMinLargeAlloc + 512, 12 * MiB),
    ],
)
def test_segment_sizes(size: int, segment: int) -> None:
    assert allocation_size(size) == segment


# ---- PyTorch's own segment and reserved-byte expectations ------------------------------------

ELEM = 4
TORCH_CASES = [
    # numel, cudaMallocs during capture, bytes reserved, bytes reserved once only b is left
    (512 // ELEM, 1, kSmallBuffer, kSmallBuffer),
    (kSmallSize // ELEM, 2, 2 * kSmallBuffer, kSmallBuffer),
    ((kSmallSize + 512) // ELEM, 1, kLargeBuffer, kLargeBuffer),
    ((kMinLargeAlloc - 512) // ELEM, 2, 2 * kLargeBuffer, kLargeBuffer),
    (
        (kMinLargeAlloc + 512) // ELEM,
        3,
        3 * (kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge)),
        kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge),
    ),
]


def capture_events(nbytes: int) -> list[tuple[str, object, int]]:
    """``b = a.clone(); for _ in range(5): b = b.clone() + 1`` into an empty pool: the clone's
    temporary is freed after the add, then the old b when the name is rebound."""
    events = [alloc("b0", nbytes)]
    for i in range(1, 6):
        events += [alloc(f"t{i}", nbytes), alloc(f"b{i}", nbytes), free(f"t{i}"), free(f"b{i - 1}")]
    return events


@pytest.mark.parametrize(("numel", "mallocs", "reserved", "reserved_after"), TORCH_CASES)
def test_torch_graph_pool_cases(
    numel: int, mallocs: int, reserved: int, reserved_after: int
) -> None:
    nbytes = numel * ELEM
    allocator = CachingAllocator()
    for _op, key, n in capture_events(nbytes):
        if n:
            allocator.malloc(key, n)
        else:
            allocator.free(key)
    assert allocator.device_allocs == mallocs
    assert allocator.reserved == reserved
    allocator.empty_cache()  # the graph deleted: b is the only live block
    assert allocator.reserved == reserved_after
    assert len(allocator.segments()) == 1


@pytest.mark.parametrize(("numel", "mallocs", "reserved", "reserved_after"), TORCH_CASES)
def test_torch_graph_pool_cases_with_expandable_segments(
    numel: int, mallocs: int, reserved: int, reserved_after: int
) -> None:
    # the same test's expandable-segments exceptions: cases 3 and 4 reserve 2 × kLargeBuffer
    # during capture (three ~10 MiB blocks in 20 MiB pages); once only b is left, case 3 keeps
    # both pages (b straddles them) and case 4 one
    nbytes = numel * ELEM
    index = [c[0] for c in TORCH_CASES].index(numel)
    expected = {3: 2 * kLargeBuffer, 4: 2 * kLargeBuffer}.get(index, reserved)
    expected_after = {3: 2 * kLargeBuffer, 4: kLargeBuffer}.get(index, reserved_after)
    allocator = CachingAllocator(AllocatorSettings(expandable_segments=True))
    for _op, key, n in capture_events(nbytes):
        if n:
            allocator.malloc(key, n)
        else:
            allocator.free(key)
    assert allocator.reserved == expected
    allocator.empty_cache()
    assert allocator.reserved == expected_after


# ---- the pools and splitting -----------------------------------------------------------------


def test_small_requests_share_two_mib_segments() -> None:
    # kSmallBuffer: four 512 KiB blocks fill one 2 MiB segment; the fifth needs a second
    r = replay([alloc(i, 512 * KiB) for i in range(5)])
    assert r.peak_reserved == 2 * kSmallBuffer
    assert r.peak_allocated == 5 * 512 * KiB
    assert r.device_allocs == 2


def test_small_pool_splits_down_to_512_bytes() -> None:
    # should_split, small pool: a remainder of 512 B is still split off and reused
    r = replay([alloc("a", MiB), alloc("b", MiB - 512), alloc("c", 512)])
    assert r.peak_reserved == 2 * MiB and r.device_allocs == 1


def test_medium_requests_are_carved_from_20_mib_segments() -> None:
    # kLargeBuffer: 8 + 8 MiB from one 20 MiB segment (remainder 4 MiB > 1 MiB is split);
    # the third 8 MiB needs another segment
    r = replay([alloc(i, 8 * MiB) for i in range(3)])
    assert r.peak_reserved == 2 * kLargeBuffer
    assert r.peak_allocated == 24 * MiB


def test_a_large_remainder_of_one_mib_or_less_is_not_split() -> None:
    # should_split, large pool: remaining > kSmallSize only; 19.5 MiB gets its own 20 MiB
    # segment and the 0.5 MiB left stays part of the block: allocated counts it
    r = replay([alloc("a", 19 * MiB + 512 * KiB)])
    assert r.peak_reserved == 20 * MiB
    assert r.peak_allocated == 20 * MiB
    assert r.peak_requested == 19 * MiB + 512 * KiB


def test_best_fit_takes_the_smallest_block_that_fits() -> None:
    # get_free_block: lower_bound by size; the 12 MiB cached block serves 11 MiB, not the 30
    events = [
        alloc("x", 30 * MiB),
        alloc("y", 12 * MiB),
        free("x"),
        free("y"),
        alloc("z", 11 * MiB),
    ]
    allocator = CachingAllocator()
    for op, key, n in events:
        allocator.malloc(key, n) if op == "alloc" else allocator.free(key)
    assert allocator.live["z"].size == 12 * MiB  # remainder 1 MiB is not > 1 MiB: not split
    assert allocator.reserved == 42 * MiB


def test_freed_neighbours_coalesce() -> None:
    # free_block / try_merge_blocks: two freed 4 MiB blocks and the segment's 12 MiB rest merge
    # back into one 20 MiB block, which then serves a 16 MiB request without a new segment
    events = [alloc("a", 4 * MiB), alloc("b", 4 * MiB), free("a"), free("b"), alloc("c", 16 * MiB)]
    r = replay(events)
    assert r.peak_reserved == 20 * MiB and r.device_allocs == 1


def test_blocks_in_different_segments_do_not_merge() -> None:
    # segments never merge: two freed 12 MiB segments cannot serve 20 MiB
    events = [
        alloc("a", 12 * MiB),
        alloc("b", 12 * MiB),
        free("a"),
        free("b"),
        alloc("c", 20 * MiB),
    ]
    r = replay(events)
    assert r.peak_reserved == 44 * MiB and r.device_allocs == 3


def test_a_slightly_larger_request_cannot_reuse_the_cached_block() -> None:
    # the expandable-segments note's motivating case: 12 MiB freed, 14 MiB asked: a new segment
    r = replay([alloc("x", 12 * MiB), free("x"), alloc("y", 14 * MiB)])
    assert r.peak_reserved == 26 * MiB
    assert r.slack == 26 * MiB - 14 * MiB


# ---- max_split_size / max_non_split_rounding -------------------------------------------------


def test_oversize_blocks_are_not_split_for_smaller_requests() -> None:
    # get_free_block: size < max_split_size and block ≥ max_split_size → not used
    events = [alloc("x", 64 * MiB), free("x"), alloc("y", 30 * MiB)]
    assert replay(events).peak_reserved == 64 * MiB  # unlimited: the 64 MiB block is split
    limited = AllocatorSettings(max_split_size=40 * MiB)
    assert replay(events, limited).peak_reserved == 94 * MiB


def test_oversize_blocks_serve_requests_within_the_non_split_rounding() -> None:
    limited = AllocatorSettings(max_split_size=40 * MiB)
    # 64 MiB serves 50 MiB whole (64 < 50 + 20 MiB), counted whole in allocated
    r = replay([alloc("x", 64 * MiB), free("x"), alloc("y", 50 * MiB)], limited)
    assert r.peak_reserved == 64 * MiB and r.allocated == 64 * MiB
    # but not 42 MiB (64 ≥ 42 + 20): a segment of its own
    r = replay([alloc("x", 64 * MiB), free("x"), alloc("y", 42 * MiB)], limited)
    assert r.peak_reserved == 106 * MiB
    wider = AllocatorSettings(max_split_size=40 * MiB, max_non_split_rounding=32 * MiB)
    assert (
        replay([alloc("x", 64 * MiB), free("x"), alloc("y", 42 * MiB)], wider).peak_reserved
        == 64 * MiB
    )


# ---- out of memory: release the cache, retry -------------------------------------------------


def test_cached_segments_are_released_before_an_oom() -> None:
    # alloc_block fails, release_cached_blocks frees the whole free 12 MiB segment, retry works
    settings = AllocatorSettings(capacity=24 * MiB)
    r = replay([alloc("x", 12 * MiB), free("x"), alloc("y", 14 * MiB)], settings)
    assert r.oom_at is None
    assert r.reserved == 14 * MiB and r.alloc_retries == 1
    assert r.peak_reserved == 14 * MiB


def test_a_segment_with_a_live_block_is_never_released() -> None:
    # the 20 MiB segment holds b: only unsplit free blocks are released, so 14 MiB more OOMs
    settings = AllocatorSettings(capacity=30 * MiB)
    events = [alloc("a", 4 * MiB), alloc("b", 4 * MiB), free("a"), alloc("c", 14 * MiB)]
    r = replay(events, settings)
    assert r.oom_at == 3
    with pytest.raises(OutOfMemory):
        allocator = CachingAllocator(settings)
        for op, key, n in events:
            allocator.malloc(key, n) if op == "alloc" else allocator.free(key)


def test_max_split_size_releases_oversize_blocks_first() -> None:
    # release_available_cached_blocks: with max_split_size set, one cached oversize block is
    # freed and alloc_block retried without counting a retry
    settings = AllocatorSettings(max_split_size=40 * MiB, capacity=100 * MiB)
    events = [alloc("x", 64 * MiB), free("x"), alloc("y", 42 * MiB)]
    r = replay(events, settings)
    assert r.oom_at is None and r.reserved == 42 * MiB and r.alloc_retries == 0


# ---- expandable segments ---------------------------------------------------------------------


def test_expandable_segments_map_20_mib_pages() -> None:
    # one growing segment per pool: 30 MiB maps two pages; 8 MiB then fits the 10 MiB left
    expandable = AllocatorSettings(expandable_segments=True)
    r = replay([alloc("a", 30 * MiB), alloc("b", 8 * MiB)], expandable)
    assert r.peak_reserved == 40 * MiB and r.peak_allocated == 38 * MiB
    # the same requests as segments of their own: 30 + 20 MiB
    assert replay([alloc("a", 30 * MiB), alloc("b", 8 * MiB)]).peak_reserved == 50 * MiB


def test_expandable_segments_reuse_a_freed_range_for_a_larger_request() -> None:
    # the note's case: 12 MiB freed, 14 MiB asked: the mapped 20 MiB page serves it
    expandable = AllocatorSettings(expandable_segments=True)
    r = replay([alloc("x", 12 * MiB), free("x"), alloc("y", 14 * MiB)], expandable)
    assert r.peak_reserved == 20 * MiB and r.device_allocs == 1


def test_expandable_small_pool_maps_2_mib_pages() -> None:
    expandable = AllocatorSettings(expandable_segments=True)
    r = replay([alloc(i, MiB) for i in range(3)], expandable)
    assert r.peak_reserved == 4 * MiB


def test_expandable_empty_cache_unmaps_only_whole_free_pages() -> None:
    # unmap_block: a 12 MiB block freed at the front of a page that still holds a live block
    # returns nothing; freeing the other returns the page
    expandable = AllocatorSettings(expandable_segments=True)
    allocator = CachingAllocator(expandable)
    allocator.malloc("a", 12 * MiB)
    allocator.malloc("b", 4 * MiB)
    allocator.free("a")
    allocator.empty_cache()
    assert allocator.reserved == 20 * MiB
    allocator.free("b")
    allocator.empty_cache()
    assert allocator.reserved == 0


# ---- peaks, snapshots, settings --------------------------------------------------------------


def test_reset_peak_restarts_from_the_current_state() -> None:
    events = [alloc("a", 30 * MiB), free("a"), ("reset_peak", None, 0), alloc("b", 4 * MiB)]
    r = replay(events)
    assert r.peak_allocated == 4 * MiB  # the 30 MiB of the first step is gone
    assert r.peak_reserved == 30 * MiB  # reserved stays cached


def test_segments_at_the_peak() -> None:
    r = replay([alloc("a", 30 * MiB), alloc("b", 512), alloc("c", 8 * MiB)])
    sizes = [(s.size, s.allocated, s.is_small) for s in r.segments_at_peak]
    assert sizes == [(30 * MiB, 30 * MiB, False), (20 * MiB, 8 * MiB, False), (2 * MiB, 512, True)]


def test_alloc_conf_is_parsed_as_torch_reads_it() -> None:
    s = AllocatorSettings.from_conf(
        "expandable_segments:True,max_split_size_mb:512,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
    )
    assert s.expandable_segments and s.max_split_size == 512 * MiB
    # intervals are powers of two in MiB from 1 MiB: the first entry also covers those below
    assert s.roundup_power2_divisions == (1,) * 9 + (2, 4) + (8,) * 5
    assert s.divisions(300 * MiB) == 1 and s.divisions(600 * MiB) == 2 and s.divisions(4 << 30) == 8
    assert AllocatorSettings.from_conf("roundup_power2_divisions:4").divisions(1) == 4


@pytest.mark.parametrize(
    "conf",
    [
        "expandable_segments:yes",
        "max_split_size_mb:10",
        "roundup_power2_divisions:3",
        "foo:1",
        "max_split_size_mb",
    ],
)
def test_bad_alloc_conf_is_refused(conf: str) -> None:
    with pytest.raises(FitplanError, match="PYTORCH_CUDA_ALLOC_CONF"):
        AllocatorSettings.from_conf(conf)


def test_the_replay_never_reserves_less_than_it_allocates() -> None:
    import random

    rng = random.Random(7)
    for expandable in (False, True):
        allocator = CachingAllocator(AllocatorSettings(expandable_segments=expandable))
        live: list[int] = []
        for i in range(3000):
            if live and rng.random() < 0.45:
                allocator.free(live.pop(rng.randrange(len(live))))
            else:
                allocator.malloc(
                    i,
                    rng.choice(
                        [
                            rng.randrange(1, 4096),
                            rng.randrange(1, 3 * MiB),
                            rng.randrange(1, 64 * MiB),
                        ]
                    ),
                )
                live.append(i)
            assert allocator.reserved >= allocator.allocated
            held = sum(s.size for s in allocator.segments())
            assert held == allocator.reserved
        for key in live:
            allocator.free(key)
        assert allocator.allocated == 0
        allocator.empty_cache()
        assert allocator.reserved == 0


@pytest.mark.parametrize(
    "conf",
    [
        "",
        "expandable_segments:True",
        "max_split_size_mb:512,max_non_split_rounding_mb:64",
        "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
    ],
)
def test_settings_say_themselves_as_an_alloc_conf(conf: str) -> None:
    settings = AllocatorSettings.from_conf(conf)
    assert AllocatorSettings.from_conf(settings.conf()) == settings
