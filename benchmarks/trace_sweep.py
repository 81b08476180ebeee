"""The validation sweep: traced peak allocated (fake-tensor step tracer) vs the analytic model.

    PYTHONPATH=. python benchmarks/trace_sweep.py run --rows 600 [--shard 0/2] [--seed 10]
    PYTHONPATH=. python benchmarks/trace_sweep.py report        # docs/trace_sweep.md + summary
    PYTHONPATH=. python benchmarks/trace_sweep.py drop --model-prefix gpt2 --method qlora

``run`` draws single-GPU configurations at random (fixed seed) over the catalog families and the
knobs below, traces each (:func:`searcher.truth.step_trace.trace_step`, two steps, 3 and 4
layers extrapolated) and appends one CSV row per configuration to
``benchmarks/results/trace_sweep.csv`` (resumable: rows already there are skipped; rows the
tracer cannot run are kept with their error). The trace does not depend on the analytic model,
so ``report`` recomputes the analytic side (peak allocated = total − overhead − paged) for every row:
a physics change is re-judged against the stored traces in a second, without tracing again.

Real catalog shapes are used: under fake tensors a trace's cost is the number of operators run
(3 and 4 layers), not the tensor sizes. Wall time per trace is ~10–40 s on a shared 2-core box.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
#: one CSV per shard (trace_sweep.csv, trace_sweep.1.csv, …): workers never share a file
RESULTS = RESULTS_DIR / "trace_sweep.csv"
DOC = ROOT / "docs" / "trace_sweep.md"
#: configurations whose stored traces a tracer fix made stale (``drop``): ``run`` traces them first
RETRACE = RESULTS_DIR / "trace_sweep_retrace.json"
#: what follows this line in the doc is hand-written and survives ``report``
KEPT_MARKER = "<!-- hand-written below: kept by report -->"

#: family → catalog models swept (vocabularies 32k–256k, biases, MoE, tied heads)
FAMILIES: dict[str, tuple[str, ...]] = {
    "llama": ("llama-3.2-1b", "llama-2-7b", "llama-3.1-8b", "mistral-7b-v0.1"),
    "qwen2": ("qwen2.5-0.5b", "qwen2.5-1.5b"),
    "gemma2": ("gemma-2-2b",),
    "phi3": ("phi-3-mini-4k",),
    "gpt2": ("gpt2", "gpt2-medium"),
    "opt": ("opt-1.3b",),
    "falcon": ("falcon-7b",),
    "moe": ("mixtral-8x7b", "qwen3-30b-a3b"),
}
#: MoE configs are traced with fewer experts (the per-layer physics is per expert; qwen3's 128
#: experts would cost 128 expert modules per traced layer)
MOE_EXPERTS = {"qwen3-30b-a3b": ("num_experts", 16)}

KNOBS: dict[str, tuple[Any, ...]] = {
    "method": ("full", "lora", "lora", "qlora"),
    "lora_rank": (8, 16, 64),
    "lora_targets": ("all-linear", "all-linear", "attention", "default"),
    "quant": ("nf4", "nf4-dq"),
    "recipe": ("bf16-torch", "bf16-master", "amp", "fp32"),
    "compute_dtype": (None, None, "fp16"),
    # adamw is torch's fused AdamW on both sides (HF Trainer's adamw_torch_fused)
    "optimizer": (
        "adamw",
        "adamw",
        "adamw-8bit",
        "paged-adamw-8bit",
        "sgd-momentum",
        "sgd",
        "adafactor",
        "lion",
    ),
    "micro_batch": (1, 2, 4, 8, 16),
    "seq_len": (256, 512, 1024, 2048, 4096, 8192, 16384),
    "attention": ("eager", "sdpa", "flash"),
    "checkpointing": ("none", "full"),
}
#: token budget per micro-batch (keeps eager attention at 16k tokens × 16 from dominating)
MAX_TOKENS = 65536

FIELDS = (
    "key",
    "family",
    "model",
    "config",
    "traced_bytes",
    "moment",
    "composition",
    "wall_s",
    "error",
)


def _draw(rng: random.Random) -> tuple[str, str, dict[str, Any]]:
    family = rng.choice(sorted(FAMILIES))
    model = rng.choice(FAMILIES[family])
    k = {name: rng.choice(values) for name, values in KNOBS.items()}
    while k["micro_batch"] * k["seq_len"] > MAX_TOKENS:
        k["micro_batch"] = max(1, k["micro_batch"] // 2)
        if k["micro_batch"] == 1:
            k["seq_len"] = min(k["seq_len"], MAX_TOKENS)
    cfg: dict[str, Any] = {
        "method": k["method"],
        "recipe": k["recipe"],
        "optimizer": k["optimizer"],
        "micro_batch": k["micro_batch"],
        "seq_len": k["seq_len"],
        "attention": k["attention"],
        "checkpointing": k["checkpointing"],
    }
    if k["compute_dtype"] and k["recipe"] != "fp32":
        cfg["compute_dtype"] = k["compute_dtype"]
    if k["method"] != "full":
        cfg["lora_rank"] = k["lora_rank"]
        cfg["lora_targets"] = k["lora_targets"]
    if k["method"] == "qlora":
        cfg["quant"] = k["quant"]
        if cfg["recipe"] in ("fp32", "amp"):
            cfg["recipe"] = "bf16-torch"
    return family, model, cfg


def _key(model: str, cfg: dict[str, Any]) -> str:
    return model + " " + json.dumps(cfg, sort_keys=True)


def _model(model: str) -> tuple[dict[str, Any], Any]:
    from constraints.models import spec_from_hf_config
    from searcher.truth.hf_build import config_of

    hf, spec = config_of(model)
    if model in MOE_EXPERTS:
        key, n = MOE_EXPERTS[model]
        hf = {**hf, key: n}
        spec = spec_from_hf_config(hf, id=spec.id, name=spec.name)
    return hf, spec


#: MoE models: the tracer runs transformers' grouped_mm experts, bf16 inputs only (traced on fp32 / fp16:
#: "Expected inputs of BF16 type"), so their drawn rows run bf16 recipes
MOE_MODELS = frozenset(FAMILIES["moe"])
#: PEFT has no default target modules for these model types ("Please specify target_modules")
NO_PEFT_DEFAULT_TARGETS = frozenset({"phi-3-mini-4k", *FAMILIES["moe"]})


def known_unsupported(model: str, cfg: dict[str, Any]) -> str:
    """Why the real stack refuses ``cfg`` on ``model`` ('' if it runs): seen as tracer errors."""
    if model.startswith("gemma-2") and cfg["attention"] == "sdpa":
        return "transformers' Gemma2 has no SDPA attention"
    if model in MOE_MODELS and (
        cfg["recipe"] in ("fp32", "amp")
        or cfg.get("compute_dtype") == "fp16"
        or cfg["method"] == "qlora"  # prepare_model_for_kbit_training upcasts the experts to fp32
    ):
        return "grouped_mm experts need bf16"
    if model in NO_PEFT_DEFAULT_TARGETS and cfg.get("lora_targets") == "default":
        return "PEFT has no default LoRA targets for it"
    return ""


def draw_configs(n: int, seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    """``n`` distinct configurations the tracer and the analytic model both accept."""
    from constraints.config import TrainConfig
    from constraints.errors import FitplanError
    from searcher.truth.step_build import check_supported

    rng = random.Random(seed)
    out: list[tuple[str, str, dict[str, Any]]] = []
    seen: set[str] = set()
    specs: dict[str, Any] = {}
    while len(out) < n:
        family, model, cfg = _draw(rng)
        key = _key(model, cfg)
        if key in seen or known_unsupported(model, cfg):
            continue
        try:
            tc = TrainConfig(**cfg)
            if model not in specs:
                specs[model] = _model(model)[1]
            check_supported(specs[model], tc)
        except FitplanError:
            continue
        seen.add(key)
        out.append((family, model, cfg))
    return out


def _shard_files() -> list[Path]:
    return sorted(RESULTS_DIR.glob("trace_sweep*.csv"))


def csv_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Every row of these CSV files (a sweep's shards), in order."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        with path.open(encoding="utf-8") as f:
            rows += list(csv.DictReader(f))
    return rows


def _all_rows() -> list[dict[str, Any]]:
    return csv_rows(_shard_files())


def _done() -> set[str]:
    return {r["key"] for r in _all_rows()}


def _retrace_list() -> list[tuple[str, str, dict[str, Any]]]:
    if not RETRACE.exists():
        return []
    return [(f, m, c) for f, m, c in json.loads(RETRACE.read_text(encoding="utf-8"))]


def drop(model_prefix: str, method: str) -> int:
    """Remove the stored rows a tracer fix made stale (model id prefix, method) from every CSV
    and list their configurations in ``RETRACE``, which ``run`` traces first."""
    stale = _retrace_list()
    for path in _shard_files():
        with path.open(encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        keep = []
        for r in rows:
            cfg = json.loads(r["config"])
            if r["model"].startswith(model_prefix) and cfg["method"] == method:
                stale.append((r["family"], r["model"], cfg))
            else:
                keep.append(r)
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(keep)
        print(f"{path.name}: {len(rows) - len(keep)} rows dropped")
    RETRACE.write_text(json.dumps(stale, indent=0) + "\n", encoding="utf-8")
    return 0


def run(rows: int, seed: int, shard: tuple[int, int], out: int | None = None) -> int:
    """Trace this shard's rows not yet stored; ``out``: the CSV's number (default the shard's)."""
    from constraints.config import TrainConfig
    from searcher.truth.hf_build import quiet_transformers
    from searcher.truth.step_trace import trace_step

    quiet_transformers()
    done = _done()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    index, count = shard
    file_index = index if out is None else out
    path = RESULTS if file_index == 0 else RESULTS_DIR / f"trace_sweep.{file_index}.csv"
    new = not path.exists()
    with path.open("a", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        todo = [(0, c) for c in _retrace_list()] + [
            (i, c) for i, c in enumerate(draw_configs(rows, seed)) if i % count == index
        ]
        for i, (family, model, cfg) in todo:
            key = _key(model, cfg)
            if key in done:
                continue
            done.add(key)
            hf, spec = _model(model)
            start = time.perf_counter()
            row: dict[str, Any] = {"key": key, "family": family, "model": model}
            row["config"] = json.dumps(cfg, sort_keys=True)
            try:
                t = trace_step(spec, TrainConfig(**cfg), hf_config_dict=hf)
                row.update(
                    traced_bytes=t.peak_bytes,
                    moment=t.moment,
                    composition=json.dumps(t.composition),
                    error="",
                )
            except Exception as e:  # a row per failure: the sweep goes on
                row.update(traced_bytes="", moment="", composition="", error=repr(e)[:300])
            row["wall_s"] = round(time.perf_counter() - start, 2)
            w.writerow(row)
            f.flush()
            print(f"{i:4d} {model:16s} {row['config']} {row['traced_bytes']} {row['error'][:80]}")
    return 0


# --------------------------------------------------------------------------------------------
# The report: analytic vs traced, recomputed from the stored traces
# --------------------------------------------------------------------------------------------


def analytic_as_traced(spec: Any, cfg: dict[str, Any], gpu: Any) -> tuple[float, str]:
    """The analytic peak allocated of ``cfg`` as the tracer runs it, bytes, and its moment.

    As traced: PEFT's default fp32 adapters (``autocast_adapter_dtype=True``); one process with a
    plain torch step (backend ``single``, whatever backend the recipe implies); and without the
    cuBLAS workspace, which the tracer cannot see (CPU kernels, no cuBLAS handle; 8–32 MiB of
    real allocated memory on CUDA, a tenth of a 0.35 GiB GPT-2 QLoRA step).
    """
    from constraints.breakdown import explain
    from constraints.config import TrainConfig

    as_traced = {**cfg, "adapter_dtype": "fp32"} if cfg["method"] != "full" else dict(cfg)
    as_traced["backend"] = "single"
    a = explain(spec, TrainConfig(**as_traced), gpu).breakdown
    return a.allocated - a.parts["workspace"], a.phase


def analytic_errors(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each traced row with the analytic peak allocated and the error (analytic / traced − 1)."""
    from constraints.gpus import resolve_gpu

    gpu = resolve_gpu("h100")
    specs: dict[str, Any] = {}
    out = []
    for r in rows:
        cfg = json.loads(r["config"])
        if r["model"] not in specs:
            specs[r["model"]] = _model(r["model"])[1]
        analytic, phase = analytic_as_traced(specs[r["model"]], cfg, gpu)
        traced = int(r["traced_bytes"])
        out.append(
            {
                **r,
                "cfg": cfg,
                "analytic_bytes": analytic,
                "analytic_phase": phase,
                "error": analytic / traced - 1,
            }
        )
    return out


def _stats(errors: list[float]) -> tuple[int, float, float]:
    absolute = [abs(e) for e in errors]
    worst = max(errors, key=abs) if errors else 0.0
    return len(errors), statistics.median(absolute) if absolute else 0.0, worst


def _groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    knobs = ("method", "attention", "checkpointing", "recipe", "optimizer", "quant")
    g: dict[str, dict[str, list[float]]] = {"family": {}}
    for r in rows:
        g["family"].setdefault(r["family"], []).append(r["error"])
        for k in knobs:
            value = str(r["cfg"].get(k, "none" if k == "quant" else "-"))
            if k == "recipe" and r["cfg"].get("compute_dtype"):
                value += "+" + r["cfg"]["compute_dtype"]
            g.setdefault(k, {}).setdefault(value, []).append(r["error"])
        tokens = r["cfg"]["micro_batch"] * r["cfg"]["seq_len"]
        band = "≤2k" if tokens <= 2048 else ("≤16k" if tokens <= 16384 else ">16k")
        g.setdefault("tokens per micro-batch", {}).setdefault(band, []).append(r["error"])
    return g


def report_markdown(rows: list[dict[str, Any]], failed: int) -> str:
    n, med, worst = _stats([r["error"] for r in rows])
    lines = [
        "# Trace sweep: analytic vs traced peak allocated",
        "",
        "Generated by `benchmarks/trace_sweep.py report` from `benchmarks/results/trace_sweep.csv`",
        "(traced peak allocated of the second training step on fake tensors, "
        "`searcher/truth/step_trace.py`; analytic = peak allocated, total − overhead − paged optimizer "
        "states: bitsandbytes' paged states are cudaMallocManaged memory that "
        "`max_memory_allocated` does not count, on both sides; the analytic side as traced: "
        "PEFT's fp32 adapters, backend `single`, without the cuBLAS workspace the CPU tracer "
        "cannot see — `analytic_as_traced`).",
        "Error = analytic / traced − 1; median of |error|, worst = the signed error of largest size.",
        "",
        f"**All: {n} configurations, median {med:.1%}, worst {worst:+.1%}** "
        f"({failed} drawn configurations the tracer could not run are listed in the CSV).",
        "",
    ]
    for group, values in _groups(rows).items():
        lines += [f"## By {group}", "", "| value | rows | median | worst |", "|---|---:|---:|---:|"]
        for value, errs in sorted(values.items()):
            c, m, w = _stats(errs)
            lines.append(f"| {value} | {c} | {m:.1%} | {w:+.1%} |")
        lines.append("")
    worst_rows = sorted(rows, key=lambda r: -abs(r["error"]))[:15]
    lines += ["## Worst rows", "", "| model | config | traced GiB | analytic GiB | error |"]
    lines.append("|---|---|---:|---:|---:|")
    for r in worst_rows:
        lines.append(
            f"| {r['model']} | `{r['config']}` | {int(r['traced_bytes']) / 2**30:.2f} | "
            f"{r['analytic_bytes'] / 2**30:.2f} | {r['error']:+.1%} |"
        )
    return "\n".join(lines) + "\n"


def report(write: bool) -> int:
    all_rows = _all_rows()
    rows = analytic_errors([r for r in all_rows if r["traced_bytes"]])
    text = report_markdown(rows, sum(1 for r in all_rows if not r["traced_bytes"]))
    if write:
        # hand-written sections after the marker (measured timings, notes) are kept
        old = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if KEPT_MARKER in old:
            text += "\n" + old[old.index(KEPT_MARKER) :]
        DOC.write_text(text, encoding="utf-8")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--rows", type=int, default=600)
    r.add_argument("--seed", type=int, default=10)
    r.add_argument("--shard", default="0/1", help="i/n: trace every n-th row from the i-th")
    r.add_argument("--file", type=int, default=None, help="write trace_sweep.N.csv")
    d = sub.add_parser("drop", help="forget the rows a tracer fix made stale; run retraces them")
    d.add_argument("--model-prefix", required=True)
    d.add_argument("--method", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("--no-write", action="store_true")
    a = p.parse_args(argv)
    if a.command == "run":
        i, n = (int(x) for x in a.shard.split("/"))
        return run(a.rows, a.seed, (i, n), a.file)
    if a.command == "drop":
        return drop(a.model_prefix, a.method)
    return report(not a.no_write)


if __name__ == "__main__":
    sys.exit(main())
