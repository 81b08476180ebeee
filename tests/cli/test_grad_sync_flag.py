"""`explain --grad-sync last-micro-batch`: litgpt's Llama-2-7B full fine-tune on 4 × A10G (FSDP1,
4 × 512, 4 micro-batches, checkpointing; config_hub/finetune README at 00af8b0d) ran out of memory.
Under no_sync each GPU holds the 6,738,415,616 parameters' bf16 gradients whole (12.55 GiB,
Llama-2-7B's published count × 2 B), which no longer fits the 24 GB card; with the gradients
reduced every micro-batch it does (a quarter of them)."""

from __future__ import annotations

import json

from searcher.cli import main

ARGS = [
    "explain",
    "--model",
    "llama-2-7b",
    "--gpu",
    "a10g",
    "--gpus",
    "4",
    "--method",
    "full",
    "--recipe",
    "bf16-torch",
    "--zero",
    "3",
    "--backend",
    "fsdp1",
    "--micro-batch",
    "4",
    "--seq-len",
    "512",
    "--grad-accum",
    "4",
    "--checkpointing",
    "full",
    "--json",
]
PARAMS = 6_738_415_616


def _explain(capsys, *extra: str) -> dict:
    main([*ARGS, *extra])
    out: dict = json.loads(capsys.readouterr().out)
    return out


def test_no_sync_holds_every_gradient_and_the_run_does_not_fit(capsys) -> None:
    synced = _explain(capsys)
    unsynced = _explain(capsys, "--grad-sync", "last-micro-batch")
    assert unsynced["config"]["grad_sync"] == "last-micro-batch"
    assert unsynced["memory_bytes"]["gradients"] == PARAMS * 2
    assert synced["memory_bytes"]["gradients"] < PARAMS * 2 / 4 * 1.5
    assert synced["fits"] and not unsynced["fits"]
