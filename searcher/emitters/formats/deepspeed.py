"""--emit deepspeed: ds_config.json (ZeRO stage and offload, bf16/fp16/autocast, micro-batch,
accumulation, train_batch_size, optimizer) and the hf script that trains under it, launched with
the ``deepspeed`` launcher. The JSON carries what DeepSpeed controls; the script builds the model
(LoRA, quantisation, attention, checkpointing) and is told to use the JSON."""

from __future__ import annotations

from searcher.emitters.base import Emission, EmitOptions, EmittedFile
from searcher.emitters.common import model_config_file, out_path, plan_file
from searcher.emitters.hf_script import (
    ds_json_text,
    hf_requirements_file,
    render_train_py,
    smoke_command,
)
from searcher.emitters.hf_settings import HF_KNOBS, hf_settings
from searcher.emitters.plan import Plan

KNOBS = {
    **HF_KNOBS,
    "recipe": "bf16.enabled (fp32 master) / bf16_master_weights_and_grads (+ bf16_optimizer_states) / "
    "torch_autocast (amp) / none (fp32)",
    "compute_dtype": "bf16 or fp16 section (fp16: dynamic loss scaling); fp8 refused",
    "optimizer": "optimizer.type AdamW / Lion / SGD; 8-bit, paged and Adafactor as the script's "
    "client optimizer (zero_allow_untested_optimizer)",
    "micro_batch": "train_micro_batch_size_per_gpu",
    "grad_accum": "gradient_accumulation_steps (train_batch_size = micro × accum × dp)",
    "zero": "zero_optimization.stage",
    "offload": "zero_optimization.offload_optimizer / offload_param, device cpu",
    "tp": "refused above 1 (no tensor parallelism in a plain DeepSpeed JSON)",
    "pp": "refused above 1 (pipeline parallelism needs a PipelineModule, not a JSON)",
    "dp": "deepspeed --num_gpus × --num_nodes; train_batch_size = micro × accum × dp",
    "optimizer_in_backward": "refused (DeepSpeed steps after backward)",
}


class DeepSpeedEmitter:
    name = "deepspeed"
    summary = "ds_config.json + train.py, launched with the deepspeed launcher"
    knobs = KNOBS
    backends = ("deepspeed",)

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        s = hf_settings(plan, options, self.name, backend="deepspeed")
        assert s.ds_config is not None
        script = out_path(options, "train.py")
        if plan.nodes == 1:
            command = f"deepspeed --num_gpus {plan.procs_per_node} {script}"
            notes: tuple[str, ...] = ()
        else:
            command = (
                f"deepspeed --hostfile hostfile --num_nodes {plan.nodes} "
                f"--num_gpus {plan.procs_per_node} {script}"
            )
            notes = (f"hostfile: one line per node, '<host> slots={plan.procs_per_node}'",)
        files = (
            EmittedFile("ds_config.json", ds_json_text(s.ds_config)),
            EmittedFile("train.py", render_train_py(plan, s, fmt=self.name, launch=command), True),
            *model_config_file(plan),
            hf_requirements_file(s),
            plan_file(plan),
        )
        return Emission(self.name, files, command, notes, smoke=smoke_command(command))


EMITTER = DeepSpeedEmitter()
