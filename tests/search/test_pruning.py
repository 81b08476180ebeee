"""Pruning is exact: on a few hundred random problems (seeded, the same every run) the streamed,
pruned exhaustive search gives the answers of the unpruned all-at-once one, byte for byte —
the Pareto front in its order, the rejection reasons, the fastest per GPU count — and every
bound it prunes with is on the right side of the exact value it stands for.

The reference is independent of the code under test: ``keep_evaluation=True`` evaluates the
whole grid at once (``space.grid`` + ``evaluate``) without streaming or bounds."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from constraints.gpus import resolve_gpu
from constraints.models import catalog_ids, resolve_model
from searcher.search.evaluate import evaluate
from searcher.search.factors import Factors
from searcher.search.run import run_search
from searcher.search.sinks import BestPerSink, FrontSink, RejectionSink
from searcher.search.space import SearchProblem
from searcher.search.strategies import ExhaustiveStrategy
from searcher.search.stream import memory_reads, stream_search
from searcher.search.views import result_json

GPUS = ("rtx-4090", "a100-80gb", "h100-sxm", "l40s", "a10g", "v100-32gb", "t4", "24GB")
SMALL_MODELS = (
    "qwen2.5-0.5b",
    "qwen2.5-1.5b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "phi-3-mini-4k",
    "gpt2-xl",
    "llama-3.1-8b",
    "mistral-7b-v0.1",
    "gemma-2-9b",
    "llama-2-13b",
)
PIN_CHOICES = {
    "optimizer": ("adamw", "adamw-8bit", "paged-adamw-8bit"),
    "recipe": ("bf16-master", "bf16-torch"),
    "lora_rank": (8, 64),
    "method": ("full", "lora", "qlora"),
    "checkpointing": ("none", "full"),
    "loss": ("standard", "fused"),
    "zero": (0, 2, 3),
}


def random_problem(rng: random.Random) -> SearchProblem:
    """A small random problem: a catalog model, a GPU, up to 16 GPUs, a batch with many
    micro-batch choices (the knob pruning bounds over), and a few random pins."""
    models = [m for m in SMALL_MODELS if m in set(catalog_ids())]
    pins = {k: rng.choice(v) for k, v in PIN_CHOICES.items() if rng.random() < 0.55}
    return SearchProblem(
        model=resolve_model(rng.choice(models)),
        gpu=resolve_gpu(rng.choice(GPUS)),
        max_gpus=rng.choice((1, 1, 2, 4, 8, 16)),
        target_batch=rng.choice((1, 4, 8, 12, 16, 32, 48, 64)),
        seq_len=rng.choice((256, 1024, 2048, 4096, 8192)),
        pins=pins,
        gpus_per_node=rng.choice((4, 8)),
        cpu_ram_per_node=rng.choice((16, 64, 256)) * 2**30,
    )


def problems(n: int, seed: int) -> list[SearchProblem]:
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        p = random_problem(rng)
        try:
            size = Factors(p).size
        except Exception:  # no layout for this batch and these pins: not a pruning question
            continue
        if 0 < size <= 20_000:
            out.append(p)
    return out


def answer(result) -> str:
    out = result_json(result)
    out.pop("feasible")  # counted among the evaluated: pruning evaluates fewer
    out.pop("pruned")
    return json.dumps(out, sort_keys=True, default=str)


@pytest.mark.parametrize("seed", range(6))
def test_pruned_search_gives_the_unpruned_answer(seed: int) -> None:
    """50 problems per seed, 300 in all; small chunks so that every sink merges many."""
    for p in problems(50, seed):
        pruned = run_search(p, ExhaustiveStrategy(chunk=4096, prune=True))
        exact = run_search(p, ExhaustiveStrategy(), keep_evaluation=True)
        assert answer(pruned) == answer(exact), p
        assert pruned.evaluated == exact.evaluated  # the whole space is accounted for
        assert pruned.feasible <= exact.feasible


def _fastest_per_count(ev) -> dict[int, str]:
    ok = np.flatnonzero(ev.feasible)
    speed = np.nan_to_num(ev.throughput["tokens_per_s"][ok], nan=0.0)
    order = ok[np.lexsort((ev.needed[ok], -ev.fidelity[ok], -speed, ev.batch.gpus[ok]))]
    out: dict[int, str] = {}
    for i in order:
        out.setdefault(int(ev.batch.gpus[i]), ev.batch.config(int(i)).model_dump_json())
    return out


@pytest.mark.parametrize("seed", range(2))
def test_pruned_fastest_per_gpu_count_is_exact(seed: int) -> None:
    """The fleet's question (the fastest configuration at each GPU count) under pruning."""
    for p in problems(40, 100 + seed):
        best = BestPerSink(lambda ev: ev.batch.gpus, lambda b: b.gpus)
        stream_search(p, [best, RejectionSink(p)], chunk=4096)
        got = {g: ev.batch.config(0).model_dump_json() for g, ev in best.rows()}
        assert got == _fastest_per_count(ExhaustiveStrategy().run(p)), p


def test_bounds_are_on_the_right_side() -> None:
    """The two contracts pruning rests on, checked row by row against exact evaluations:
    memory only grows with the micro-batch while accumulating, and the throughput model given
    a smaller micro-batch's memory figures is at least as fast as the exact one."""
    from searcher.search.stream import _throughput

    checked = 0
    for p in problems(40, 7):
        f = Factors(p)
        if not f.size:
            continue
        s, r = next(f.pairs(None, chunk=1 << 40))
        ev = evaluate(p, f.batch(s, r))
        keys = f.key(s, r)
        corner_keys = f.key(s, f.corner[r])
        pos = np.searchsorted(keys, corner_keys)
        interior = np.flatnonzero((f.corner[r] != r) & (f.row_arr["grad_accum"][r] > 1))
        if not interior.size:
            continue
        assert np.all(keys[pos[interior]] == corner_keys[interior])
        c = pos[interior]
        assert np.all(ev.needed[interior] >= ev.needed[c] - 1e-6), p
        if p.gpu.custom:
            continue
        reads = memory_reads(p, ev)
        lb_mem = {k: ev.memory[k][c] for k in reads}
        exact_mem = {k: ev.memory[k][interior] for k in ev.memory}
        sub = ev.batch.take(interior)
        ub = _throughput(p, sub, lb_mem)["tokens_per_s"]
        exact = _throughput(p, sub, exact_mem)["tokens_per_s"]
        assert np.all(ub >= exact * (1 - 1e-12)), p
        checked += interior.size
    assert checked > 5_000  # rows checked over the 40 problems (the backend table shrank the space)


def test_front_sink_merging_chunks_equals_one_front() -> None:
    """The running front over many chunks equals the front of everything at once."""
    p = problems(1, 11)[0]
    ev = ExhaustiveStrategy().run(p)
    keys = np.arange(len(ev.batch))
    whole, parts = FrontSink(p), FrontSink(p)
    whole.add(ev, keys)
    for start in range(0, len(keys), 997):
        idx = keys[start : start + 997]
        parts.add(ev.take(idx), idx)
    assert [m.config for m in whole.members("cost")] == [m.config for m in parts.members("cost")]
