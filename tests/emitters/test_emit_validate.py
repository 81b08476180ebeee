"""The torchtune output validated by the released torchtune itself.

The emitted torchtune.sh runs ``tune run RECIPE --config BUILTIN key=value …``; here the same
overrides are merged into the built-in config by torchtune's own CLI merge
(``_merge_yaml_and_cli_args``, what ``tune run`` does) and the merged file is checked with
``tune validate`` (every ``_component_`` resolves and binds its arguments). The recipe must be one
the release registers.

torchtune lives in its own virtual environment (it pins torchao; .ci/run builds it as a separate
step): the one FITPLAN_EMIT_VALIDATE names (.ci/run builds it with tools/validation_venvs.sh). Without it the tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from searcher.emitters.base import EmitOptions
from searcher.emitters.formats.torchtune import torchtune_run
from searcher.emitters.plan import make_plan

# the venv .ci/run builds (tools/validation_venvs.sh); unset: the tests skip
VENV = Path(os.environ.get("FITPLAN_EMIT_VALIDATE", "/nonexistent/fitplan-validate-venv"))
PYTHON = VENV / "bin" / "python"

#: runs inside the torchtune venv: merge the overrides into the built-in config, then validate
MERGE_AND_VALIDATE = r"""
import json, subprocess, sys
from argparse import Namespace
from pathlib import Path

import torchtune
from omegaconf import OmegaConf
from torchtune._recipe_registry import get_all_recipes
from torchtune.config._utils import _merge_yaml_and_cli_args

job = json.loads(Path(sys.argv[1]).read_text())
registry = {r.name: r for r in get_all_recipes()}
if job["recipe"] not in registry:
    sys.exit(f"recipe {job['recipe']} is not in torchtune's registry")
configs = {c.name: c.file_path for c in registry[job["recipe"]].configs}
if job["config"] not in configs:
    sys.exit(f"config {job['config']} is not a config of {job['recipe']}")
# the recipes folder torchtune ships beside itself (not an importable package)
root = Path(torchtune.__file__).parent.parent / "recipes" / "configs"
base = OmegaConf.load(root / configs[job["config"]])
merged = _merge_yaml_and_cli_args(Namespace(**OmegaConf.to_container(base)), job["args"])
out = Path(sys.argv[2])
OmegaConf.save(merged, out)
r = subprocess.run([str(Path(sys.executable).parent / "tune"), "validate", str(out)],
                   capture_output=True, text=True)
print(r.stdout, r.stderr)
sys.exit(r.returncode)
"""

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "full-1gpu": ("llama-3.1-8b", dict(method="full", recipe="bf16-torch")),
    "full-fsdp-8gpu-chunked": (
        "llama-3.1-8b",
        dict(method="full", recipe="bf16-torch", zero=3, dp=8, loss="chunked"),
    ),
    "full-z2-offload-bwd": (
        "qwen2.5-7b",
        dict(
            method="full",
            recipe="bf16-torch",
            zero=2,
            dp=4,
            optimizer_in_backward=True,
            grad_accum=1,
        ),
    ),
    "lora-attention": (
        "llama-3.1-8b",
        dict(method="lora", lora_rank=16, lora_targets="attention", recipe="bf16-torch"),
    ),
    "lora-z3-4gpu-ckpt": (
        "mistral-7b-v0.1",
        dict(method="lora", lora_rank=32, recipe="bf16-torch", zero=3, dp=4, checkpointing="full"),
    ),
    "qlora-1gpu": (
        "llama-3.1-8b",
        dict(method="qlora", quant="nf4-dq", lora_rank=64, recipe="bf16-torch"),
    ),
    "full-tp2": ("llama-3.1-8b", dict(method="full", recipe="bf16-torch", zero=3, tp=2, dp=4)),
}


def validate(tmp_path: Path, model: str, knobs: dict[str, Any]) -> subprocess.CompletedProcess:
    # LoRA as torchtune builds it (adapters in the model's dtype), as search --emit torchtune pins
    adapters = {"adapter_dtype": "bf16"} if knobs.get("method", "full") != "full" else {}
    cfg = TrainConfig(**{"micro_batch": 2, "grad_accum": 4, "seq_len": 1024, **adapters, **knobs})
    plan = make_plan(cfg, model, gpu="h100-sxm")
    recipe, config, overrides, removals = torchtune_run(plan, EmitOptions(out="tt"), "torchtune")
    args = [f"{k}={v}" for k, v in overrides.items()] + [f"~{k}" for k in removals]
    args += ["checkpointer.checkpoint_dir=/tmp/model", "output_dir=/tmp/out"]
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"recipe": recipe, "config": config, "args": args}))
    script = tmp_path / "merge_and_validate.py"
    script.write_text(MERGE_AND_VALIDATE)
    return subprocess.run(
        [str(PYTHON), str(script), str(job), str(tmp_path / "merged.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no torchtune venv at {VENV}")
@pytest.mark.parametrize("name", list(CASES))
def test_torchtune_validates_the_merged_config(tmp_path: Path, name: str) -> None:
    model, knobs = CASES[name]
    r = validate(tmp_path, model, knobs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "well-formed" in r.stdout


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no torchtune venv at {VENV}")
def test_the_validator_can_fail(tmp_path: Path) -> None:
    """A component the release lacks (the unreleased LinearCrossEntropyLoss) fails validation:
    which is why the emitter refuses --loss fused."""
    with pytest.raises(FitplanError, match="LinearCrossEntropyLoss"):
        torchtune_run(
            make_plan(
                TrainConfig(method="full", recipe="bf16-torch", loss="fused"), "llama-3.1-8b"
            ),
            EmitOptions(out="tt"),
            "torchtune",
        )
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "recipe": "full_finetune_single_device",
                "config": "llama3_1/8B_full_single_device",
                "args": ["loss._component_=torchtune.modules.loss.LinearCrossEntropyLoss"],
            }
        )
    )
    script = tmp_path / "merge_and_validate.py"
    script.write_text(MERGE_AND_VALIDATE)
    r = subprocess.run(
        [str(PYTHON), str(script), str(job), str(tmp_path / "merged.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
