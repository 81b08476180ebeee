"""--emit accelerate: accelerate_config.yaml (FSDP2 full shard / shard-grad-op with CPU offload
and activation checkpointing, or the DeepSpeed plugin with ds_config.json, or plain DDP; mixed
precision; processes and machines) and the hf script, launched with ``accelerate launch``."""

from __future__ import annotations

from typing import Any

from searcher.emitters.base import Emission, EmitOptions, EmittedFile
from searcher.emitters.common import model_config_file, out_path, plan_file
from searcher.emitters.hf_script import (
    ds_json_text,
    hf_requirements_file,
    render_train_py,
    smoke_command,
)
from searcher.emitters.hf_settings import HF_BACKENDS, HF_KNOBS, hf_settings
from searcher.emitters.plan import Plan

KNOBS = {
    **HF_KNOBS,
    "recipe": "mixed_precision (bf16/fp16/no) + the script's load dtype; fp32-master recipes via "
    "the DeepSpeed plugin (ds_config.json)",
    "checkpointing": "fsdp_activation_checkpointing under FSDP, else the script's gradient_checkpointing",
    "zero": "distributed_type: NO / MULTI_GPU (0), DEEPSPEED (1, or as the plan needs), FSDP "
    "fsdp_reshard_after_forward false (2) / true (3)",
    "offload": "fsdp_offload_params (all), or the DeepSpeed plugin's offload_optimizer / offload_param",
    "dp": "num_processes (all machines) and num_machines",
}


class AccelerateEmitter:
    name = "accelerate"
    summary = (
        "accelerate_config.yaml (FSDP / DeepSpeed plugin / DDP) + train.py, via accelerate launch"
    )
    knobs = KNOBS
    backends = HF_BACKENDS

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        import yaml

        s = hf_settings(plan, options, self.name)
        cfg = plan.config
        config_path = out_path(options, "accelerate_config.yaml")
        script = out_path(options, "train.py")
        if plan.nodes == 1:
            command = f"accelerate launch --config_file {config_path} {script}"
        else:
            command = (
                f"accelerate launch --config_file {config_path} --machine_rank $NODE_RANK "
                f"--main_process_ip $MASTER_ADDR {script}"
            )
        acc: dict[str, Any] = {
            "compute_environment": "LOCAL_MACHINE",
            "debug": False,
            "distributed_type": {
                "none": "NO",
                "ddp": "MULTI_GPU",
                "fsdp": "FSDP",
                "deepspeed": "DEEPSPEED",
            }[s.backend],
            "downcast_bf16": "no",
            "machine_rank": 0,
            "main_training_function": "main",
            "num_machines": plan.nodes,
            "num_processes": plan.gpus,
            "rdzv_backend": "static",
            "same_network": True,
            "use_cpu": False,
        }
        if plan.nodes > 1:
            acc["main_process_ip"] = "127.0.0.1"
            acc["main_process_port"] = 29500
        files: list[EmittedFile] = []
        if s.backend == "deepspeed":
            assert s.ds_config is not None
            # with a DeepSpeed config file, precision lives in the JSON (accelerate refuses
            # mixed_precision next to it)
            acc["deepspeed_config"] = {
                # relative to this YAML (train.py, beside it, resolves it): the folder moves
                "deepspeed_config_file": "ds_config.json",
                "zero3_init_flag": cfg.zero == 3,
            }
            files.append(EmittedFile("ds_config.json", ds_json_text(s.ds_config)))
        else:
            acc["mixed_precision"] = s.mixed_precision
        if s.backend == "fsdp":
            assert s.fsdp is not None
            acc["fsdp_config"] = {
                "fsdp_version": 2,
                "fsdp_reshard_after_forward": s.fsdp["reshard_after_forward"],
                "fsdp_offload_params": s.fsdp["offload"],
                "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                "fsdp_activation_checkpointing": s.activation_checkpointing_by_sharding,
                "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                "fsdp_cpu_ram_efficient_loading": True,
                "fsdp_sync_module_states": True,
            }
        header = (
            f"# fitplan plan, --emit accelerate: {plan.model.id}, {cfg.method}, zero {cfg.zero}, "
            f"offload {cfg.offload}, {plan.gpus} GPU(s) on {plan.nodes} machine(s)\n"
            f"# launch: {command}\n"
        )
        if s.backend == "deepspeed":
            header += "# deepspeed_config_file is relative to this file (train.py resolves it)\n"
        if plan.nodes > 1:
            header += (
                "# multi-node: pass each machine's --machine_rank and node 0's --main_process_ip\n"
            )
        text = header + yaml.safe_dump(acc, sort_keys=True)
        files = [
            EmittedFile("accelerate_config.yaml", text),
            EmittedFile(
                "train.py",
                render_train_py(plan, s, fmt=self.name, launch=command, sharding_in_script=False),
                True,
            ),
            *files,
            *model_config_file(plan),
            hf_requirements_file(s),
            plan_file(plan),
        ]
        return Emission(self.name, tuple(files), command, smoke=smoke_command(command))


EMITTER = AccelerateEmitter()
