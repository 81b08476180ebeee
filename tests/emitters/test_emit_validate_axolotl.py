"""The axolotl output validated by the released axolotl itself.

Every representative plan axolotl emits (tests/emitters/test_emitters.py's PLANS, less the
refusals) is loaded the way ``axolotl train`` loads it (axolotl/cli/config.py ``load_cfg``: the
YAML into a ``DictDefault``, ``prepare_plugins``, then ``axolotl.utils.config.validate_config``,
the pydantic schema ``AxolotlConfigWCapabilities``) with the capabilities of the plan's GPU
(an H100: bf16, fp8, tf32, sm_90) and its GPU count. The schema ignores keys it does not know, so
the script also refuses any top-level key that is not a field of the schema (plugins' fields
merged in): a misspelt key would otherwise pass silently.

axolotl lives in its own virtual environment (it pins torchao and transformers versions of its
own; tools/validation_venvs.sh builds it): /work/venvs/axolotl, or the one
FITPLAN_AXOLOTL_VALIDATE names. Without it the tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_emitters import PLANS, REFUSE, plan_of

from searcher.emitters import get_emitter
from searcher.emitters.base import EmitOptions

# the venv .ci/run builds (tools/validation_venvs.sh); unset: the tests skip
VENV = Path(os.environ.get("FITPLAN_AXOLOTL_VALIDATE", "/nonexistent/fitplan-validate-venv"))
PYTHON = VENV / "bin" / "python"

#: runs inside the axolotl venv: argv[1] a JSON list of {"name", "yaml", "capabilities"}; prints
#: one JSON object, name -> {"ok", "error", "seen"} (one process: axolotl takes long to import)
LOAD_AND_VALIDATE = r"""
import json, sys, traceback
from pathlib import Path

import yaml
from axolotl.utils.config import merge_input_args, prepare_plugins, validate_config
from axolotl.utils.dict import DictDefault
from axolotl.utils.schemas.config import AxolotlInputConfig

SEEN = ("adapter", "micro_batch_size", "gradient_accumulation_steps", "optimizer", "load_in_4bit")
out = {}
for job in json.loads(Path(sys.argv[1]).read_text()):
    try:
        cfg = DictDefault(yaml.safe_load(job["yaml"]))
        prepare_plugins(cfg)
        schema = merge_input_args()[1] if cfg.plugins else AxolotlInputConfig
        known = set(schema.model_fields) | {
            f.alias for f in schema.model_fields.values() if f.alias
        }
        unknown = sorted(k for k in cfg if k not in known)
        if unknown:
            raise ValueError(f"keys axolotl's schema does not know: {unknown}")
        validated = validate_config(
            cfg,
            capabilities=job["capabilities"],
            env_capabilities={"torch_version": "2.13.0"},
        )
        out[job["name"]] = {"ok": True, "seen": {k: validated.get(k) for k in SEEN}}
    except Exception as err:
        out[job["name"]] = {"ok": False, "error": f"{type(err).__name__}: {err}"[:3000]}
print(json.dumps(out, default=str))
"""

CASES = [name for name in PLANS if (name, "axolotl") not in REFUSE]
#: capabilities of the plans' GPU (plan_of: h100-sxm), as axolotl's gpu_capabilities reports them
H100 = {"bf16": True, "fp8": True, "tf32": True, "n_node": 1, "compute_capability": "sm_90"}


def validate_all(folder: Path, jobs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Run axolotl's validation on every job in one process of the axolotl venv."""
    (folder / "jobs.json").write_text(json.dumps(jobs))
    script = folder / "load_and_validate.py"
    script.write_text(LOAD_AND_VALIDATE)
    r = subprocess.run(
        [str(PYTHON), str(script), str(folder / "jobs.json")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=folder,
        env={**os.environ, "AXOLOTL_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    results: dict[str, dict[str, Any]] = json.loads(r.stdout.strip().splitlines()[-1])
    return results


def emitted_yaml(name: str) -> str:
    return (
        get_emitter("axolotl").emit(plan_of(name), EmitOptions(out="ax")).file("axolotl.yaml").text
    )


#: hand-broken configs, each refused by axolotl (or by the unknown-key check)
BROKEN: dict[str, tuple[dict[str, object], str]] = {
    "misspelt-key": ({"micro_batch_sise": 2}, "micro_batch_sise"),
    # axolotl's schema: an adapter of qlora needs load_in_4bit
    "qlora-without-4bit": ({"adapter": "qlora", "load_in_4bit": False}, "4bit"),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    jobs = [
        {
            "name": name,
            "yaml": emitted_yaml(name),
            "capabilities": {**H100, "n_gpu": plan_of(name).gpus},
        }
        for name in CASES
    ]
    base = yaml.safe_load(emitted_yaml("lora-attention-dropout"))
    for name, (change, _needle) in BROKEN.items():
        jobs.append(
            {
                "name": name,
                "yaml": yaml.safe_dump({**base, **change}),
                "capabilities": {**H100, "n_gpu": 1},
            }
        )
    return validate_all(tmp_path_factory.mktemp("axolotl"), jobs)


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no axolotl venv at {VENV}")
@pytest.mark.parametrize("name", CASES)
def test_axolotl_validates_the_emitted_config(
    results: dict[str, dict[str, Any]], name: str
) -> None:
    r = results[name]
    assert r["ok"], r["error"]
    plan = plan_of(name)
    emitted = yaml.safe_load(emitted_yaml(name))
    # what axolotl read is what fitplan wrote (the schema did not drop or rename them)
    assert r["seen"]["micro_batch_size"] == plan.config.micro_batch
    assert r["seen"]["gradient_accumulation_steps"] == plan.config.grad_accum
    assert r["seen"]["adapter"] == emitted.get("adapter")
    assert r["seen"]["optimizer"] == emitted["optimizer"]


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no axolotl venv at {VENV}")
@pytest.mark.parametrize("name", list(BROKEN))
def test_the_validator_can_fail(results: dict[str, dict[str, Any]], name: str) -> None:
    r = results[name]
    assert not r["ok"]
    assert BROKEN[name][1] in r["error"]
