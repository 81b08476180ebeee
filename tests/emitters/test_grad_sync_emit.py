"""The emitted run reduces gradients when the plan says (``grad_sync``).

The HF Trainer runs every micro-batch but the last under ``accelerator.no_sync`` unless accelerate's
``GradientAccumulationPlugin(sync_each_batch=True)`` (transformers trainer.py: "We sync the
gradients in the following cases: 1. sync_each_batch set to True 2. Using deepspeed 3. when we
are at the last batch"); under FSDP that holds every gradient unsharded, which the default plan
(each-micro-batch) does not count. So an FSDP plan that accumulates must say sync_each_batch
true, and a last-micro-batch plan false; TrainingArguments passes
``accelerator_config.gradient_accumulation_kwargs`` to the plugin (trainer.py
create_accelerator_and_postprocess).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_emitters import emit, load_script, write

from constraints.config import TrainConfig
from searcher.emitters import get_emitter
from searcher.emitters.base import EmitOptions
from searcher.emitters.plan import make_plan


def _kwargs(name: str, fmt: str, tmp_path: Path) -> dict[str, Any]:
    folder = write(emit(name, fmt, out=str(tmp_path)), tmp_path)
    m = load_script(folder / "train.py")
    kw: dict[str, Any] = m.training_arguments_kwargs(
        m.parse_args(["--output-dir", str(tmp_path / "run")])
    )
    return kw


def _gradient_kwargs(kw: dict[str, Any]) -> dict[str, Any] | None:
    return (kw.get("accelerator_config") or {}).get("gradient_accumulation_kwargs")


@pytest.mark.heavy  # the script's helpers import torch
@pytest.mark.parametrize("fmt", ["hf", "torchrun", "accelerate"])
def test_fsdp_plan_that_accumulates_syncs_each_batch(fmt: str, tmp_path: Path) -> None:
    # full-z3-offload-all-torch: FSDP full shard over 8 GPUs, grad_accum 4 (test_emitters PLANS)
    kw = _kwargs("full-z3-offload-all-torch", fmt, tmp_path)
    assert _gradient_kwargs(kw) == {"sync_each_batch": True}


@pytest.mark.heavy
@pytest.mark.parametrize("fmt", ["hf", "accelerate"])
def test_last_micro_batch_plan_keeps_the_trainers_no_sync(fmt: str, tmp_path: Path) -> None:
    kw = _kwargs("fsdp-last-micro-batch", fmt, tmp_path)
    assert _gradient_kwargs(kw) == {"sync_each_batch": False}


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["full-z3-8gpu-master-ckpt", "full-z0-ddp-fp32-sgd"])
def test_nothing_is_set_without_fsdp_sharded_gradients(name: str, tmp_path: Path) -> None:
    # DeepSpeed ZeRO-3 (the Trainer syncs under DeepSpeed) and DDP (gradients whole anyway)
    fmt = "deepspeed" if "master" in name else "hf"
    assert _gradient_kwargs(_kwargs(name, fmt, tmp_path)) is None


def test_nothing_is_set_without_accumulation(tmp_path: Path) -> None:
    cfg = TrainConfig(method="full", recipe="bf16-torch", zero=3, dp=4, grad_accum=1)
    plan = make_plan(cfg, "llama-3.1-8b", gpu="h100-sxm")
    emission = get_emitter("hf").emit(plan, EmitOptions(out=str(tmp_path)))
    m = load_script(write(emission, tmp_path) / "train.py")
    assert m.SYNC_EACH_BATCH is None


@pytest.mark.parametrize(
    ("name", "want"), [("full-z3-offload-all-torch", True), ("fsdp-last-micro-batch", False)]
)
def test_axolotl_writes_the_accelerator_config(name: str, want: bool) -> None:
    emission = emit(name, "axolotl")
    doc = yaml.safe_load(next(f.text for f in emission.files if f.name == "axolotl.yaml"))
    assert doc["accelerator_config"] == {"gradient_accumulation_kwargs": {"sync_each_batch": want}}
