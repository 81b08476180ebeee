"""A measured GPU campaign: peak allocated, peak reserved, NVML used and the CUDA context.

    PYTHONPATH=. python benchmarks/gpu_campaign.py run [--out FILE.csv] [--budget-s 480]
    PYTHONPATH=. python benchmarks/gpu_campaign.py run --dry-run --limit 3 --out /tmp/c.csv

About 40 single-GPU configurations over the trace sweep's axes (families, full / LoRA / QLoRA,
recipes, optimizers, attention, checkpointing, micro-batch, sequence), models ≤ 3B built from their
configs with random weights (nothing downloaded). Each configuration runs in its own process
(``one``), so every row starts from a fresh CUDA context and allocator:

1. NVML device memory used before the process touches CUDA (the baseline);
2. ``torch.cuda.init()`` and an empty CUDA tensor (context created, nothing allocated): NVML used
   − baseline = the CUDA context of this process;
3. the model built and three optimizer steps run (``searcher.truth.measure.run_steps``, the code
   ``fitplan measure`` runs): ``max_memory_allocated``, ``max_memory_reserved``, NVML used −
   baseline at the end (the caching allocator keeps its peak segments).

The parent stops starting configurations when the budget (default 480 s: ≤ 8 minutes on one GPU)
would be exceeded and kills a child that overruns its share. Each row carries the GPU, driver,
CUDA, torch, transformers, peft and bitsandbytes versions. ``--dry-run`` runs the same code path on
the CPU with a tiny model of each family (2 layers, hidden 64): no CUDA counters, rows marked
``dry-run``; configurations that need a CUDA GPU (bitsandbytes) are rows with their refusal.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "gpu_campaign.csv"
#: ≤ 8 minutes on one GPU for the whole campaign (issue 10, item 6)
DEFAULT_BUDGET_S = 480.0
#: optimizer steps per configuration (the second and third show the states and the steady peak)
STEPS = 3
MiB = 2**20

COLUMNS = (
    "model", "config", "status", "peak_allocated", "peak_reserved", "nvml_used",
    "cuda_context", "nvml_baseline", "step_time_s", "wall_s", "gpu", "driver", "cuda", "torch",
    "transformers", "peft", "bitsandbytes", "note",
)  # fmt: skip

#: (model, configuration) rows over the sweep's axes; models ≤ 3B parameters
_L = {"method": "lora", "lora_rank": 16}
_Q = {"method": "qlora", "lora_rank": 16, "quant": "nf4", "recipe": "bf16-torch"}
_F = {"method": "full"}
CAMPAIGN: tuple[tuple[str, dict[str, Any]], ...] = (
    ("qwen2.5-0.5b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw"}),
    ("qwen2.5-0.5b", {**_F, "recipe": "bf16-master", "optimizer": "adamw"}),
    ("qwen2.5-0.5b", {**_F, "recipe": "amp", "optimizer": "adamw", "checkpointing": "full"}),
    ("qwen2.5-0.5b", {**_F, "recipe": "fp32", "optimizer": "sgd-momentum"}),
    ("qwen2.5-0.5b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw-8bit"}),
    ("qwen2.5-0.5b", {**_F, "recipe": "bf16-torch", "optimizer": "paged-adamw-8bit"}),
    ("qwen2.5-0.5b", {**_L, "recipe": "bf16-torch", "attention": "eager", "seq_len": 2048}),
    ("qwen2.5-0.5b", {**_Q, "checkpointing": "full", "micro_batch": 4}),
    ("llama-3.2-1b", {**_L, "recipe": "bf16-torch", "checkpointing": "full"}),
    ("llama-3.2-1b", {**_L, "recipe": "amp", "checkpointing": "full", "lora_rank": 64}),
    ("llama-3.2-1b", {**_L, "recipe": "amp", "lora_targets": "all-linear"}),
    ("llama-3.2-1b", {**_L, "recipe": "fp32", "attention": "eager"}),
    ("llama-3.2-1b", {**_Q, "checkpointing": "full"}),
    ("llama-3.2-1b", {**_Q, "quant": "nf4-dq", "lora_targets": "all-linear"}),
    ("llama-3.2-1b", {**_Q, "optimizer": "paged-adamw-8bit", "seq_len": 4096}),
    ("llama-3.2-1b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw", "checkpointing": "full"}),
    ("llama-3.2-1b", {**_F, "recipe": "bf16-torch", "optimizer": "lion", "micro_batch": 8}),
    ("llama-3.2-3b", {**_L, "recipe": "bf16-torch", "checkpointing": "full", "seq_len": 4096}),
    ("llama-3.2-3b", {**_Q, "checkpointing": "full", "lora_targets": "all-linear"}),
    ("llama-3.2-3b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw-8bit", "checkpointing": "full"}),
    ("qwen2.5-1.5b", {**_L, "recipe": "bf16-torch", "attention": "sdpa", "micro_batch": 8}),
    ("qwen2.5-1.5b", {**_L, "recipe": "bf16-master", "optimizer": "sgd-momentum"}),
    ("qwen2.5-1.5b", {**_Q, "seq_len": 8192, "checkpointing": "full"}),
    ("qwen2.5-1.5b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw", "seq_len": 256, "micro_batch": 16}),
    ("qwen2.5-3b", {**_L, "recipe": "bf16-torch", "checkpointing": "full", "micro_batch": 2}),
    ("qwen2.5-3b", {**_Q, "optimizer": "adamw-8bit", "checkpointing": "full"}),
    ("gemma-2-2b", {**_L, "recipe": "bf16-torch", "attention": "eager", "checkpointing": "full"}),
    ("gemma-2-2b", {**_Q, "attention": "eager", "checkpointing": "full"}),
    ("gemma-2-2b", {**_F, "recipe": "bf16-torch", "optimizer": "adamw-8bit", "attention": "eager", "checkpointing": "full"}),
    ("gpt2", {**_F, "recipe": "fp32", "optimizer": "adamw", "seq_len": 1024}),
    ("gpt2", {**_F, "recipe": "amp", "optimizer": "adamw", "attention": "eager", "seq_len": 1024}),
    ("gpt2-medium", {**_L, "recipe": "bf16-torch", "seq_len": 1024, "lora_targets": "attention"}),
    ("gpt2-medium", {**_Q, "seq_len": 1024, "attention": "eager"}),
    ("gpt2-large", {**_F, "recipe": "bf16-torch", "optimizer": "adamw", "seq_len": 1024, "checkpointing": "full"}),
    ("opt-1.3b", {**_L, "recipe": "bf16-torch", "lora_targets": "attention"}),
    ("opt-1.3b", {**_L, "recipe": "amp", "checkpointing": "full", "optimizer": "paged-adamw-8bit"}),
    ("opt-1.3b", {**_Q, "checkpointing": "full"}),
    ("opt-1.3b", {**_F, "recipe": "bf16-master", "optimizer": "adamw", "seq_len": 1024}),
    ("llama-3.2-1b", {**_L, "recipe": "bf16-torch", "seq_len": 16384, "checkpointing": "full"}),
    ("qwen2.5-0.5b", {**_L, "recipe": "bf16-torch", "seq_len": 256, "micro_batch": 16}),
)  # fmt: skip
#: defaults every row starts from (the sweep's middle)
BASE = {"micro_batch": 2, "seq_len": 2048, "attention": "sdpa", "optimizer": "adamw"}
#: the tiny shape of the dry run (same families, same code path)
TINY = {
    "num_hidden_layers": 2, "n_layer": 2, "hidden_size": 64, "n_embd": 64, "intermediate_size": 128,
    "ffn_dim": 128, "num_attention_heads": 4, "n_head": 4, "num_key_value_heads": 2,
    "vocab_size": 512, "head_dim": 16, "word_embed_proj_dim": 64,
}  # fmt: skip


def _config(cfg: dict[str, Any]) -> dict[str, Any]:
    return {**BASE, **cfg}


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "peft", "bitsandbytes"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = ""
    return out


def _nvml() -> Any:
    """pynvml's handle of device 0, or None (no NVML: the NVML columns stay empty)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None


def _nvml_used(nv: Any) -> int | None:
    if nv is None:
        return None
    pynvml, handle = nv
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def _tiny(cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """The family's config at a tiny shape (keys the config does not have are not added)."""
    out = {**cfg_dict, **{k: v for k, v in TINY.items() if k in cfg_dict}}
    for key in ("n_positions", "max_position_embeddings"):
        if key in out:
            out[key] = max(int(out[key]), 4096)
    return out


def measure_one(model: str, cfg_json: str, dry_run: bool) -> dict[str, Any]:
    """One configuration, in this process: the row (see the module docstring for the order)."""
    nv = None if dry_run else _nvml()
    baseline = _nvml_used(nv)  # before torch touches CUDA
    import torch

    from constraints.config import TrainConfig
    from constraints.models import spec_from_hf_config
    from searcher.truth.hf_build import config_of, quiet_transformers
    from searcher.truth.measure import run_steps
    from searcher.truth.training_setup import build

    quiet_transformers()
    row: dict[str, Any] = {"model": model, "config": cfg_json, **_versions()}
    device = "cpu" if dry_run else "cuda"
    if not dry_run:
        torch.cuda.init()
        torch.empty(0, device="cuda")  # the context exists, the allocator holds nothing
        torch.cuda.synchronize()
        after_init = _nvml_used(nv)
        if baseline is not None and after_init is not None:
            row["cuda_context"] = after_init - baseline
        row["nvml_baseline"] = baseline
        row["gpu"] = torch.cuda.get_device_name()
        row["cuda"] = torch.version.cuda or ""
        if nv is not None:
            row["driver"] = str(nv[0].nvmlSystemGetDriverVersion())
    else:
        row["gpu"] = "CPU (dry run)"
    cfg_dict, spec = config_of(model)
    if dry_run:
        cfg_dict = _tiny(cfg_dict)
        spec = spec_from_hf_config(cfg_dict, id=spec.id + "-tiny", name=spec.name + " (tiny)")
    cfg = TrainConfig(**json.loads(cfg_json))
    if dry_run:
        cfg = cfg.model_copy(update={"seq_len": min(cfg.seq_len, 64), "micro_batch": 1})
    torch.manual_seed(0)
    model_obj, notes = build(spec, cfg_dict, cfg, device)
    result = run_steps(model_obj, cfg, device, STEPS, spec.vocab, spec.arch == "encoder-decoder")
    row["step_time_s"] = result["step_time_s"]
    if not dry_run:
        row["peak_allocated"] = result["allocated"]
        row["peak_reserved"] = result["reserved"]
        used = _nvml_used(nv)
        if used is not None and baseline is not None:
            row["nvml_used"] = used - baseline
    row["status"] = "dry-run" if dry_run else "ok"
    row["note"] = "; ".join(notes)
    return row


def run(out: Path, budget_s: float, dry_run: bool, limit: int | None) -> int:
    """Every configuration in its own process, within the budget; rows appended to ``out``."""
    if not dry_run:
        try:
            import torch
        except ImportError:
            sys.stderr.write("gpu_campaign: needs torch (pip install 'fitplan[measure]')\n")
            return 2
        if not torch.cuda.is_available():
            sys.stderr.write("gpu_campaign: no CUDA GPU here (use --dry-run on a CPU)\n")
            return 2
    todo = list(CAMPAIGN[:limit] if limit else CAMPAIGN)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists()
    start = time.perf_counter()
    with out.open("a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        for i, (model, cfg) in enumerate(todo):
            left = budget_s - (time.perf_counter() - start)
            share = left / (len(todo) - i)
            if left < 10:
                sys.stderr.write(f"gpu_campaign: budget spent, {len(todo) - i} not run\n")
                break
            cfg_json = json.dumps(_config(cfg), sort_keys=True)
            t0 = time.perf_counter()
            row = _child(model, cfg_json, dry_run, timeout=max(share * 3, 30.0))
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            writer.writerow({k: row.get(k, "") for k in COLUMNS})
            fh.flush()
            sys.stderr.write(
                f"{i + 1:3d}/{len(todo)} {model:14s} {row['status']:8s} {row['wall_s']} s\n"
            )
    return 0


def _child(model: str, cfg_json: str, dry_run: bool, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "one", model, cfg_json] + (["--dry-run"] if dry_run else [])
    base = {"model": model, "config": cfg_json}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "note": f"killed after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
        status = "oom" if "OutOfMemory" in p.stderr else "error"
        return {**base, "status": status, "note": tail}
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the campaign, one process per configuration")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    r.add_argument("--dry-run", action="store_true", help="CPU, tiny models, no CUDA counters")
    r.add_argument("--limit", type=int, default=None, help="the first N configurations only")
    o = sub.add_parser("one", help="one configuration in this process (the child)")
    o.add_argument("model")
    o.add_argument("config")
    o.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "one":
        try:
            row = measure_one(args.model, args.config, args.dry_run)
        except Exception as err:  # the parent records the refusal as the row's note
            name = type(err).__name__
            row = {"model": args.model, "config": args.config, "status": "refused",
                   "note": f"{name}: {err}"[:300]}  # fmt: skip
        sys.stdout.write(json.dumps(row) + "\n")
        return 0
    if args.limit is not None and args.limit < 1:
        sys.stderr.write(f"gpu_campaign: --limit must be at least 1, got {args.limit}\n")
        return 2
    return run(args.out, args.budget_s, args.dry_run, args.limit)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
