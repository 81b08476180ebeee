"""The step tracer's shortcuts change no traced byte.

The seeded first step (zero gradients, then the real optimizer step, instead of a first forward
and backward) is held to two real steps, segment by segment and block by block; where a trainable
parameter gets no gradient the tracer falls back to real steps. Sweep rows stored in
benchmarks/results/trace_sweep*.csv (traced at commit ed8a042 with two real steps per depth and
the tracker before its fast path) are re-traced and must come out identical: the independent
golden figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from constraints.config import TrainConfig

pytestmark = pytest.mark.heavy

TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())
DEEPER = {**TINY, "num_hidden_layers": 3}


@pytest.mark.parametrize(
    "kw",
    [
        {"recipe": "fp32", "attention": "eager"},
        {"recipe": "bf16-master", "optimizer": "lion", "checkpointing": "full"},
        {"method": "lora", "recipe": "amp", "optimizer": "sgd-momentum", "attention": "sdpa"},
        {"method": "lora", "recipe": "bf16-torch", "optimizer": "adafactor", "lora_rank": 4},
        {"method": "qlora", "quant": "nf4-dq", "optimizer": "paged-adamw-8bit"},
        {"method": "qlora", "quant": "nf4", "attention": "flash", "checkpointing": "full"},
    ],
)
def test_a_seeded_first_step_traces_what_a_real_one_does(kw: dict[str, Any]) -> None:
    from searcher.truth.step_trace import _run

    cfg = TrainConfig(**{"micro_batch": 2, "seq_len": 64, **kw})
    real = _run(DEEPER, cfg, "fused", 2, seeded=False)
    seeded = _run(DEEPER, cfg, "fused", 2, seeded=True)
    assert seeded.segments == real.segments
    assert seeded.largest == real.largest
    assert seeded.paged == real.paged


def test_an_unused_trainable_parameter_falls_back_to_real_steps(monkeypatch) -> None:
    """A parameter backward never reaches has no optimizer state after a real first step; a
    seeded one would give it some, so the tracer refuses the seed and runs real steps."""
    import torch

    from searcher.truth import step_trace

    original = step_trace.build

    def with_unused(cfg_dict: dict[str, Any], cfg: TrainConfig) -> Any:
        model, note = original(cfg_dict, cfg)
        model.register_parameter("unused", torch.nn.Parameter(torch.empty(4096, device="meta")))
        return model, note

    monkeypatch.setattr(step_trace, "build", with_unused)
    cfg = TrainConfig(micro_batch=2, seq_len=64, recipe="fp32")
    with pytest.raises(step_trace._UnusedParameters):
        step_trace._run(TINY, cfg, "fused", 2, seeded=True)
    real = step_trace._run(TINY, cfg, "fused", 2, seeded=False)
    assert step_trace._run_exact(TINY, cfg, "fused", 2).segments == real.segments


#: (model, config, traced bytes, moment, composition) from benchmarks/results/trace_sweep*.csv
STORED = [
    (
        "gpt2-medium",
        '{"attention": "flash", "checkpointing": "none", "lora_rank": 16, "lora_targets": '
        '"default", "method": "qlora", "micro_batch": 16, "optimizer": "adamw-8bit", "quant": '
        '"nf4", "recipe": "bf16-master", "seq_len": 2048}',
        95964939264,  # re-traced in trace_sweep.2.csv after c5b6ba5 (Conv1D quantised too)
        "backward",
        {"parameters": 387543040, "optimizer_state": 3219456, "activations": 75812057088,
         "logits_and_loss": 6587286016, "temporaries": 13174571520, "inputs": 262144},
    ),
    (
        "qwen2.5-1.5b",
        '{"attention": "flash", "checkpointing": "none", "lora_rank": 8, "lora_targets": '
        '"all-linear", "method": "lora", "micro_batch": 4, "optimizer": "paged-adamw-8bit", '
        '"recipe": "fp32", "seq_len": 4096}',
        119853725696,
        "backward",
        {"parameters": 6211787776, "optimizer_state": 19668992, "activations": 83750303744,
         "logits_and_loss": 9957278208, "temporaries": 19914555904, "inputs": 131072},
    ),
    (
        "falcon-7b",
        '{"attention": "eager", "checkpointing": "full", "method": "full", "micro_batch": 8, '
        '"optimizer": "lion", "recipe": "bf16-master", "seq_len": 256}',
        # re-traced after the Lion emulation became bitsandbytes' fused 32-bit kernel (no update
        # temporary: 98,086,042,624 before) and the master cast got per-layer segments
        97069313024,
        "optimizer step",
        {"parameters": 13843450880, "gradients": 165220352, "optimizer_state": 27686899712,
         "master_weights": 27686899712, "optimizer_transient": 27686825984, "inputs": 16384},
    ),
    (
        "phi-3-mini-4k",
        '{"attention": "flash", "checkpointing": "full", "method": "full", "micro_batch": 4, '
        '"optimizer": "adamw", "recipe": "bf16-master", "seq_len": 256}',
        68976542208,
        "optimizer step",
        {"parameters": 7642160128, "gradients": 197001216, "optimizer_state": 30568736256,
         "master_weights": 15284318208, "optimizer_transient": 15284318208, "inputs": 8192},
    ),
    (
        "gemma-2-2b",
        '{"attention": "eager", "checkpointing": "full", "lora_rank": 64, "lora_targets": '
        '"default", "method": "qlora", "micro_batch": 2, "optimizer": "adamw", "quant": "nf4", '
        '"recipe": "bf16-torch", "seq_len": 512}',
        8106798592,
        "backward",
        {"parameters": 3550131712, "optimizer_state": 102289408, "activations": 260064256,
         "logits_and_loss": 2097152512, "temporaries": 2097152512, "inputs": 8192},
    ),
]  # fmt: skip


@pytest.mark.parametrize("model,config,traced,moment,composition", STORED)
def test_stored_sweep_rows_trace_identically(
    model: str, config: str, traced: int, moment: str, composition: dict[str, int]
) -> None:
    from searcher.truth.hf_build import config_of
    from searcher.truth.step_trace import trace_step

    hf, spec = config_of(model)
    t = trace_step(spec, TrainConfig(**json.loads(config)), hf_config_dict=hf)
    assert t.peak_bytes == traced
    assert t.moment == moment
    assert {k: v for k, v in t.composition.items() if v} == composition
