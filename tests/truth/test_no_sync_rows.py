"""Memory rows whose training loop accumulates under FSDP's no_sync are read as grad_sync
last-micro-batch: litgpt (litgpt/finetune/full.py at 00af8b0d, ``fabric.no_backward_sync(model,
enabled=is_accumulating)``) and the HF Trainer (the PEFT docs' FSDP runs); torchtune's recipes
call ``backward()`` on every micro-batch, so its FSDP rows keep each-micro-batch."""

from __future__ import annotations

import csv

from searcher.truth import cases as K
from searcher.truth import memory_rows as MR


def _row(row_id: str, path: object) -> dict[str, str]:
    with open(str(path), encoding="utf-8", newline="") as f:
        return next(r for r in csv.DictReader(f) if r["id"] == row_id)


def test_litgpt_fsdp_full_row_with_accumulation_runs_no_sync() -> None:
    case = MR.memory_case(_row("lg-gemma2b-full", K.HELDOUT_MEMORY_CSV))
    assert case.config is not None
    assert (case.config.zero, case.config.grad_accum) == (3, 4)
    assert case.config.grad_sync == "last-micro-batch"
    assert any("no_sync" in a for a in case.assumptions)


def test_hf_trainer_fsdp_row_runs_no_sync() -> None:
    case = MR.memory_case(_row("pd-fsdp-qlora-70b", K.HELDOUT_MEMORY_CSV))
    assert case.config is not None and case.config.grad_sync == "last-micro-batch"


def test_torchtune_and_deepspeed_rows_reduce_every_micro_batch() -> None:
    for row_id, path in (
        ("tt-2405-5", K.MEMORY_CSV),  # torchtune llama2/7B_full, FSDP over 4 GPUs
        ("pd-dsz3-qlora-70b", K.HELDOUT_MEMORY_CSV),  # HF Trainer under DeepSpeed ZeRO-3
    ):
        case = MR.memory_case(_row(row_id, path))
        if case.config is not None:
            assert case.config.grad_sync == "each-micro-batch", row_id


def test_a_single_gpu_litgpt_row_with_accumulation_keeps_the_default() -> None:
    case = MR.memory_case(_row("lg-tinyllama-full", K.HELDOUT_MEMORY_CSV))
    assert case.config is not None and case.config.grad_sync == "each-micro-batch"
