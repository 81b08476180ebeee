"""A front member's alternatives: every other feasible configuration with its objective vector,
by brute force over the whole grid, the same however the grid is streamed; shown by what they
change."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.cli import main
from searcher.search.alternatives import KEPT
from searcher.search.run import run_search
from searcher.search.space import SearchProblem
from searcher.search.strategies import ExhaustiveStrategy

PROBLEMS = [
    ("llama-3.1-8b", "a100-80gb", 8, {}),
    ("llama-3.2-1b", "rtx-4090", 1, {}),
    ("qwen2.5-1.5b", "rtx-4090", 2, {"method": "qlora"}),
]


def problem(model: str, gpu: str, gpus: int, pins: dict) -> SearchProblem:
    return SearchProblem(
        model=resolve_model(model),
        gpu=resolve_gpu(gpu),
        max_gpus=gpus,
        target_batch=32,
        seq_len=2048,
        pins=pins,
    )


@pytest.mark.parametrize("case", PROBLEMS, ids=[c[0] for c in PROBLEMS])
def test_alternatives_are_the_other_rows_with_the_members_objectives(case) -> None:
    p = problem(*case)
    ev = ExhaustiveStrategy().run(p)  # the whole grid, in grid order
    ok = np.flatnonzero(ev.feasible)
    obj = ev.objectives()[ok]
    speed = np.nan_to_num(ev.throughput["tokens_per_s"][ok], nan=0.0)
    configs = [ev.batch.config(int(i)) for i in ok]
    result = run_search(p, ExhaustiveStrategy())
    listed = 0
    for m in result.front:
        (me,) = [j for j, c in enumerate(configs) if c == m.config]
        same = np.flatnonzero(np.all(obj == obj[me], axis=1))
        same = same[same != me]
        order = same[np.lexsort((same, ev.batch.gpus[ok][same], -speed[same]))]
        assert list(m.alternatives) == [configs[j] for j in order[:KEPT]], m.config
        assert all(speed[j] <= speed[me] for j in same)  # the member is the fastest of them
        listed += len(m.alternatives)
    assert listed  # each problem has some (NF4 beside NF4-DQ where the base is offloaded, …)


@pytest.mark.parametrize("case", PROBLEMS, ids=[c[0] for c in PROBLEMS])
def test_a_streamed_search_keeps_the_alternatives_of_an_all_at_once_one(case) -> None:
    p = problem(*case)
    whole = run_search(p, ExhaustiveStrategy())
    for chunk in (97, 1024):
        streamed = run_search(p, ExhaustiveStrategy(chunk=chunk))
        assert [m.alternatives for m in streamed.front] == [m.alternatives for m in whole.front]


def test_search_names_what_each_alternative_changes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "8"]
    main([*argv, "--stack", "none", "--json"])
    front = json.loads(capsys.readouterr().out)["front"]
    qlora = [m for m in front if m["config"]["quant"] == "nf4-dq" and m["alternatives"]]
    assert qlora and {"quant": "nf4"} in qlora[0]["alternatives"]
    rank = front.index(qlora[0]) + 1
    main([*argv, "--stack", "none", "--top", str(rank)])
    screen = capsys.readouterr().out
    row = re.search(rf"│\s*▶?{rank} │", screen)
    assert row, screen
    cell = screen[row.start() :].split("└")[0]
    assert "≈ nf4" in " ".join(cell.split())
    assert "≈: plans the front counts as this one" in screen
