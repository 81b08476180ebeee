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

import pytest
import yaml
from test_emitters import PLANS, REFUSE, plan_of

from searcher.emitters import get_emitter
from searcher.emitters.base import EmitOptions

VENV = Path(os.environ.get("FITPLAN_AXOLOTL_VALIDATE", "/work/venvs/axolotl"))
PYTHON = VENV / "bin" / "python"

#: runs inside the axolotl venv: argv[1] the YAML, argv[2] the capabilities JSON
LOAD_AND_VALIDATE = r"""
import json, sys
from pathlib import Path

import yaml
from axolotl.utils.config import prepare_plugins, validate_config
from axolotl.utils.dict import DictDefault

cfg = DictDefault(yaml.safe_load(Path(sys.argv[1]).read_text()))
prepare_plugins(cfg)
if cfg.plugins:
    from axolotl.utils.config import merge_input_args

    _, schema = merge_input_args()
else:
    from axolotl.utils.schemas.config import AxolotlInputConfig as schema
known = set(schema.model_fields) | {
    f.alias for f in schema.model_fields.values() if f.alias
}
unknown = sorted(k for k in cfg if k not in known)
if unknown:
    sys.exit(f"keys axolotl's schema does not know: {unknown}")
caps = json.loads(sys.argv[2])
validated = validate_config(
    cfg, capabilities=caps, env_capabilities={"torch_version": "2.13.0"}
)
print(json.dumps({k: validated.get(k) for k in ("adapter", "deepspeed", "fsdp_config",
      "micro_batch_size", "gradient_accumulation_steps", "optimizer", "load_in_4bit")},
      default=str))
"""

CASES = [name for name in PLANS if (name, "axolotl") not in REFUSE]
#: capabilities of the plans' GPU (plan_of: h100-sxm), as axolotl's gpu_capabilities reports them
H100 = {"bf16": True, "fp8": True, "tf32": True, "n_node": 1, "compute_capability": "sm_90"}


def validate(tmp_path: Path, text: str, gpus: int) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "axolotl.yaml"
    path.write_text(text)
    script = tmp_path / "load_and_validate.py"
    script.write_text(LOAD_AND_VALIDATE)
    caps = json.dumps({**H100, "n_gpu": gpus})
    return subprocess.run(
        [str(PYTHON), str(script), str(path), caps],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "AXOLOTL_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no axolotl venv at {VENV}")
@pytest.mark.parametrize("name", CASES)
def test_axolotl_validates_the_emitted_config(tmp_path: Path, name: str) -> None:
    plan = plan_of(name)
    emission = get_emitter("axolotl").emit(plan, EmitOptions(out="ax"))
    text = emission.file("axolotl.yaml").text
    r = validate(tmp_path, text, plan.gpus)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    emitted = yaml.safe_load(text)
    # what axolotl read is what fitplan wrote (the schema did not drop or rename them)
    assert seen["micro_batch_size"] == plan.config.micro_batch
    assert seen["gradient_accumulation_steps"] == plan.config.grad_accum
    assert seen["adapter"] == emitted.get("adapter")


@pytest.mark.heavy
@pytest.mark.skipif(not PYTHON.exists(), reason=f"no axolotl venv at {VENV}")
@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"micro_batch_sise": 2}, "micro_batch_sise"),  # a misspelt key
        (
            {
                "sample_packing": True,
                "pad_to_sequence_len": None,
                "flash_attention": None,
                "sdp_attention": None,
                "eager_attention": None,
                "adapter": "qlora",
                "load_in_4bit": False,
            },
            "load_in_4bit",
        ),  # axolotl: qlora needs a 4-bit base
    ],
)
def test_the_validator_can_fail(tmp_path: Path, change: dict[str, object], needle: str) -> None:
    emitted = yaml.safe_load(
        get_emitter("axolotl")
        .emit(plan_of("lora-attention-dropout"), EmitOptions(out="ax"))
        .file("axolotl.yaml")
        .text
    )
    broken = {k: v for k, v in {**emitted, **change}.items() if v is not None}
    r = validate(tmp_path, yaml.safe_dump(broken), 1)
    assert r.returncode != 0
    assert needle in r.stdout + r.stderr
