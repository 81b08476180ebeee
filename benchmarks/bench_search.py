"""Speed of the searcher: configurations per second, the full single-node search, cold starts.

    python benchmarks/bench_search.py            # prints a table; numbers go into the README

Timings are medians of several runs on the machine it runs on; no test asserts a time.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    from constraints.gpus import resolve_gpu
    from constraints.memory import memory_arrays
    from constraints.models import resolve_model
    from constraints.throughput import throughput_arrays
    from searcher.search.factors import grid
    from searcher.search.run import run_search
    from searcher.search.space import SearchProblem
    from searcher.search.strategies import ExhaustiveStrategy

    problem = SearchProblem(
        model=resolve_model("llama-3.1-8b"),
        gpu=resolve_gpu("h100-sxm"),
        max_gpus=8,
        target_batch=64,
        seq_len=4096,
    )
    batch = grid(problem)
    n = len(batch)
    t_grid = median_time(lambda: grid(problem))
    t_mem = median_time(lambda: memory_arrays(problem.model, batch, problem.gpu))
    mem = memory_arrays(problem.model, batch, problem.gpu)
    t_tput = median_time(lambda: throughput_arrays(problem.model, batch, problem.gpu, memory=mem))
    t_search = median_time(lambda: run_search(problem, ExhaustiveStrategy()))
    help_cold = median_time(
        lambda: subprocess.run(
            [sys.executable, "-m", "searcher.cli", "--help"], capture_output=True, check=True
        )
    )
    search_cold = median_time(
        lambda: subprocess.run(
            [
                sys.executable,
                "-m",
                "searcher.cli",
                "search",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-sxm",
                "--gpus",
                "8",
                "--target-batch",
                "64",
                "--seq-len",
                "4096",
                "--json",
            ],
            capture_output=True,
            check=True,
        ),
        repeat=3,
    )
    rows = [
        (
            "configurations in the full single-node space (Llama-3.1-8B, 1–8 × H100, all knobs)",
            f"{n:,}",
        ),
        ("build the space (grid)", f"{t_grid * 1e3:.0f} ms"),
        (
            "memory model, all configurations",
            f"{t_mem * 1e3:.0f} ms ({n / t_mem / 1e6:.2f} M configs/s)",
        ),
        (
            "throughput model, all configurations",
            f"{t_tput * 1e3:.0f} ms ({n / t_tput / 1e6:.2f} M configs/s)",
        ),
        (
            "full search (space + memory + throughput on the feasible + Pareto)",
            f"{t_search * 1e3:.0f} ms",
        ),
        ("cold start: fitplan --help", f"{help_cold * 1e3:.0f} ms"),
        (
            "cold start: one fitplan search --json (process start to exit)",
            f"{search_cold * 1e3:.0f} ms",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
