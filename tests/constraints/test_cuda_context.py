"""data/cuda_context.csv: every row sourced and well formed; the figures agree with what the
sources say in words (MiB figures re-derived here from the sources' own numbers)."""

from __future__ import annotations

from constraints.cuda_context import KINDS, LOADING, context_figures, training_context
from constraints.gpus import resolve_gpu

MiB = 2**20


def test_rows_are_sourced_and_well_formed() -> None:
    rows = context_figures()
    assert len(rows) >= 5
    for r in rows:
        assert r.source.strip() and r.measured_as.strip()
        assert r.kind in KINDS and r.module_loading in LOADING
        assert 64 * MiB < r.context_bytes < 2048 * MiB


def test_figures_match_the_sources() -> None:
    by_gpu = {(r.gpu, r.module_loading): r.context_bytes for r in context_figures()}
    assert round(by_gpu[("T4", "lazy")] / MiB) == 141  # issue 10: "about 141 MiB"
    assert by_gpu[("GeForce RTX 3090", "lazy")] == 256 * MiB  # InvokeAI #9413: "flat 256 MiB"
    assert by_gpu[("RTX 6000 Ada", "lazy")] == 426 * MiB  # unsloth-zoo #1053 table
    # pytorch PR #86509 prints the bytes: 287,047,680 lazy vs 666,632,192 eager
    assert by_gpu[("not stated", "lazy")] == 287_047_680
    assert by_gpu[("not stated", "eager")] == 666_632_192


def test_lazy_loading_is_smaller_than_eager_in_the_same_source() -> None:
    rows = [r for r in context_figures() if r.source.startswith("pytorch/pytorch PR #86509")]
    lazy = next(r for r in rows if r.module_loading == "lazy")
    eager = next(r for r in rows if r.module_loading == "eager")
    assert lazy.context_bytes < eager.context_bytes


def test_training_context_by_generation() -> None:
    assert training_context(resolve_gpu("t4").sm) == 147_849_216
    assert training_context(resolve_gpu("t4").sm, cuda_major=11) is None
    assert training_context(resolve_gpu("h100").sm) is None  # no public training figure yet


def test_every_memory_total_uses_the_gpus_context() -> None:
    """Training, inference, serving and the usable share all hold the GPU's context: the T4's
    measured training figure (141 MiB, issue 10's runs), the 0.5 GiB default on an H100 (no
    public training figure)."""
    from constraints.breakdown import explain, usable_bytes
    from constraints.config import TrainConfig
    from constraints.cuda_context import context_bytes
    from constraints.inference import inference_memory
    from constraints.models import catalog_model
    from constraints.serving import serving_memory

    spec = catalog_model("qwen2.5-0.5b")
    cfg = TrainConfig(method="lora", micro_batch=1, seq_len=512)
    for name, expected in (("t4", 147_849_216), ("h100", 512 * MiB)):
        gpu = resolve_gpu(name)
        assert context_bytes(gpu) == expected
        e = explain(spec, cfg, gpu)
        assert e.breakdown.parts["cuda_context"] == expected
        assert usable_bytes(gpu)[1] == expected
        assert e.verdict.needed == e.breakdown.total - expected  # one GPU, no paged states
        assert inference_memory(spec, gpu).cuda_context == expected
        assert serving_memory(spec, gpu).cuda_context == expected
    assert context_bytes(None) == 512 * MiB
