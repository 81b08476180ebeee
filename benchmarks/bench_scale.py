"""Search at cluster scale: CPU time and peak memory, against the previous release and llm-analysis.

    python benchmarks/bench_scale.py                                  # this tree only
    git worktree add /tmp/fitplan-e4350a1 e4350a1                     # the previous release
    python3 -m venv /tmp/venv-llma && /tmp/venv-llma/bin/pip install llm-analysis
    python benchmarks/bench_scale.py --baseline /tmp/fitplan-e4350a1 --llm-analysis /tmp/venv-llma/bin/python

Every figure comes from fresh processes, this tree and the baseline alternating run by run (so a
change in the machine's load hits both): the CPU time of the measured call (user + system, from
``resource``; the wall clock of a shared machine is noise) and the process's peak RSS, the
median over ``--repeat`` runs (one slow or one lucky run must not move it). Cold starts are whole processes (the child's CPU time), with the
bytecode compiled once first. llm-analysis's rate is its ``LLMAnalysis.training`` per
configuration on its own shipped Llama-2-7B config (the per-configuration cost barely depends on
the model), measured in the same run. No test asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

IMPORTS = """
import json, resource, sys, time
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
try:
    from searcher.search.space import SearchProblem
    from searcher.search.run import run_search
    from searcher.search.strategies import ExhaustiveStrategy, OptunaStrategy
    from searcher.fleet.fleet_file import load_fleet
except ImportError:  # the layout before the house (e4350a1)
    from searcher.space import SearchProblem
    from searcher.search import run_search
    from searcher.strategies import ExhaustiveStrategy, OptunaStrategy
    from searcher.fleet.schema import load_fleet
from searcher.fleet.plan import plan_fleet

def report(cpu, n):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"cpu": cpu, "rss_mb": rss, "n": n}))
"""

SEARCH = """
p = SearchProblem(model=resolve_model("llama-3.1-8b"), gpu=resolve_gpu("h100-sxm"),
                  max_gpus={gpus}, target_batch={batch}, seq_len=4096)
t = time.process_time()
r = run_search(p, ExhaustiveStrategy())
report(time.process_time() - t, r.evaluated)
"""

OPTUNA = """
p = SearchProblem(model=resolve_model("qwen2.5-7b"), gpu=resolve_gpu("h100-sxm"),
                  max_gpus=8, target_batch=64, seq_len=4096)
t = time.process_time()
run_search(p, OptunaStrategy(trials={trials}))
report(time.process_time() - t, {trials})
"""

FLEET = """
fleet = load_fleet({path!r})
t = time.process_time()
plan = plan_fleet(fleet, workers={workers})
cpu = time.process_time() - t
children = resource.getrusage(resource.RUSAGE_CHILDREN)
report(cpu + children.ru_utime + children.ru_stime, sum(c.evaluated for c in plan.cells.values()))
"""

README_EXAMPLE = ["--model", "llama-3.1-8b", "--gpu", "a100-80gb"]
COLD = {
    "explain": ["explain", *README_EXAMPLE, "--method", "lora", "--rank", "16", "--micro-batch", "4",
                "--seq-len", "4096", "--checkpointing", "full"],
    "search": ["search", *README_EXAMPLE, "--gpus", "8"],
}  # fmt: skip


def fleet_yaml(pools_per_type: int = 4, variants: int = 5) -> str:
    """20 pools (5 GPU types × 4 cluster sizes, one price per type) × 100 jobs (the 20 jobs of
    bench_fleet.py, each in 5 variants of tokens, deadline and budget)."""
    from bench_fleet import JOBS

    types = [
        ("h100", "h100-sxm", 8, "nvlink", 50, 2.2, "2TiB", (16, 32, 64, 128)),
        ("a100", "a100-80gb", 8, "nvlink", 25, 1.4, "1TiB", (16, 32, 64, 128)),
        ("l40s", "l40s", 4, "pcie", 12.5, 0.9, "512GiB", (8, 16, 32, 64)),
        ("rtx4090", "rtx-4090", 8, "pcie", 12.5, 0.3, "256GiB", (8, 16, 24, 32)),
        ("a10g", "a10g", 8, "pcie", 12.5, 0.75, "512GiB", (8, 16, 32, 64)),
    ]
    lines = ["pools:"]
    for name, gpu, per_node, link, inter, price, ram, sizes in types:
        for k, count in enumerate(sizes[:pools_per_type]):
            lines.append(
                f"  - {{name: {name}-{k}, gpu: {gpu}, count: {count}, gpus_per_node: {per_node}, "
                f"link: {link}, inter_node_gb_s: {inter}, usd_per_gpu_hour: {price}, "
                f"cpu_ram_per_node: {ram}}}"
            )
    lines.append("jobs:")
    for i, (model, methods, batch, seq, tokens, deadline, budget) in enumerate(JOBS):
        base = float(tokens.rstrip("BM")) * (1e9 if tokens.endswith("B") else 1e6)
        for v in range(variants):
            extra = ""
            if deadline:
                extra += f", deadline_hours: {deadline * (1 + v / 2):g}"
            if budget:
                extra += f", budget_usd: {budget * (1 + v):g}"
            lines.append(
                f"  - {{name: job{i:02d}v{v}-{model}, model: {model}, methods: {methods}, "
                f"target_batch: {batch}, seq_len: {seq}, tokens: {base * (0.5 + v):g}{extra}}}"
            )
    return "\n".join(lines) + "\n"


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    return env


def measure(tree: Path, body: str, timeout: float = 900) -> dict | None:
    """Run IMPORTS + body in a fresh process on ``tree``; its JSON line, or None on failure."""
    run = subprocess.run(
        [sys.executable, "-c", IMPORTS + body],
        env=_env(tree),
        capture_output=True,
        text=True,
        cwd=tree,
        timeout=timeout,
        check=False,
    )
    if run.returncode:
        print(f"  ({tree.name}: failed: {run.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])


def cold(tree: Path, argv: list[str]) -> float:
    """CPU seconds of one whole ``fitplan`` process (start to exit)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "searcher.cli", *argv],
        env=_env(tree),
        cwd=tree,
        capture_output=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def best(results: list[dict | None]) -> dict | None:
    ok = [r for r in results if r]
    if not ok:
        return None
    return {
        "cpu": statistics.median(r["cpu"] for r in ok),
        "rss_mb": statistics.median(r["rss_mb"] for r in ok),
        "n": ok[0]["n"],
    }


def side_by_side(trees: dict[str, Path], body: str, repeat: int) -> dict[str, dict | None]:
    runs: dict[str, list[dict | None]] = {k: [] for k in trees}
    for _ in range(repeat):
        for k, tree in trees.items():
            runs[k].append(measure(tree, body))
    return {k: best(v) for k, v in runs.items()}


def llm_analysis_rate(python: str) -> float | None:
    """llm-analysis's CPU microseconds per training configuration, in its own venv."""
    code = r"""
import itertools, json, logging, time
logging.disable(logging.CRITICAL)
from llm_analysis.analysis import LLMAnalysis, ActivationRecomputation, DSZeRO
from llm_analysis.config import (ParallelismConfig, get_dtype_config_by_name,
    get_gpu_config_by_name, get_model_config_by_name)
model = get_model_config_by_name("NousResearch_Llama-2-7b-hf")
gpu, dtype = get_gpu_config_by_name("h100-sxm-80gb"), get_dtype_config_by_name("w16a16e16")
configs = list(itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (0, 1, 2, 3), (0, 2), (1, 2, 4)))
t = time.process_time()
for mb, dp, zero, ckpt, tp in configs:
    a = LLMAnalysis(model, gpu, dtype, ParallelismConfig(tp_size=tp, pp_size=1, dp_size=dp),
                    flops_efficiency=0.5, hbm_memory_efficiency=0.9)
    a.training(batch_size_per_gpu=mb, seq_len=4096, global_batch_size=mb * dp * 8,
               activation_recomputation=ActivationRecomputation(ckpt), ds_zero=DSZeRO(zero),
               flash_attn=True, mlp_gated_linear_units=True)
print(json.dumps({"us": (time.process_time() - t) / len(configs) * 1e6}))
"""
    rates = []
    for _ in range(3):  # its median
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
        if run.returncode == 0:
            rates.append(json.loads(run.stdout.strip().splitlines()[-1])["us"])
    return statistics.median(rates) if rates else None


def _fmt(r: dict | None, key: str = "cpu", unit: str = "s") -> str:
    if r is None:
        return "—"
    return f"{r[key]:.2f} {unit}" if key == "cpu" else f"{r[key]:.0f} MB"


def _ratio(old: dict | None, new: dict | None, key: str = "cpu") -> str:
    return "—" if not old or not new else f"{old[key] / new[key]:.1f}×"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="a git worktree of the previous release")
    ap.add_argument("--llm-analysis", metavar="PYTHON", help="a python with llm-analysis")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fleet-baseline-repeat", type=int, default=1, help="the old fleet: ~2 min")
    ap.add_argument("--cold-only", action="store_true", help="only the two cold starts (~1 min)")
    args = ap.parse_args()
    trees = {"new": ROOT}
    if args.baseline:
        trees["old"] = args.baseline.resolve()
    for tree in trees.values():  # bytecode once, as an installed package has it
        subprocess.run([sys.executable, "-m", "compileall", "-q", "constraints", "searcher"],
                       cwd=tree, check=False, capture_output=True)  # fmt: skip
    rows: list[tuple[str, dict[str, dict | None], str]] = []
    started = time.time()
    per_trial = {}
    if not args.cold_only:
        for label, gpus, batch in (
            ("single node: Llama-3.1-8B, 1–8 × H100, batch 64 × 4096", 8, 64),
            ("4,096 × H100, batch 4,096", 4096, 4096),
            ("16,384 × H100, batch 16,384", 16384, 16384),
        ):
            got = side_by_side(trees, SEARCH.format(gpus=gpus, batch=batch), args.repeat)
            rows.append((label, got, "search"))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "fleet-20x100.yaml"
            path.write_text(fleet_yaml())
            body = FLEET.format(path=str(path), workers=1)
            fleet = {"new": best([measure(ROOT, body) for _ in range(args.repeat)])}
            if "old" in trees:
                fleet["old"] = best(
                    [measure(trees["old"], body) for _ in range(args.fleet_baseline_repeat)]
                )
            rows.append(("fleet: 20 pools × 100 jobs, 1 process", fleet, "fleet"))
            two = FLEET.format(path=str(path), workers=2)
            rows.append(
                ("fleet: the same, 2 worker processes (CPU of all)",
                 {"new": best([measure(ROOT, two) for _ in range(args.repeat)])}, "fleet")
            )  # fmt: skip
        for trials in (640, 2560):
            got = side_by_side(trees, OPTUNA.format(trials=trials), max(1, args.repeat - 1))
            per_trial[trials] = got
    cold_rows = {}
    for name, argv in COLD.items():  # the trees alternating run by run
        cpu: dict[str, list[float]] = {k: [] for k in trees}
        for _ in range(args.repeat + 2):
            for k, tree in trees.items():
                cpu[k].append(cold(tree, argv))
        cold_rows[name] = {
            k: {"cpu": statistics.median(v), "rss_mb": 0, "n": 1} for k, v in cpu.items()
        }
    llma = llm_analysis_rate(args.llm_analysis) if args.llm_analysis else None
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")

    print(
        f"CPU time, median of {args.repeat} fresh processes; this tree vs the baseline side by side"
    )
    print(
        "| measurement | configurations | CPU (this tree) | peak RSS | CPU (previous release) | peak RSS | speed-up |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, got, _ in rows:
        new, old = got.get("new"), got.get("old")
        n = f"{new['n']:,}" if new else "—"
        print(f"| {label} | {n} | {_fmt(new)} | {_fmt(new, 'rss_mb')} | {_fmt(old)} | "
              f"{_fmt(old, 'rss_mb')} | {_ratio(old, new)} |")  # fmt: skip
    for trials, got in per_trial.items():
        new, old = got.get("new"), got.get("old")
        ms = lambda r: "—" if r is None else f"{r['cpu'] / r['n'] * 1e3:.2f} ms/trial"  # noqa: E731
        print(f"| optuna NSGA-II, {trials:,} trials (Qwen2.5-7B, 8 × H100) | — | {ms(new)} | "
              f"{_fmt(new, 'rss_mb')} | {ms(old)} | {_fmt(old, 'rss_mb')} | {_ratio(old, new)} |")  # fmt: skip
    for name, got in cold_rows.items():
        new, old = got.get("new"), got.get("old")
        print(f"| cold start: whole `fitplan {name}` process (README example) | — | {_fmt(new)} | — | "
              f"{_fmt(old)} | — | {_ratio(old, new)} |")  # fmt: skip
    single = rows[0][1].get("new") if rows else None
    if single:
        ours = single["cpu"] / single["n"] * 1e6
        line = f"per configuration of the single-node space: {ours:.2f} µs"
        if llma:
            line += f"; llm-analysis {llma:.0f} µs per configuration: {llma / ours:.0f}× ours"
        print(line)
    print(f"(run took {time.time() - started:.0f} s wall)")


if __name__ == "__main__":
    main()
