"""The flash-attention generation knob (TrainConfig.attention_kernel). Expected rates are typed
from the FlashAttention-2 paper's figures (Fig. 4, A100, causal, head dim 128, fwd+bwd: FA2 155
TFLOPS at 2k, 189 at 16k; Fig. 7, H100: FA2 265 at 2k) and the datasheet peaks (A100 312, H100
989), not from the code under test."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.throughput import throughput_arrays
from constraints.throughput_constants import ETA_ATTENTION

LLAMA_8B = catalog_model("llama-3.1-8b")  # 32 layers, 32 heads of 128


def _attention_tflops(gpu: str, seq: int, kernel: str, **kw: object) -> float:
    """fwd+bwd attention FLOPs per second the step time implies, as the papers count them
    (causal: half the scores; backward 2.5x forward), in TFLOPS."""
    cfg = TrainConfig(micro_batch=1, seq_len=seq, attention_kernel=kernel, **kw)  # type: ignore[arg-type]
    out = throughput_arrays(LLAMA_8B, ConfigBatch.from_configs([cfg]), resolve_gpu(gpu))
    fwd_flops = 4.0 * seq * seq * 0.5 * 32 * 128 * 32  # 4 s^2 d_q / 2 per layer, 32 layers
    return 3.5 * fwd_flops / float(out["attention_s"][0]) / 1e12


@pytest.mark.parametrize(("seq", "published"), [(2048, 155.0), (16384, 189.0)])
def test_fa2_runs_at_the_published_fa2_rate_on_a100(seq: int, published: float) -> None:
    assert _attention_tflops("a100-80gb", seq, "fa2") == pytest.approx(published, rel=1e-6)


def test_hopper_keeps_its_share_for_now() -> None:
    # Hopper FA2 stays at ETA_ATTENTION x FA2_HOPPER_SHARE (kernels.attention_generation_scale)
    assert _attention_tflops("h100-sxm", 2048, "fa2") == _attention_tflops("h100-sxm", 2048, "fa1")


def test_fa1_keeps_the_fitted_level_at_every_sequence_length() -> None:
    # unchanged from before the knob: ETA_ATTENTION of the dense peak, flat in sequence length
    for seq in (512, 2048, 16384):
        assert _attention_tflops("a100-80gb", seq, "fa1") == pytest.approx(312.0 * ETA_ATTENTION)


def test_fa2_never_exceeds_its_published_share_of_peak() -> None:
    for seq in (512, 1024, 4096, 8192, 16384, 65536):
        assert _attention_tflops("a100-80gb", seq, "fa2") <= 189.0 + 1e-6
        assert _attention_tflops("h100-sxm", seq, "fa2") <= 328.0 + 1e-6


def test_eager_attention_ignores_the_generation() -> None:
    fa1 = _attention_tflops("a100-80gb", 2048, "fa1", attention="eager")
    fa2 = _attention_tflops("a100-80gb", 2048, "fa2", attention="eager")
    assert fa1 == fa2


def test_batch_round_trips_the_knob() -> None:
    cfg = TrainConfig(attention_kernel="fa1")
    assert ConfigBatch.from_configs([cfg]).config(0).attention_kernel == "fa1"


def test_emitters_refuse_fa1() -> None:
    from searcher.emitters.knobs import refuse_speed_knobs

    refuse_speed_knobs("hf", TrainConfig())
    with pytest.raises(FitplanError, match="attention_kernel=fa1"):
        refuse_speed_knobs("hf", TrainConfig(attention_kernel="fa1"))


def test_llm_foundry_rows_run_fa1_and_the_rest_fa2() -> None:
    from searcher.truth.throughput_rows import attention_kernel_of

    assert attention_kernel_of({"source": "mosaicml/llm-foundry scripts/train/README"}) == "fa1"
    assert attention_kernel_of({"source": "pytorch/torchtune README.md"}) == "fa2"
    assert attention_kernel_of({"source": "QwenLM/Qwen README.md"}) == "fa2"


@pytest.mark.parametrize("gpu", ["b200", "v100-32gb"])
def test_off_ampere_the_generation_changes_nothing(gpu: str) -> None:
    # flash-attn 2 has no Volta kernel and its mma.sync code is not Blackwell's
    assert _attention_tflops(gpu, 4096, "fa2") == _attention_tflops(gpu, 4096, "fa1")


def test_the_a100_ratio_is_the_published_fa2_over_the_fitted_fa1_level() -> None:
    # rows differing only in the kernel: fa2/fa1 attention rate = (155/312) / ETA_ATTENTION at 2k
    ratio = _attention_tflops("a100-80gb", 2048, "fa2") / _attention_tflops(
        "a100-80gb", 2048, "fa1"
    )
    assert ratio == pytest.approx(155.0 / 312.0 / ETA_ATTENTION)
    assert ratio < 155.0 / 69.0  # below the published FA2/FA1 ratio, which would pass FA2's peak


def test_the_shipped_rows_carry_their_generation() -> None:
    # the llm-foundry benchmark table (216 rows) ran flash-attn 1.0.9; no other source ran FA1
    from searcher.truth.throughput_rows import load_throughput_cases

    cases = [c for c in load_throughput_cases() if c.config is not None]
    foundry = [c for c in cases if "llm-foundry" in c.source]
    assert len(foundry) == 216
    assert all(c.config.attention_kernel == "fa1" for c in foundry)  # type: ignore[union-attr]
    others = [c for c in cases if "llm-foundry" not in c.source]
    assert others and all(c.config.attention_kernel == "fa2" for c in others)  # type: ignore[union-attr]
