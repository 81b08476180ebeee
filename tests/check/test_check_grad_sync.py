"""`fitplan check` reads when an HF-Trainer family config reduces its gradients (grad_sync).

The Trainer runs every micro-batch but the last under accelerate's ``no_sync`` unless
``accelerator_config.gradient_accumulation_kwargs.sync_each_batch`` (transformers trainer.py);
under FSDP the others hold every gradient unsharded. axolotl's examples/llama-3/qlora-fsdp-70b.yaml
(commit 2f5cb9da) shards with FSDP (FULL_SHARD) and accumulates 4 micro-batches without it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from test_check import DATA, run_json

AXOLOTL_FSDP = "axolotl-qlora-fsdp-70b.yaml"
ARGS = ("--model", "llama-3.1-70b", "--gpu", "h100", "--gpus", "4")


def test_fsdp_with_accumulation_and_no_sync_each_batch_is_last_micro_batch(capsys) -> None:
    _code, out = run_json(capsys, str(DATA / AXOLOTL_FSDP), *ARGS)
    c = out["config"]
    assert (c["zero"], c["grad_accum"]) == (3, 4)
    assert c["grad_sync"] == "last-micro-batch"
    assert any("no_sync" in n for n in out["notes"])


def test_sync_each_batch_true_is_read(tmp_path: Path, capsys) -> None:
    text = (DATA / AXOLOTL_FSDP).read_text(encoding="utf-8")
    f = tmp_path / AXOLOTL_FSDP
    f.write_text(
        text + "accelerator_config:\n  gradient_accumulation_kwargs:\n    sync_each_batch: true\n",
        encoding="utf-8",
    )
    _code, out = run_json(capsys, str(f), *ARGS)
    assert out["config"]["grad_sync"] == "each-micro-batch"
    assert not any("no_sync" in n for n in out["notes"])
    used = [u for u in out["keys"] if u["key"].endswith("sync_each_batch")]
    assert used and used[0]["field"] == "grad_sync"


def test_no_accumulation_is_each_micro_batch(tmp_path: Path, capsys) -> None:
    text = (DATA / AXOLOTL_FSDP).read_text(encoding="utf-8")
    f = tmp_path / AXOLOTL_FSDP
    f.write_text(text.replace("gradient_accumulation_steps: 4", "gradient_accumulation_steps: 1"))
    _code, out = run_json(capsys, str(f), *ARGS)
    assert out["config"]["grad_sync"] == "each-micro-batch"
    assert not any("no_sync" in n for n in out["notes"])


def test_last_micro_batch_costs_the_unsharded_gradients(tmp_path: Path, capsys) -> None:
    # the same run told to sync each batch needs less memory per GPU (QLoRA: the adapters only)
    _c, unsynced = run_json(capsys, str(DATA / AXOLOTL_FSDP), *ARGS)
    shutil.copy(DATA / AXOLOTL_FSDP, tmp_path / AXOLOTL_FSDP)
    f = tmp_path / AXOLOTL_FSDP
    f.write_text(
        f.read_text(encoding="utf-8")
        + "accelerator_config:\n  gradient_accumulation_kwargs:\n    sync_each_batch: true\n"
    )
    _c, synced = run_json(capsys, str(f), *ARGS)
    assert unsynced["explain"]["needed_bytes"] > synced["explain"]["needed_bytes"]
