"""accelerate config YAML (with its deepspeed_config / fsdp_config sections) and fitplan's own
plan.json. Key names: accelerate ``commands/config/config_args.py`` (``distributed_type``,
``num_processes``, ``num_machines``, ``mixed_precision``) and ``utils/dataclasses.py``
(``FullyShardedDataParallelPlugin``: ``fsdp_sharding_strategy`` FULL_SHARD / SHARD_GRAD_OP /
NO_SHARD / HYBRID_SHARD, ``fsdp_reshard_after_forward`` for FSDP2, ``fsdp_offload_params``,
``fsdp_activation_checkpointing``; ``DeepSpeedPlugin``: ``zero_stage``,
``offload_optimizer_device``, ``offload_param_device``, ``deepspeed_config_file``)."""

from __future__ import annotations

from typing import Any

from searcher.check.doc import Document, get
from searcher.check.reading import Edit, Reading
from searcher.check.values import section

#: accelerate ``ParallelismConfig`` (parallelism_config.py, accelerate ≥ 1.10) sizes fitplan does
#: not read: the GPUs are modelled as one data-parallel (sharded) group
PARALLELISM_UNREAD = {
    "tp_size": "tensor parallelism from parallelism_config is not read (data parallel assumed)",
    "cp_size": "context parallelism is not modelled (each GPU holds the whole sequence)",
    "sp_size": "sequence parallelism is not modelled (each GPU holds the whole sequence)",
    "dp_replicate_size": "hybrid sharding (replica groups) is not read: sharded over all GPUs",
}


def is_accelerate(data: Any) -> bool:
    return isinstance(data, dict) and ("distributed_type" in data or "compute_environment" in data)


def is_plan(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("config"), dict) and "model" in data


def read_accelerate(doc: Document, load_ds: Any) -> tuple[Reading, Document | None]:
    d: dict[str, Any] = doc.data
    r = Reading("accelerate", [doc])
    kind = str(d.get("distributed_type", "NO")).upper()
    r.read(doc, "distributed_type", "zero")
    procs = d.get("num_processes")
    if kind == "NO" and isinstance(procs, int) and procs > 1:
        # accelerate launch_command: distributed_type NO sets neither multi_gpu nor deepspeed /
        # fsdp, so simple_launcher starts one process whatever num_processes says
        r.gpus = 1
        r.ignore(doc, "num_processes", "distributed_type NO: accelerate starts one process")
    elif isinstance(procs, int):
        machines = d.get("num_machines", 1) if isinstance(d.get("num_machines"), int) else 1
        r.gpus = procs if procs >= machines else procs * machines
        r.read(doc, "num_processes", "dp", "processes = GPUs")
        if "num_machines" in d:
            r.read(doc, "num_machines", "dp")
    mp = str(d.get("mixed_precision", "no")).lower()
    if "mixed_precision" in d:
        r.read(doc, "mixed_precision", "recipe")
    r.fields["_half"] = {"bf16": "bf16", "fp16": "fp16"}.get(mp)
    if mp == "fp8":
        r.unmapped(doc, "mixed_precision", "fp8 training is not read (bf16 assumed)")
        r.fields["_half"] = "bf16"
    ds_doc = None
    if kind == "FSDP":
        fc = section(doc, "fsdp_config")
        strategy = str(fc.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        if "fsdp_reshard_after_forward" in fc:
            reshard = fc["fsdp_reshard_after_forward"]
            r.fields["zero"] = 3 if reshard in (True, "FULL_SHARD", "HYBRID_SHARD") else 2
            r.read(doc, "fsdp_config.fsdp_reshard_after_forward", "zero")
        else:
            r.fields["zero"] = {"SHARD_GRAD_OP": 2, "NO_SHARD": 0, "1": 3, "2": 2, "3": 0}.get(
                strategy, 3
            )
        if "fsdp_sharding_strategy" in fc:
            r.read(doc, "fsdp_config.fsdp_sharding_strategy", "zero")
        r.fields["offload"] = "all" if fc.get("fsdp_offload_params") else "none"
        r.read(doc, "fsdp_config.fsdp_offload_params", "offload")
        if fc.get("fsdp_activation_checkpointing"):
            r.fields["checkpointing"] = "full"
        if "fsdp_activation_checkpointing" in fc:
            r.read(doc, "fsdp_config.fsdp_activation_checkpointing", "checkpointing")
        r.fields["_weights"] = "fp32"  # FSDP keeps fp32 parameters; mixed_precision casts compute
        for key in (
            "fsdp_version",
            "fsdp_auto_wrap_policy",
            "fsdp_backward_prefetch",
            "fsdp_forward_prefetch",
            "fsdp_state_dict_type",
            "fsdp_sync_module_states",
            "fsdp_use_orig_params",
            "fsdp_cpu_ram_efficient_loading",
            "fsdp_transformer_layer_cls_to_wrap",
        ):
            if key in fc:
                r.ignore(
                    doc,
                    f"fsdp_config.{key}",
                    "wrapping, prefetch and checkpoint format: fitplan models one unit per layer",
                )
    elif kind == "DEEPSPEED":
        dc = section(doc, "deepspeed_config")
        if isinstance(dc.get("deepspeed_config_file"), str):
            ds_doc = load_ds(doc, dc["deepspeed_config_file"])
            r.read(doc, "deepspeed_config.deepspeed_config_file", "zero")
            if ds_doc is None:
                r.unmapped(
                    doc,
                    "deepspeed_config.deepspeed_config_file",
                    "cannot read it: pass it beside the config",
                )
        else:
            stage = dc.get("zero_stage", 0)
            r.fields["zero"] = int(stage)
            r.read(doc, "deepspeed_config.zero_stage", "zero")
            opt = str(dc.get("offload_optimizer_device", "none")).lower()
            par = str(dc.get("offload_param_device", "none")).lower()
            r.fields["offload"] = (
                "all"
                if par in ("cpu", "nvme")
                else "optimizer"
                if opt in ("cpu", "nvme")
                else "none"
            )
            for key in ("offload_optimizer_device", "offload_param_device"):
                if key in dc:
                    r.read(doc, f"deepspeed_config.{key}", "offload")
            r.fields["_ds_mode"] = "master" if r.fields["_half"] else None
        if isinstance(dc.get("gradient_accumulation_steps"), int):
            # DeepSpeedPlugin.gradient_accumulation_steps (accelerate utils/dataclasses.py)
            r.fields["grad_accum"] = dc["gradient_accumulation_steps"]
            r.read(doc, "deepspeed_config.gradient_accumulation_steps", "grad_accum")
        for key in ("zero3_init_flag", "zero3_save_16bit_model", "deepspeed_multinode_launcher"):
            if key in dc:
                r.ignore(doc, f"deepspeed_config.{key}", "loading and saving, not the step")
    else:
        r.fields["zero"] = 0
    pc = section(doc, "parallelism_config")
    for key in PARALLELISM_UNREAD:
        size = pc.get(f"parallelism_config_{key}")
        if isinstance(size, int) and size > 1:
            r.unmapped(
                doc,
                f"parallelism_config.parallelism_config_{key}",
                f"{key} {size}: {PARALLELISM_UNREAD[key]}",
            )
    if isinstance(d.get("gradient_accumulation_steps"), int):
        r.fields["grad_accum"] = d["gradient_accumulation_steps"]
        r.read(doc, "gradient_accumulation_steps", "grad_accum")
    r.writer = write_accelerate
    return r, ds_doc


def write_accelerate(r: Reading, old: Any, new: Any) -> list[Edit] | None:
    """Edits for ZeRO stage / offload / checkpointing in the accelerate file itself."""
    doc = next(x for x in r.docs if x.kind == "yaml" and is_accelerate(x.data))
    d = doc.data
    kind = str(d.get("distributed_type", "NO")).upper()
    edits: list[Edit] = []
    if (new.zero, new.offload) != (old.zero, old.offload):
        if kind == "FSDP":
            if new.offload == "optimizer" or new.zero not in (2, 3):
                return None
            fc = section(doc, "fsdp_config")
            if "fsdp_reshard_after_forward" in fc:
                edits.append(
                    Edit(doc.path, "fsdp_config.fsdp_reshard_after_forward", new.zero == 3)
                )
            else:
                edits.append(
                    Edit(
                        doc.path,
                        "fsdp_config.fsdp_sharding_strategy",
                        "FULL_SHARD" if new.zero == 3 else "SHARD_GRAD_OP",
                    )
                )
            edits.append(Edit(doc.path, "fsdp_config.fsdp_offload_params", new.offload == "all"))
        elif kind == "DEEPSPEED" and "deepspeed_config_file" not in (
            section(doc, "deepspeed_config")
        ):
            edits.append(Edit(doc.path, "deepspeed_config.zero_stage", new.zero))
            edits.append(
                Edit(
                    doc.path,
                    "deepspeed_config.offload_optimizer_device",
                    "cpu" if new.offload != "none" else "none",
                )
            )
            edits.append(
                Edit(
                    doc.path,
                    "deepspeed_config.offload_param_device",
                    "cpu" if new.offload == "all" else "none",
                )
            )
        else:
            return None
    return edits


def read_plan(doc: Document) -> Reading:
    """fitplan's own plan.json (``search --json`` member or what ``--emit`` writes beside the files)."""
    from searcher.emitters.knobs import KNOB_NAMES

    d: dict[str, Any] = doc.data
    r = Reading("fitplan", [doc])
    for key, value in d["config"].items():
        if key in KNOB_NAMES:
            r.fields[key] = value
            r.read(doc, f"config.{key}", key)
        elif key in ("gpus", "rank"):
            r.ignore(doc, f"config.{key}", "derived (dp × tp × pp; lora_rank)")
    r.model = str(d.get("model_ref") or d["model"])
    r.read(doc, "model", "model")
    if d.get("gpu"):
        r.gpu = str(d["gpu"])
        r.read(doc, "gpu", "gpu")
    for key in d:
        if key not in ("config", "model", "model_ref", "gpu"):
            r.ignore(doc, key, "fitplan's prediction for the plan (recomputed here)")
    r.writer = write_plan
    return r


def write_plan(r: Reading, old: Any, new: Any) -> list[Edit] | None:
    doc = r.docs[0]
    edits = []
    for key, value in new.model_dump().items():
        if value != getattr(old, key):
            edits.append(Edit(doc.path, f"config.{key}", value))
    if new.method != old.method and get(doc.data, "config.rank", "absent") != "absent":
        edits.append(Edit(doc.path, "config.rank", new.lora_rank if new.method != "full" else None))
    return edits
