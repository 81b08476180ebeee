"""Speed of the fleet planner: 5 pools × 20 jobs, searched and placed.

    python benchmarks/bench_fleet.py             # prints a table; numbers go into the README
    python benchmarks/bench_fleet.py --write F   # also writes the fleet file it plans

The fleet: an H100 cluster (32 GPUs, 4 nodes), an A100 cluster (32, 4 nodes), an L40S pool
(16, 4 per node, PCIe), an RTX 4090 box (8) and an A10G pool (8); twenty jobs from 0.5 B to 72 B
parameters, full / LoRA / QLoRA, some with deadlines and budgets. Every (job, pool) pair is an
exhaustive multi-node search; then the exact MILP places them. No test asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

POOLS = """\
pools:
  - {name: h100, gpu: h100-sxm, count: 32, gpus_per_node: 8, link: nvlink, inter_node_gb_s: 50, usd_per_gpu_hour: 2.2, cpu_ram_per_node: 2TiB}
  - {name: a100, gpu: a100-80gb, count: 32, gpus_per_node: 8, link: nvlink, inter_node_gb_s: 25, usd_per_gpu_hour: 1.4, cpu_ram_per_node: 1TiB}
  - {name: l40s, gpu: l40s, count: 16, gpus_per_node: 4, link: pcie, inter_node_gb_s: 12.5, usd_per_gpu_hour: 0.9}
  - {name: rtx4090, gpu: rtx-4090, count: 8, link: pcie, usd_per_gpu_hour: 0.3, cpu_ram_per_node: 256GiB}
  - {name: a10g, gpu: a10g, count: 8, link: pcie, usd_per_gpu_hour: 0.75}
"""

# (model, methods, target batch, seq len, tokens, deadline h, budget $)
JOBS = [
    ("qwen2.5-0.5b", "[full]", 64, 2048, "2B", None, None),
    ("qwen2.5-1.5b", "[full, lora]", 64, 4096, "2B", 24, None),
    ("llama-3.2-1b", "[full]", 32, 2048, "1B", None, 200),
    ("llama-3.2-3b", "[lora, qlora]", 32, 4096, "500M", None, None),
    ("qwen2.5-3b", "[full]", 64, 4096, "1B", 48, None),
    ("phi-3-mini-4k", "[lora]", 32, 4096, "300M", None, None),
    ("llama-3.1-8b", "[full]", 128, 4096, "5B", 72, None),
    ("llama-3.1-8b", "[lora]", 32, 2048, "200M", None, 50),
    ("mistral-7b-v0.3", "[qlora]", 16, 2048, "100M", None, None),
    ("qwen2.5-7b", "[full, lora]", 64, 8192, "2B", 48, None),
    ("gemma-2-9b", "[lora]", 32, 4096, "500M", None, None),
    ("qwen3-8b", "[full]", 64, 4096, "1B", None, None),
    ("llama-2-13b", "[lora, qlora]", 32, 4096, "300M", None, None),
    ("qwen2.5-14b", "[full]", 64, 4096, "1B", 96, None),
    ("phi-3-medium-4k", "[qlora]", 16, 4096, "200M", None, 100),
    ("gemma-2-27b", "[lora]", 32, 4096, "500M", None, None),
    ("qwen2.5-32b", "[lora, qlora]", 32, 4096, "500M", 48, None),
    ("mixtral-8x7b", "[lora]", 32, 4096, "500M", None, None),
    ("llama-3.1-70b", "[full]", 256, 4096, "2B", 200, None),
    ("qwen2.5-72b", "[lora]", 64, 4096, "1B", 36, 20000),
]


def fleet_yaml() -> str:
    lines = [POOLS, "jobs:"]
    for i, (model, methods, batch, seq, tokens, deadline, budget) in enumerate(JOBS):
        extra = ""
        if deadline:
            extra += f", deadline_hours: {deadline}"
        if budget:
            extra += f", budget_usd: {budget}"
        lines.append(
            f"  - {{name: job{i:02d}-{model}, model: {model}, methods: {methods}, "
            f"target_batch: {batch}, seq_len: {seq}, tokens: {tokens}{extra}}}"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", metavar="FILE", help="write the benchmark fleet file")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    text = fleet_yaml()
    if args.write:
        Path(args.write).write_text(text)
    from constraints.errors import FitplanError
    from searcher.fleet.placement import solve
    from searcher.fleet.plan import items_of, plan_fleet
    from searcher.fleet.schema import load_fleet

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-fleet.yaml"
        path.write_text(text)
        fleet = load_fleet(path)
    plan_fleet(fleet, workers=1)  # warm: imports, catalog caches, scipy
    cpus = os.cpu_count() or 1
    rows = []
    cpu_seconds = []
    for _ in range(args.repeat):
        start = time.process_time()
        plan_fleet(fleet, workers=1)
        cpu_seconds.append(time.process_time() - start)
    for label, workers in (("1 process (the default)", 1), (f"{cpus} processes", cpus)):
        runs = [plan_fleet(fleet, workers=workers) for _ in range(args.repeat)]
        total = statistics.median(r.search_seconds + r.solve_seconds for r in runs)
        search = statistics.median(r.search_seconds for r in runs)
        place = statistics.median(r.solve_seconds for r in runs)
        rows.append((label, total, search, place))
    plan = runs[-1]
    evaluated = sum(c.evaluated for c in plan.cells.values())
    options = sum(len(c.options) for c in plan.cells.values())
    print(f"fleet: {len(fleet.pools)} pools × {len(fleet.jobs)} jobs = {len(plan.cells)} searches")
    print(f"configurations evaluated: {evaluated:,}; placement options after pruning: {options}")
    print(f"placed {len(plan.placed)} of {len(fleet.jobs)}, total ${plan.total_usd:,.0f}")
    try:
        exh = solve(items_of(plan), len(fleet.jobs), [p.count for p in fleet.pools], "exhaustive")
        agree = exh.placed == plan.assignment.placed and abs(exh.cost - plan.assignment.cost) < 1e-6
        print(f"exhaustive solver: same optimum: {agree}")
    except FitplanError as err:
        print(f"exhaustive solver: {err}")
    print("| run | plan (search + place) | search | place (MILP) |")
    print("|---|---|---|---|")
    for label, total, search, place in rows:
        print(f"| {label} | {total:.2f} s | {search:.2f} s | {place * 1e3:.0f} ms |")
    print(
        f"CPU time of one plan in 1 process: {statistics.median(cpu_seconds):.2f} s "
        "(insensitive to other load on the machine)"
    )


if __name__ == "__main__":
    main()
