"""The step tracer on ~10 representative configurations: traced vs analytic peak, and wall time.

    PYTHONPATH=. python benchmarks/bench_step_trace.py [--json]

Each row traces two training steps (3 and 4 layers, extrapolated) on fake tensors and compares
the second step's peak allocated with the analytic model's (``total − overhead``). Micro-batch 2,
sequence 2048. Wall time is per trace on the machine it runs on; no test asserts a time.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

#: TinyLlama-1.1B (TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json, public)
TINYLLAMA = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}

ROWS: list[tuple[str, dict[str, Any]]] = [
    ("tinyllama-1.1b", {"method": "full", "recipe": "bf16-torch", "attention": "sdpa"}),
    ("tinyllama-1.1b", {"method": "full", "recipe": "bf16-torch", "attention": "eager"}),
    (
        "tinyllama-1.1b",
        {"method": "lora", "recipe": "bf16-torch", "attention": "sdpa", "checkpointing": "full"},
    ),
    ("llama-3.2-1b", {"method": "lora", "recipe": "bf16-torch", "attention": "eager"}),
    (
        "llama-3.2-1b",
        {
            "method": "qlora",
            "quant": "nf4",
            "recipe": "bf16-torch",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    ),
    (
        "llama-3.2-1b",
        {"method": "full", "recipe": "bf16-master", "attention": "flash", "checkpointing": "full"},
    ),
    ("llama-3.1-8b", {"method": "full", "recipe": "bf16-torch", "attention": "sdpa"}),
    ("llama-3.1-8b", {"method": "lora", "recipe": "bf16-torch", "attention": "sdpa"}),
    (
        "llama-3.1-8b",
        {
            "method": "qlora",
            "quant": "nf4-dq",
            "recipe": "bf16-torch",
            "attention": "sdpa",
            "checkpointing": "full",
        },
    ),
    (
        "llama-3.1-8b",
        {
            "method": "qlora",
            "quant": "nf4",
            "recipe": "bf16-torch",
            "attention": "eager",
            "checkpointing": "full",
        },
    ),
]


def main() -> int:
    from constraints.breakdown import explain
    from constraints.config import TrainConfig
    from constraints.gpus import resolve_gpu
    from constraints.models import spec_from_hf_config
    from searcher.truth.hf_build import config_of, quiet_transformers
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    gpu = resolve_gpu("h100")
    out = []
    for model, knobs in ROWS:
        if model == "tinyllama-1.1b":
            hf = dict(TINYLLAMA)
            spec = spec_from_hf_config(hf, id=model, name="TinyLlama-1.1B")
        else:
            hf, spec = config_of(model)
        cfg = TrainConfig(micro_batch=2, seq_len=2048, **knobs)
        start = time.perf_counter()
        t = trace_step(spec, cfg, hf_config_dict=hf)
        wall = time.perf_counter() - start
        a = explain(spec, cfg, gpu).breakdown
        row = {
            "model": model,
            "knobs": knobs,
            "traced_GiB": t.peak_bytes / 2**30,
            "traced_moment": t.moment,
            "analytic_GiB": a.allocated / 2**30,
            "analytic_phase": a.phase,
            "error": a.allocated / t.peak_bytes - 1,
            "wall_s": wall,
        }
        out.append(row)
        if "--json" not in sys.argv:
            knob_text = " ".join(f"{k}={v}" for k, v in knobs.items())
            print(
                f"{model:15s} {knob_text:62s} traced {row['traced_GiB']:7.2f} GiB "
                f"analytic {row['analytic_GiB']:7.2f} GiB {row['error']:+7.1%} {wall:6.1f} s",
                flush=True,
            )
    if "--json" in sys.argv:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
