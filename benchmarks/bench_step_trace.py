"""The step tracer on ~10 representative configurations: traced vs analytic peak, and wall time.

    PYTHONPATH=. python benchmarks/bench_step_trace.py [--json]
    PYTHONPATH=. python benchmarks/bench_step_trace.py speed [--tree TREE] [--stored N]

Each row traces two training steps (3 and 4 layers, extrapolated) on fake tensors and compares
the second step's peak allocated with the analytic model's (``total − overhead``). Micro-batch 2,
sequence 2048. Wall time is per trace on the machine it runs on; no test asserts a time.

``speed`` times the tracer of ``TREE`` (default: this one; give an older checkout for a
before/after): the three Llama-3.1-8B traces of ``fitplan explain --exact`` (LoRA r16, QLoRA nf4
r16, full; 2 × 2048, SDPA, full checkpointing, bf16), each in a fresh process (import and trace
CPU seconds, wall seconds), then ``N`` stored sweep rows (benchmarks/results/trace_sweep*.csv)
re-traced in one process as the sweep runs them, each checked byte for byte against its stored
figure. CPU seconds are the process's own (less sensitive to a shared machine's load than wall
time); the load average is printed beside them. Appends one JSON line per run to
benchmarks/results/step_trace_speed.jsonl.
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


EXACT_8B: dict[str, dict[str, Any]] = {
    "lora": {"method": "lora", "lora_rank": 16},
    "qlora": {"method": "qlora", "quant": "nf4", "lora_rank": 16},
    "full": {"method": "full"},
}
EXACT_COMMON = {
    "recipe": "bf16-torch",
    "attention": "sdpa",
    "checkpointing": "full",
    "micro_batch": 2,
    "seq_len": 2048,
}

#: run in the timed tree: one trace in a fresh process (argv: config JSON)
_ONE = """
import json, sys, time
t0 = time.process_time()
from constraints.config import TrainConfig
from searcher.truth.hf_build import config_of, quiet_transformers
from searcher.truth.step_trace import trace_step
import peft, torch, transformers
quiet_transformers()
imported = time.process_time() - t0
hf, spec = config_of("llama-3.1-8b")
t1, w1 = time.process_time(), time.perf_counter()
t = trace_step(spec, TrainConfig(**json.loads(sys.argv[1])), hf_config_dict=hf)
print(json.dumps({"import_cpu_s": imported, "trace_cpu_s": time.process_time() - t1,
                  "trace_wall_s": time.perf_counter() - w1, "peak_bytes": t.peak_bytes}))
"""

#: run in the timed tree: stored sweep rows re-traced in one process (argv: keys JSON, root)
_STORED = """
import csv, json, sys, time
from pathlib import Path
root = Path(sys.argv[2])
sys.path.insert(0, str(root))
from benchmarks.trace_sweep import _model
from constraints.config import TrainConfig
from searcher.truth.hf_build import quiet_transformers
from searcher.truth.step_trace import trace_step
quiet_transformers()
rows = {}
for f in sorted((root / "benchmarks" / "results").glob("trace_sweep*.csv")):
    rows.update({r["key"]: r for r in csv.DictReader(f.open(encoding="utf-8"))})
out = []
for key in json.loads(sys.argv[1]):
    r = rows[key]
    hf, spec = _model(r["model"])
    t0 = time.process_time()
    t = trace_step(spec, TrainConfig(**json.loads(r["config"])), hf_config_dict=hf)
    same = t.peak_bytes == int(r["traced_bytes"]) and t.composition == json.loads(r["composition"])
    out.append({"key": key, "cpu_s": time.process_time() - t0, "identical": same})
print(json.dumps(out))
"""


def _stored_keys(n: int) -> list[str]:
    """``n`` stored rows, one per (family, method) first, in file order (deterministic)."""
    import csv
    from pathlib import Path

    results = Path(__file__).resolve().parent / "results"
    rows = []
    for f in sorted(results.glob("trace_sweep*.csv")):
        rows += [r for r in csv.DictReader(f.open(encoding="utf-8")) if r["traced_bytes"]]
    seen: set[tuple[str, str]] = set()
    first, rest = [], []
    for r in rows:
        kind = (r["family"], json.loads(r["config"])["method"])
        (rest if kind in seen else first).append(r["key"])
        seen.add(kind)
    return (first + rest)[:n]


def speed(tree: str, stored: int) -> int:
    import os
    import statistics
    import subprocess
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": tree}
    python = sys.executable
    record: dict[str, Any] = {"tree": tree, "load_average_before": os.getloadavg()}
    for name, knobs in EXACT_8B.items():
        cfg = json.dumps({**EXACT_COMMON, **knobs})
        done = subprocess.run(
            [python, "-c", _ONE, cfg], env=env, cwd=tree, capture_output=True, text=True
        )
        record[f"explain_exact_8b_{name}"] = json.loads(done.stdout.strip().splitlines()[-1])
        print(name, record[f"explain_exact_8b_{name}"], flush=True)
    if stored:
        keys = json.dumps(_stored_keys(stored))
        done = subprocess.run(
            [python, "-c", _STORED, keys, tree], env=env, cwd=tree, capture_output=True, text=True
        )
        traces = json.loads(done.stdout.strip().splitlines()[-1])
        cpu = [t["cpu_s"] for t in traces]
        record["stored_rows"] = {
            "n": len(traces),
            "identical": sum(t["identical"] for t in traces),
            "median_cpu_s": statistics.median(cpu),
            "total_cpu_s": sum(cpu),
        }
        print("stored rows", record["stored_rows"], flush=True)
    record["load_average_after"] = os.getloadavg()
    out = Path(__file__).resolve().parent / "results" / "step_trace_speed.jsonl"
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "speed":
        import argparse
        from pathlib import Path

        ap = argparse.ArgumentParser(prog="bench_step_trace.py speed")
        ap.add_argument("speed")
        ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]))
        ap.add_argument("--stored", type=int, default=12)
        args = ap.parse_args()
        return speed(args.tree, args.stored)
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
