"""Invariants of the memory model, checked over random configurations (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.lora_targets import PEFT_DEFAULT_TARGETS
from constraints.memory import memory_arrays
from constraints.models import catalog_model, raw_model

MODELS = [
    "gpt2",
    "llama-3.2-1b",
    "qwen2.5-0.5b",
    "mistral-7b-v0.1",
    "gemma-2-2b",
    "phi-3-mini-4k",
    "mixtral-8x7b",
    "opt-1.3b",
    "qwen3-30b-a3b",
    "deepseek-v3",
    "t5-small",
    "bert-base-uncased",
    "falcon-7b",
]
GPU = resolve_gpu("h100-sxm")
SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def configs(draw: st.DrawFn) -> tuple[str, TrainConfig]:
    model = draw(st.sampled_from(MODELS))
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    quant = draw(st.sampled_from(["nf4", "nf4-dq", "int8"])) if method == "qlora" else "none"
    zero = draw(st.sampled_from([0, 1, 2, 3]))
    offload = draw(st.sampled_from(["none", "optimizer"])) if zero else "none"
    opt = draw(
        st.sampled_from(
            ["adamw", "sgd", "sgd-momentum", "adafactor", "lion"]
            + ([] if offload != "none" else ["adamw-8bit", "paged-adamw-8bit"])
        )
    )
    accum = draw(st.integers(1, 8))
    # PEFT's own default exists only for the types in its mapping (elsewhere it is refused)
    targets = ["all-linear", "attention"]
    if catalog_model(model).family in PEFT_DEFAULT_TARGETS:
        targets.append("default")
    cfg = TrainConfig(
        method=method,
        quant=quant,
        lora_rank=draw(st.sampled_from([1, 4, 8, 16, 64, 256])),
        lora_targets=draw(st.sampled_from(targets)),
        lora_dropout=draw(st.sampled_from([0.0, 0.05])),
        recipe=draw(st.sampled_from(["fp32", "bf16-pure", "bf16-master", "amp", "bf16-torch"])),
        optimizer=opt,
        micro_batch=draw(st.integers(1, 16)),
        seq_len=draw(st.sampled_from([128, 512, 1024])),
        grad_accum=accum,
        checkpointing=draw(st.sampled_from(["none", "selective", "full"])),
        attention=draw(st.sampled_from(["flash", "sdpa", "eager"])),
        loss=draw(st.sampled_from(["standard", "chunked", "fused"])),
        zero=zero,
        offload=offload,
        dp=draw(st.sampled_from([1, 2, 8])),
    )
    return model, cfg


def _total(model: str, cfgs: list[TrainConfig], key: str = "total") -> np.ndarray:
    return memory_arrays(catalog_model(model), ConfigBatch.from_configs(cfgs), GPU)[key]


def _with(cfg: TrainConfig, **kw: object) -> TrainConfig:
    return TrainConfig(**{**cfg.model_dump(), **kw})


@SETTINGS
@given(configs(), st.integers(1, 8))
def test_memory_grows_with_micro_batch(mc: tuple[str, TrainConfig], k: int) -> None:
    model, cfg = mc
    a, b = _total(model, [cfg, _with(cfg, micro_batch=cfg.micro_batch + k)])
    assert b >= a


@SETTINGS
@given(configs(), st.sampled_from([1, 2, 4]))
def test_memory_grows_with_sequence_length(mc: tuple[str, TrainConfig], k: int) -> None:
    model, cfg = mc
    a, b = _total(model, [cfg, _with(cfg, seq_len=cfg.seq_len + 128 * k)])
    assert b >= a


@SETTINGS
@given(configs())
def test_memory_grows_with_lora_rank(mc: tuple[str, TrainConfig]) -> None:
    model, cfg = mc
    if cfg.method == "full":
        cfg = _with(cfg, method="lora")
    a, b = _total(model, [cfg, _with(cfg, lora_rank=cfg.lora_rank * 2)])
    assert b >= a


@SETTINGS
@given(st.floats(1e8, 7e10), st.floats(1e-5, 0.5), st.floats(1.01, 10))
def test_memory_grows_with_trainable_parameters(
    params: float, fraction: float, growth: float
) -> None:
    small = raw_model(params, trainable_params=params * fraction / growth)
    large = raw_model(params, trainable_params=params * fraction)
    cfg = TrainConfig(method="lora", recipe="bf16-pure")
    a = memory_arrays(small, ConfigBatch.from_configs([cfg]), GPU)["total"][0]
    b = memory_arrays(large, ConfigBatch.from_configs([cfg]), GPU)["total"][0]
    assert b >= a


@SETTINGS
@given(configs())
def test_checkpointing_never_increases_activation_memory(mc: tuple[str, TrainConfig]) -> None:
    model, cfg = mc
    cfgs = [_with(cfg, checkpointing=c) for c in ("none", "selective", "full")]
    arr = memory_arrays(catalog_model(model), ConfigBatch.from_configs(cfgs), GPU)
    peak_act = arr["activations_saved_all_layers"] + arr["activations_recompute"]
    none, selective, full = peak_act
    assert full <= selective <= none


@pytest.mark.parametrize("model", ["t5-small", "t5-base", "flan-t5-xl"])
@pytest.mark.parametrize("seq_len", [512, 2048, 4096])
def test_t5_full_checkpointing_keeps_no_more_than_selective(model: str, seq_len: int) -> None:
    """Issue 14: T5's position bias was charged once per checkpointed layer (it is one tensor per
    stack, shared by its layers), so full checkpointing kept more than selective at batch 1."""
    cfgs = [
        TrainConfig(checkpointing=c, micro_batch=1, seq_len=seq_len, attention="eager")
        for c in ("none", "selective", "full")
    ]
    arr = memory_arrays(catalog_model(model), ConfigBatch.from_configs(cfgs), GPU)
    none, selective, full = arr["activations_saved_all_layers"] + arr["activations_recompute"]
    assert full <= selective <= none
    # allocated, not reserved: recomputing every layer in the backward fragments the caching
    # allocator more than a step without (constraints/allocator.py, replayed), so where full
    # checkpointing saves little over selective its reserved peak may be the higher one
    allocated = arr["total"] - arr["allocator_slack"]
    assert allocated[2] <= allocated[1] <= allocated[0]


@SETTINGS
@given(configs(), st.sampled_from([2, 4, 8, 64]))
def test_zero_stages_never_increase_memory(mc: tuple[str, TrainConfig], dp: int) -> None:
    model, cfg = mc
    cfg = _with(
        cfg,
        dp=dp,
        offload="none",
        optimizer="adamw" if cfg.optimizer == "paged-adamw-8bit" else cfg.optimizer,
    )
    # one backend for all four stages: DeepSpeed's stage 0 with bf16 is BF16_Optimizer, which
    # already partitions the master and states and keeps an fp32 gradient buffer, so stage 0 vs 1
    # is compared under the generic (DDP-style) stage 0 of the ZeRO paper's table
    cfg = _with(cfg, backend="deepspeed")
    totals = _total(model, [_with(cfg, zero=z) for z in (0, 1, 2, 3)])
    static = _total(model, [_with(cfg, zero=z) for z in (0, 1, 2, 3)], "static")
    assert totals[3] <= totals[2] <= totals[1]
    assert static[3] <= static[2] <= static[1]
    generic0 = _total(model, [_with(cfg, zero=0, backend="ddp")])
    assert totals[1] <= generic0[0]


@SETTINGS
@given(st.lists(configs(), min_size=2, max_size=12))
def test_vectorised_and_scalar_evaluation_agree(items: list[tuple[str, TrainConfig]]) -> None:
    model = items[0][0]
    own_default = catalog_model(model).family in PEFT_DEFAULT_TARGETS
    cfgs = [
        c
        if own_default or c.lora_targets != "default"
        else c.model_copy(update={"lora_targets": "attention"})
        for _, c in items
    ]
    batch = memory_arrays(catalog_model(model), ConfigBatch.from_configs(cfgs), GPU)
    for i, cfg in enumerate(cfgs):
        one = memory_arrays(catalog_model(model), ConfigBatch.from_configs([cfg]), GPU)
        for key in (
            "total",
            "weights",
            "gradients",
            "optimizer",
            "activations",
            "overhead",
            "static",
        ):
            assert np.isclose(batch[key][i], one[key][0], rtol=1e-12), key


def test_terms_sum_to_total() -> None:
    cfg = TrainConfig(method="lora", micro_batch=4, seq_len=1024)
    arr = _total("llama-3.2-1b", [cfg], "total")
    parts = sum(
        _total("llama-3.2-1b", [cfg], k)
        for k in ("weights", "gradients", "optimizer", "activations", "overhead")
    )
    assert np.isclose(arr, parts).all()
