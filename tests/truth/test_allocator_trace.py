"""The traced step feeds the caching-allocator replay (issue 34, item 3).

The tracker's ordered allocations and frees are what the replay runs; these tests hold the
bookkeeping between them (what the replay receives is what the tracker counted), the depth
extrapolation of the reserved peak to a replay of every layer, and that the allocator's settings
reach the replay from the command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constraints.allocator_replay import AllocatorSettings, replay
from constraints.config import TrainConfig
from searcher.cli import main

pytestmark = pytest.mark.heavy

TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())
SIX = {**TINY, "num_hidden_layers": 6}
#: large enough that a layer's tensors outweigh the 2 MiB small segments
WIDER = {
    **TINY,
    "hidden_size": 256,
    "intermediate_size": 688,
    "vocab_size": 4096,
    "max_position_embeddings": 1024,
    "num_hidden_layers": 8,
}


def test_the_replay_receives_every_allocation_the_tracker_counted() -> None:
    from searcher.truth.step_trace import _run

    cfg = TrainConfig(micro_batch=2, seq_len=64, recipe="bf16-torch")
    raw = _run(SIX, cfg, "fused", 2, seeded=False, allocator=AllocatorSettings())
    assert raw.replayed is not None
    peak = max(p for p, _m, _c in raw.segments.values())
    # the replay's blocks are the tracker's 512-byte-rounded storages, large blocks whose
    # remainder is 1 MiB or less counted whole: never less, and at most that 1 MiB per block more
    assert raw.replayed.peak_allocated >= peak
    assert raw.replayed.peak_reserved >= raw.replayed.peak_allocated
    assert raw.replayed.allocated >= 0 and raw.replayed.oom_at is None


def test_the_tracker_logs_balanced_events() -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from searcher.truth.alloc_tracker import make_tracker

    tracker = make_tracker()
    with FakeTensorMode(), tracker:
        a = torch.empty(3 << 20, dtype=torch.uint8)
        b = a + 1
        del a
        tracker.reset_peak()
        c = torch.empty(100)
        del b, c
    ops = [op for op, _k, _n in tracker.events]
    assert ops == ["alloc", "alloc", "free", "reset_peak", "alloc", "free", "free"]
    assert [n for op, _k, n in tracker.events if op == "alloc"] == [3 << 20, 3 << 20, 400]
    r = replay(tracker.events)
    assert r.allocated == 0
    # one 20 MiB large segment holds both 3 MiB blocks; the 400 B tensor takes a 2 MiB small one
    assert r.peak_reserved == 22 << 20
    assert r.peak_allocated == (3 << 20) + 512  # from reset_peak on: b, still alive, and c


@pytest.mark.parametrize("method", ["full", "lora"])
def test_reserved_extrapolated_from_two_depths_is_near_the_replay_of_every_layer(
    method: str,
) -> None:
    from constraints.models import spec_from_hf_config
    from searcher.truth.step_trace import trace_step

    spec = spec_from_hf_config(WIDER, id="wider", name="wider")
    cfg = TrainConfig(micro_batch=2, seq_len=512, recipe="bf16-torch", method=method)
    settings = AllocatorSettings()
    fast = trace_step(spec, cfg, hf_config_dict=WIDER, allocator=settings)
    full = trace_step(spec, cfg, hf_config_dict=WIDER, allocator=settings, full_depth=True)
    assert fast.traced_layers == (3, 4) and full.traced_layers == (8,)
    assert fast.peak_bytes == full.peak_bytes  # the allocated peak extrapolates exactly
    assert fast.peak_reserved_bytes is not None and full.peak_reserved_bytes is not None
    # the bound --fast's help states
    assert fast.peak_reserved_bytes == pytest.approx(full.peak_reserved_bytes, rel=0.07)
    assert fast.peak_reserved_bytes >= fast.peak_bytes


def test_the_allocator_flags_reach_the_replay(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**WIDER, "num_hidden_layers": 3}))
    args = [
        "trace-step",
        "--model",
        str(config),
        "--seq-len",
        "512",
        "--gpu",
        "a100-80gb",
        "--json",
    ]
    reserved = {}
    for extra in ([], ["--expandable-segments"], ["--max-split-size-mb", "64"]):
        assert main([*args, *extra]) == 0
        traced = json.loads(capsys.readouterr().out)["traced"]
        reserved[traced["allocator"]] = traced["peak_reserved_bytes"]
    assert set(reserved) == {"", "expandable_segments:True", "max_split_size_mb:64"}
    assert all(v and v > 0 for v in reserved.values())
    # expandable segments map 20 MiB pages: no per-request segment round-up or 20 MiB slivers
    assert reserved["expandable_segments:True"] != reserved[""]


@pytest.mark.parametrize("value", ["20", "0", "big"])
def test_max_split_size_at_or_below_20_mib_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace-step", "--model", "llama-3.2-1b", "--max-split-size-mb", value]) == 2
    err = capsys.readouterr().err
    assert "above 20" in err and "Traceback" not in err
