"""PEFT's lora_dropout > 0 launches one more kernel per adapted linear (peft/tuners/lora/layer.py
Linear.forward: ``lora_B(lora_A(dropout(x)))`` with ``nn.Dropout``; ``nn.Identity`` at p = 0)."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.speed import speed_of
from constraints.throughput_constants import CPU_OP_OVERHEAD_S, LAUNCH_PASSES_PER_FORWARD


def test_dropout_adds_one_launch_per_adapted_linear_per_pass() -> None:
    """A launch-bound step (0.5B model, one 128-token sequence on an H100): the host time grows
    by exactly one kernel per adapted linear per launch pass. Qwen2.5-0.5B, all-linear: 7 linears
    in each of its 24 layers (config.json: num_hidden_layers 24)."""
    spec, gpu = catalog_model("qwen2.5-0.5b"), resolve_gpu("h100-sxm")
    base = {"method": "lora", "micro_batch": 1, "seq_len": 128}
    plain = speed_of(spec, TrainConfig(**base), gpu)
    dropped = speed_of(spec, TrainConfig(**base, lora_dropout=0.1), gpu)
    assert plain.parts["launch_s"] > 0.0  # launch-bound, so the host's launches show
    extra = 7 * 24 * LAUNCH_PASSES_PER_FORWARD * CPU_OP_OVERHEAD_S
    assert dropped.step_time_s - plain.step_time_s == pytest.approx(extra, rel=1e-6)
