"""The caching allocator's rules (constraints/allocator.py) and the slack the memory model adds.

Golden values are worked by hand from the rules in c10/cuda/CUDACachingAllocator.cpp (quoted in
the module docstring) and, for roundup_power2_divisions, from the example in PyTorch's CUDA
semantics notes ("1200 ... with 4 divisions ... will be rounded to 1280").
"""

from __future__ import annotations

import pytest

from constraints import allocator as A
from constraints.breakdown import breakdown_of
from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.units import MiB


@pytest.mark.parametrize(
    ("nbytes", "rounded"),
    [(0, 0), (1, 512), (512, 512), (513, 1024), (3 * 1024 * 1024 + 1, 3 * MiB + 512)],
)
def test_requests_round_up_to_512_bytes(nbytes: int, rounded: int) -> None:
    assert A.round_request(nbytes) == rounded


def test_power2_divisions_follow_the_documented_example() -> None:
    # the notes' example in MiB: 1200 lies between 1024 and 2048, quarter steps of 256
    assert A.round_request(1200 * MiB, power2_divisions=4) == 1280 * MiB
    assert A.round_request(1024 * MiB, power2_divisions=4) == 1024 * MiB  # a power of two
    assert A.round_request(1280 * MiB, power2_divisions=4) == 1280 * MiB  # on a step
    # below 512 B × divisions the plain 512-byte rounding applies
    assert A.round_request(1200, power2_divisions=4) == 1536


@pytest.mark.parametrize(
    ("asked", "segment"),
    [
        (512, 2 * MiB),  # small pool
        (1 * MiB, 2 * MiB),  # the largest small request
        (1 * MiB + 512, 20 * MiB),  # large, carved from a 20 MiB segment
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # its own segment, already a multiple of 2 MiB
        (10 * MiB + 512, 12 * MiB),  # rounded up to 2 MiB
    ],
)
def test_segment_sizes(asked: int, segment: int) -> None:
    assert A.segment_bytes(asked) == segment


def test_own_segment_waste() -> None:
    assert A.own_segment_waste(11 * MiB) == 1 * MiB
    assert A.own_segment_waste(11 * MiB, expandable=True) == 0
    assert A.own_segment_waste(4 * MiB) == 0  # shares a 20 MiB segment: not a per-tensor waste
    # 11 MiB → a 12 MiB segment; 13 MiB + 1 B → a 14 MiB segment; 1000 B → the small pool
    assert A.rounding_slack([11 * MiB, 13 * MiB + 1, 1000]) == 1 * MiB + (1 * MiB - 1)


def _fractions(monkeypatch: pytest.MonkeyPatch, default: float, expandable: float) -> None:
    names = A.regime_names()
    table = {
        "default": dict.fromkeys(names, default),
        "expandable": dict.fromkeys(names, expandable),
    }
    monkeypatch.setattr(A, "_slack_table", lambda: table)
    monkeypatch.setattr(A, "MULTI_GPU_FRACTION", default)
    monkeypatch.setattr(A, "MULTI_GPU_FRACTION_EXPANDABLE", expandable)


def _batch(**fields: object) -> object:
    from constraints.config_batch import ConfigBatch

    return ConfigBatch.from_configs([TrainConfig(**fields)])  # type: ignore[arg-type]


def test_slack_is_the_regime_fraction_plus_other_streams() -> None:
    table = A._slack_table()
    dyn = 10.0 * MiB
    plain = A.allocator_slack(dyn, _batch(attention="sdpa"), 3.0 * MiB)
    assert plain[0] == pytest.approx(table["default"]["fused/nockpt/16bit/mixed"] * dyn + 3 * MiB)
    both = _batch(attention="eager", checkpointing="full", expandable_segments=True)
    assert A.allocator_slack(dyn, both)[0] == pytest.approx(
        table["expandable"]["eager/ckpt/16bit/mixed"] * dyn
    )
    qlora = _batch(method="qlora", quant="nf4", checkpointing="full")
    assert A.allocator_slack(dyn, qlora)[0] == pytest.approx(
        table["default"]["fused/ckpt/qlora/mixed"] * dyn
    )
    fp32 = _batch(recipe="fp32", attention="sdpa")
    assert A.allocator_slack(dyn, fp32)[0] == pytest.approx(
        table["default"]["fused/nockpt/16bit/fp32"] * dyn
    )


def test_the_slack_table_covers_every_regime_and_names_its_source() -> None:
    import json

    data = json.loads(A.SLACK_TABLE.read_text())
    names = set(A.regime_names())
    for mode in ("default", "expandable"):
        assert set(data[mode]) == names
        assert all(0.0 <= v <= 1.0 for v in data[mode].values())
    assert "replay" in data["source"]
    # recomputing a checkpointed layer between gradients fragments more than a step without it
    for e in ("eager", "fused"):
        assert data["default"][f"{e}/ckpt/16bit/mixed"] > data["default"][f"{e}/nockpt/16bit/mixed"]


def _slack(**fields: object) -> int:
    spec = catalog_model("llama-3.1-8b")
    cfg = TrainConfig(method="full", micro_batch=1, seq_len=2048, **fields)  # type: ignore[arg-type]
    return breakdown_of(spec, [cfg], resolve_gpu("h100-sxm"))[0].allocator_slack


#: one Llama-3.1-8B decoder layer: q, o 4096² + k, v 4096 × 1024 + gate, up, down 4096 × 14336
#: + two norms of 4096 (Grattafiori et al. 2024, table 3 shapes)
LLAMA31_8B_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


def test_fsdp_caches_gather_buffers_on_another_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """FSDP2 all-gathers each unit on its copy-in stream: that pool holds one unit's 16-bit
    gathered parameters the compute stream cannot reuse (plus the small reduce-scatter output
    shard); a single GPU has no such pool. Fragmentation off, only that term is left."""
    _fractions(monkeypatch, 0.0, 0.0)
    assert _slack() == 0
    fsdp = _slack(zero=3, dp=8, backend="fsdp2")
    layer_bf16 = LLAMA31_8B_LAYER * 2
    assert layer_bf16 <= fsdp <= layer_bf16 * 1.5


def test_expandable_segments_use_their_own_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    _fractions(monkeypatch, 0.5, 0.0)
    assert _slack(expandable_segments=True) == 0
    assert _slack() > 0


def test_the_tracer_rounds_as_the_allocator() -> None:
    from searcher.truth.alloc_tracker import Block, Peak, cuda_rounded

    assert [cuda_rounded(n) for n in (0, 1, 512, 513)] == [0, 512, 512, 1024]
    peak = Peak(blocks=[Block(11 * MiB, "activations", "forward"), Block(512, "inputs", "setup")])
    assert peak.rounding_slack() == 1 * MiB
    assert peak.rounding_slack(expandable=True) == 0


def test_explain_says_what_the_slack_is_a_fraction_of(capsys: pytest.CaptureFixture[str]) -> None:
    """The line under explain's table: the regime's fraction (the table's), of the step's
    allocated-and-freed bytes, and why; several GPUs keep the flat fraction."""
    from searcher.cli import main

    table = A._slack_table()
    fraction, why = A.slack_basis(
        TrainConfig(attention="eager", checkpointing="full", recipe="bf16-torch")
    )
    assert fraction == table["default"]["eager/ckpt/16bit/mixed"]
    assert "eager attention" in why and "full checkpointing" in why and "replayed" in why
    flat, why = A.slack_basis(TrainConfig(zero=3, dp=8))
    assert flat == A.MULTI_GPU_FRACTION and "several GPUs" in why
    main(["explain", "--model", "llama-3.2-1b", "--gpu", "t4", "--checkpointing", "full"])
    out = capsys.readouterr().out
    expected = table["default"]["fused/ckpt/16bit/mixed"]
    assert f"allocator slack: {expected:.1%} of the" in " ".join(out.split())
