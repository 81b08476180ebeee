"""The analytic memory model held to the step tracer on a sample of the validation sweep.

Each configuration is traced here (fake tensors, two steps) and compared with the analytic
``peak_allocated``; the traced figure is the independent ground truth, nothing is copied from
the model under test. The sample is drawn from the sweep's space (benchmarks/trace_sweep.py) over
the regimes that meet the goal (docs/trace_sweep.md); a physics change that breaks agreement turns
this red. Heavy: ~30 traces.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from conftest import benchmark

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]
#: the goal of issue 10: median |error| ≤ 2 %, every row within 5 %
MEDIAN_GOAL = 0.02
WORST_GOAL = 0.05
SAMPLE = 30
#: small models of the families the tracer runs (fake tensors: cost is operators, not sizes)
MODELS = ("llama-3.2-1b", "qwen2.5-0.5b", "opt-1.3b")  # GPT-2 QLoRA at 256 tokens misses (-38 %)


def _sweep():
    return benchmark("trace_sweep")


#: the regimes fixed from traces, traced as they are (not capped): (family, model, config, the
#: error before its fix on the stored sweep traces, docs/trace_sweep.md)
FIXED_REGIMES = [
    # Falcon's returned attention weights: the forward moment under full checkpointing (-25.1 %)
    ("falcon", "falcon-7b", {"attention": "eager", "checkpointing": "full", "lora_rank": 64,
        "lora_targets": "attention", "method": "lora", "micro_batch": 1,
        "optimizer": "paged-adamw-8bit", "recipe": "bf16-torch", "seq_len": 4096}),
    # GPT-2's Conv1D quantised by bitsandbytes (tracer side, -38.2 %)
    ("gpt2", "gpt2", {"attention": "sdpa", "checkpointing": "full", "lora_rank": 16,
        "lora_targets": "attention", "method": "qlora", "micro_batch": 1, "optimizer": "adamw",
        "quant": "nf4-dq", "recipe": "bf16-torch", "seq_len": 256}),
    # Gemma-2's soft-capped logits: tanh's saved output (-12.2 %)
    ("gemma2", "gemma-2-2b", {"attention": "eager", "checkpointing": "full", "lora_rank": 64,
        "lora_targets": "default", "method": "qlora", "micro_batch": 2, "optimizer": "adamw",
        "quant": "nf4", "recipe": "bf16-torch", "seq_len": 512}),
    # eager attention backward: score gradients beside the saved scores (-34.3 %)
    ("qwen2", "qwen2.5-0.5b", {"attention": "eager", "checkpointing": "full", "lora_rank": 16,
        "lora_targets": "default", "method": "lora", "micro_batch": 4, "optimizer": "lion",
        "recipe": "fp32", "seq_len": 16384}),
    # single-process master-weight step: the 16-bit gradients dropped as converted (+14.0 %)
    ("llama", "mistral-7b-v0.1", {"attention": "flash", "checkpointing": "none",
        "compute_dtype": "fp16", "method": "full", "micro_batch": 1,
        "optimizer": "sgd-momentum", "recipe": "bf16-master", "seq_len": 256}),
    # a checkpointed layer keeps no LoRA input copies (+8.3 %)
    ("opt", "opt-1.3b", {"attention": "sdpa", "checkpointing": "full", "lora_rank": 16,
        "lora_targets": "all-linear", "method": "lora", "micro_batch": 4, "optimizer": "adamw",
        "recipe": "bf16-master", "seq_len": 8192}),
    # layer 0's eager core backward with every gradient written (-6.0 %)
    ("opt", "opt-1.3b", {"attention": "eager", "checkpointing": "full", "method": "full",
        "micro_batch": 8, "optimizer": "sgd", "recipe": "bf16-torch", "seq_len": 2048}),
    # PEFT's ParamWrapper on fused expert stacks: folded weights saved per layer (-39.8 %)
    ("moe", "mixtral-8x7b", {"attention": "sdpa", "checkpointing": "none", "lora_rank": 64,
        "lora_targets": "all-linear", "method": "lora", "micro_batch": 1, "optimizer": "lion",
        "recipe": "bf16-torch", "seq_len": 2048}),
    # Falcon eager under amp: the PV matmul's autocast copy of the fp32 probabilities (-16.3 %)
    ("falcon", "falcon-7b", {"attention": "eager", "checkpointing": "none", "lora_rank": 64,
        "lora_targets": "default", "method": "lora", "micro_batch": 4,
        "optimizer": "paged-adamw-8bit", "recipe": "amp", "seq_len": 1024}),
    # tracer side: a layer's backward segment from its output's gradient (Falcon QLoRA, -25.6 %)
    ("falcon", "falcon-7b", {"attention": "flash", "checkpointing": "none", "lora_rank": 64,
        "lora_targets": "attention", "method": "qlora", "micro_batch": 1, "optimizer": "sgd",
        "quant": "nf4-dq", "recipe": "bf16-torch", "seq_len": 512}),
    # tracer side: the master cast in per-layer segments (tied Qwen2.5 bf16-master, +16.2 %)
    ("qwen2", "qwen2.5-1.5b", {"attention": "eager", "checkpointing": "full", "method": "full",
        "micro_batch": 2, "optimizer": "sgd", "recipe": "bf16-master", "seq_len": 256}),
    # tracer side: attention targets with Falcon's dense adapter (+12.5 %)
    ("falcon", "falcon-7b", {"attention": "flash", "checkpointing": "none", "lora_rank": 16,
        "lora_targets": "attention", "method": "lora", "micro_batch": 8,
        "optimizer": "adamw-8bit", "recipe": "bf16-torch", "seq_len": 1024}),
    # tracer side: autocast's 16-bit q, k, v into flash (Llama-2 amp fp16, -10.9 %)
    ("llama", "llama-2-7b", {"attention": "flash", "checkpointing": "none",
        "compute_dtype": "fp16", "lora_rank": 8, "lora_targets": "attention", "method": "lora",
        "micro_batch": 8, "optimizer": "adamw", "recipe": "amp", "seq_len": 8192}),
    # Gemma 3: per-head q/k norms, four norms a layer, no soft-cap (read as ModelSpec fields;
    # +0.9 % when the family was added)
    ("gemma3_text", "gemma-3-1b", {"attention": "eager", "checkpointing": "none",
        "lora_rank": 16, "lora_targets": "default", "method": "lora", "micro_batch": 1,
        "optimizer": "adamw", "recipe": "bf16-torch", "seq_len": 512}),
    # gpt-oss: sinks, biased fused experts, eager attention (transformers has no SDPA for it;
    # +1.6 % when the family was added)
    ("gpt_oss", "gpt-oss-20b", {"attention": "eager", "checkpointing": "none",
        "lora_rank": 16, "lora_targets": "all-linear", "method": "lora", "micro_batch": 1,
        "optimizer": "adamw", "recipe": "bf16-torch", "seq_len": 512}),
    # DeepSeek-V2-Lite: MLA, shared + routed experts, dense first layer, fp32 router (V3's
    # layers read as ModelSpec fields; +0.1 % when the family was added)
    ("deepseek_v2", "deepseek-v2-lite", {"attention": "sdpa", "checkpointing": "none",
        "lora_rank": 16, "lora_targets": "all-linear", "method": "lora", "micro_batch": 1,
        "optimizer": "adamw", "recipe": "bf16-torch", "seq_len": 512}),
    # Adafactor's fp32 copies of a 16-bit parameter and gradient (-7.3 %)
    ("falcon", "falcon-7b", {"attention": "flash", "checkpointing": "none", "method": "full",
        "micro_batch": 8, "optimizer": "adafactor", "recipe": "bf16-torch", "seq_len": 256}),
]  # fmt: skip


def _sample(sweep):
    out = []
    for family, model, cfg in sweep.draw_configs(600, seed=10):
        if model not in MODELS or cfg["attention"] == "eager":
            continue
        # paged bitsandbytes states are in the sample: both sides leave them out of "allocated"
        # (bitsandbytes' get_paged wraps a cudaMallocManaged pointer with torch.frombuffer, which
        # torch's caching allocator never sees; the analytic total keeps them as their own term).
        # Known gaps, left out until fixed (docs/trace_sweep.md):
        # - full fine-tuning of a tied-embedding model (all three models here): at the embedding's
        #   backward the tracer sums the head's and the embedding's vocab x hidden gradients out of
        #   place, because autograd's InputBuffer accumulates in place only for tensors that are not
        #   subclass-like (torch/csrc/autograd/input_buffer.cpp can_accumulate_inplace) and fake
        #   tensors are: one vocab x hidden more than CUDA holds (the analytic side now counts the
        #   two a real run holds; -3 to -7 % left, tracer side).
        # (OPT LoRA without checkpointing, +6.3 %, was the tracer leaving out_proj's adapter.)
        if cfg["method"] == "full":
            continue
        cfg = {
            **cfg,
            "micro_batch": min(cfg["micro_batch"], 2),
            "seq_len": min(cfg["seq_len"], 1024),
        }
        out.append((family, model, cfg))
        if len(out) == SAMPLE:
            break
    return out


def test_analytic_matches_traced_sample() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from constraints.config import TrainConfig
    from constraints.gpus import resolve_gpu
    from searcher.truth.hf_build import quiet_transformers
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    sweep = _sweep()
    gpu = resolve_gpu("h100")
    errors = []
    for _family, model, cfg in _sample(sweep) + FIXED_REGIMES:
        hf, spec = sweep._model(model)
        traced = trace_step(spec, TrainConfig(**cfg), hf_config_dict=hf).peak_bytes
        analytic, _phase = sweep.analytic_as_traced(spec, cfg, gpu)
        errors.append((analytic / traced - 1, model, cfg))
    assert len(errors) >= SAMPLE + len(FIXED_REGIMES)
    worst = max(errors, key=lambda e: abs(e[0]))
    assert statistics.median(abs(e[0]) for e in errors) <= MEDIAN_GOAL
    assert abs(worst[0]) <= WORST_GOAL, worst
