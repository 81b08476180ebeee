"""Llama 4's text model held to the step tracer: transformers' Llama4TextMoe runs every expert on
every token (``hidden.repeat(num_experts)`` then a batched matmul), which the analytic model reads
as ``ModelSpec.experts_see_all_tokens``; with top-k routing it would count a sixteenth of the
expert activations. The traced figure is the independent ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import benchmark

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
#: the trace sample's goal for one row (tests/truth/test_trace_sweep_sample.py)
WORST_GOAL = 0.05


def _sweep():
    return benchmark("trace_sweep")


@pytest.mark.parametrize(
    "knobs",
    [
        {"attention": "sdpa", "checkpointing": "none", "method": "lora", "lora_rank": 16,
         "lora_targets": "all-linear"},
        {"attention": "eager", "checkpointing": "full", "method": "lora", "lora_rank": 16,
         "lora_targets": "attention"},
    ],
)  # fmt: skip
def test_llama4_text_matches_the_trace(knobs: dict) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from transformers import AutoConfig

    from constraints.config import TrainConfig
    from constraints.gpus import resolve_gpu
    from constraints.models import spec_from_hf_config
    from searcher.truth.hf_build import quiet_transformers
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    hf = AutoConfig.for_model("llama4_text").to_dict()  # Scout's text model
    spec = spec_from_hf_config(hf, id="llama4-scout-text")
    assert spec.experts_run_per_token == spec.num_experts == 16
    cfg = {**knobs, "micro_batch": 1, "optimizer": "adamw", "recipe": "bf16-torch", "seq_len": 512}
    traced = trace_step(spec, TrainConfig(**cfg), hf_config_dict=hf).peak_bytes
    analytic, _phase = _sweep().analytic_as_traced(spec, cfg, resolve_gpu("h100"))
    assert abs(analytic / traced - 1) <= WORST_GOAL
