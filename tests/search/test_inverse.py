"""Inverse questions: each bisection agrees with a direct scan of the same exact search."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.cli import main
from searcher.search.inverse import best_member, max_micro_batch, max_seq_len, min_gpus
from searcher.search.space import SearchProblem

PINS = {
    "method": "full",
    "recipe": "bf16-torch",
    "optimizer": "adamw",
    "zero": 0,
    "offload": "none",
    "checkpointing": "full",
    "loss": "fused",
    "tp": 1,
    "pp": 1,
    "optimizer_in_backward": False,
}


def problem(**kw) -> SearchProblem:
    base = dict(
        model=resolve_model("llama-3.2-1b"),
        gpu=resolve_gpu("24GB"),
        max_gpus=1,
        target_batch=1,
        seq_len=2048,
        pins=dict(PINS),
    )
    base.update(kw)
    return SearchProblem(**base)


def test_max_micro_batch_matches_a_scan():
    p = problem()
    answer = max_micro_batch(p)
    assert answer.value is not None
    # the scan: every micro-batch up to two past the answer, each its own exhaustive search
    feasible = [
        b
        for b in range(1, answer.value + 3)
        if best_member(replace(p, pins={**p.pins, "micro_batch": b}, target_batch=b)) is not None
    ]
    assert feasible == list(range(1, answer.value + 1))
    assert answer.member.config.micro_batch == answer.value


def test_max_seq_len_is_the_boundary():
    p = problem(pins={**PINS, "micro_batch": 1})
    answer = max_seq_len(p)
    assert answer.value is not None and not answer.limited_by_bound
    assert best_member(replace(p, seq_len=answer.value)) is not None
    assert best_member(replace(p, seq_len=answer.value + 1)) is None


def test_min_gpus_is_the_boundary():
    p = SearchProblem(
        model=resolve_model("llama-3.1-8b"),
        gpu=resolve_gpu("rtx-4090"),
        max_gpus=16,
        target_batch=16,
        seq_len=2048,
        pins={"method": "full", "recipe": "bf16-master", "optimizer": "adamw", "offload": "none"},
    )
    answer = min_gpus(p)
    assert answer.value is not None and answer.member.gpus == answer.value
    assert best_member(replace(p, max_gpus=answer.value - 1)) is None


def test_max_cli_json(capsys):
    code = main(
        [
            "max",
            "micro-batch",
            "--model",
            "llama-3.2-1b",
            "--gpu",
            "24GB",
            "--method",
            "full",
            "--recipe",
            "bf16-torch",
            "--optimizer",
            "adamw",
            "--zero",
            "0",
            "--offload",
            "none",
            "--checkpointing",
            "full",
            "--fused-ce",
            "--seq-len",
            "2048",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["value"] == out["member"]["config"]["micro_batch"]


def test_cheapest_catalog_gpu(capsys):
    code = main(["fits", "--cheapest-for", "llama-3.2-1b", "--target-batch", "8", "--json"])
    out = json.loads(capsys.readouterr().out)
    costs = [o["member"]["usd_per_mtok"] for o in out["options"]]
    assert code == 0 and costs == sorted(costs) and len(costs) > 3


def test_max_without_model_is_one_line(capsys):
    assert main(["max", "gpus", "--gpu", "a100-80gb"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("question", ["seq-len", "micro-batch", "gpus"])
def test_nothing_fits_says_so(question, capsys):
    code = main(
        [
            "max",
            question,
            "--model",
            "llama-3.1-70b",
            "--gpu",
            "t4",
            "--gpus",
            "1",
            "--method",
            "full",
            "--recipe",
            "bf16-master",
            "--optimizer",
            "adamw",
            "--offload",
            "none",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["value"] is None
