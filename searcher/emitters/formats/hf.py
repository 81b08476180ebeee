"""--emit hf: the HF Trainer + PEFT + bitsandbytes script (train.py), plus the DeepSpeed JSON when
the plan needs it; launched with ``python train.py`` on one GPU, torchrun on more."""

from __future__ import annotations

from searcher.emitters.base import Emission, EmitOptions, EmittedFile
from searcher.emitters.common import model_config_file, out_path, plan_file
from searcher.emitters.hf_script import (
    ds_json_text,
    hf_requirements_file,
    python_command,
    render_train_py,
    smoke_command,
)
from searcher.emitters.hf_settings import HF_BACKENDS, HF_KNOBS, hf_settings
from searcher.emitters.plan import Plan


class HFEmitter:
    name = "hf"
    summary = (
        "train.py: transformers Trainer + TrainingArguments, PEFT LoraConfig, BitsAndBytesConfig"
    )
    knobs = HF_KNOBS
    backends = HF_BACKENDS

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        s = hf_settings(plan, options, self.name)
        command = python_command(plan, s, out_path(options, "train.py"))
        files = [
            EmittedFile("train.py", render_train_py(plan, s, fmt=self.name, launch=command), True)
        ]
        notes = []
        if s.ds_config is not None:
            files.append(EmittedFile("ds_config.json", ds_json_text(s.ds_config)))
            notes.append(f"sharding: DeepSpeed ZeRO-{plan.config.zero} (ds_config.json)")
        elif s.fsdp:
            notes.append(
                f"sharding: FSDP ({'FULL_SHARD' if s.fsdp['reshard_after_forward'] else 'SHARD_GRAD_OP'})"
            )
        if plan.nodes > 1:
            notes.append(
                f"run the command on each of the {plan.nodes} nodes (NODE_RANK, MASTER_ADDR set)"
            )
        files.extend(model_config_file(plan))
        files.append(hf_requirements_file(s))
        files.append(plan_file(plan))
        return Emission(
            self.name, tuple(files), command, tuple(notes), smoke=smoke_command(command)
        )


EMITTER = HFEmitter()
