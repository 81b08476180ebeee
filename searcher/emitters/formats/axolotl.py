"""--emit axolotl: an axolotl YAML config (plus ds_config.json when the plan needs DeepSpeed),
launched with ``axolotl train`` through torchrun. Key names: axolotl's config schema
(src/axolotl/utils/schemas/*.py)."""

from __future__ import annotations

from typing import Any

from searcher.emitters.base import Emission, EmitOptions, EmittedFile, refuse
from searcher.emitters.common import (
    ALLOC_CONF_VAR,
    EXPANDABLE_CONF,
    commented_yaml,
    out_path,
    plan_file,
)
from searcher.emitters.hf_settings import ATTENTION, hf_settings
from searcher.emitters.knobs import SPEED_KNOBS, sync_each_batch
from searcher.emitters.plan import Plan

KNOBS = {
    **SPEED_KNOBS,
    "method": "adapter: lora (float or 8-bit base) / qlora (4-bit base); none for a full fine-tune",
    "lora_rank": "lora_r",
    "lora_targets": "lora_target_linear: true (all-linear) or lora_target_modules",
    "lora_dropout": "lora_dropout",
    "recipe": "bf16: true loads and trains a bf16 model (bf16-torch); fp32: bf16/fp16 false; "
    "fp32-master recipes via deepspeed; amp refused (axolotl loads in the dtype it trains)",
    "weight_dtype": "the load dtype (an override other than the recipe's is refused)",
    "adapter_dtype": "peft_autocast_adapter_dtype: true (fp32) / false (the base's dtype)",
    "compute_dtype": "bf16 / fp16 (fp16 only with DeepSpeed's fp16 master mode); fp8 refused",
    "optimizer": "optimizer by its Trainer name (optim_args for SGD momentum)",
    "quant": "load_in_8bit, or load_in_4bit + bnb_config_kwargs (nf4, double quant)",
    "micro_batch": "micro_batch_size",
    "seq_len": "sequence_len with sample_packing and pad_to_sequence_len",
    "grad_accum": "gradient_accumulation_steps",
    "checkpointing": "gradient_checkpointing (FSDP: fsdp_config.activation_checkpointing); selective refused",
    "attention": "flash_attention / sdp_attention / eager_attention",
    "loss": "fused: LigerPlugin liger_fused_linear_cross_entropy; chunked: chunked_cross_entropy",
    "zero": "deepspeed: ds_config.json (ZeRO-1, or as the plan needs) or fsdp_config "
    "reshard_after_forward false (2) / true (3); 0: DDP",
    "offload": "fsdp_config.offload_params (all) or the DeepSpeed JSON's offload",
    "tp": "refused above 1 (axolotl's tensor_parallel_size needs DeepSpeed AutoTP; not emitted)",
    "pp": "refused above 1 (axolotl has no pipeline parallelism)",
    "dp": "axolotl train --launcher torchrun -- --nnodes N --nproc_per_node P",
    "optimizer_in_backward": "refused (the HF Trainer under axolotl steps after backward)",
    "backend": "single / ddp; deepspeed: deepspeed: ds_config.json; fsdp2: fsdp_config "
    "fsdp_version 2; fsdp1 and megatron refused",
}


class AxolotlEmitter:
    name = "axolotl"
    summary = "axolotl.yaml (+ ds_config.json), launched with axolotl train"
    knobs = KNOBS
    backends = ("single", "ddp", "deepspeed", "fsdp2")

    def emit(self, plan: Plan, options: EmitOptions) -> Emission:
        cfg = plan.config
        fmt = self.name
        s = hf_settings(plan, options, fmt, chunked_loss=True)
        prec = s.precision
        if prec.mode == "amp":
            raise refuse(
                fmt,
                "recipe",
                cfg.recipe,
                "axolotl loads the model in the dtype it trains (bf16: true loads bf16 weights); "
                "it has no fp32 weights under 16-bit autocast",
                "pin --recipe bf16-torch or bf16-master, or --emit hf",
            )
        if prec.mode == "torch" and s.backend == "deepspeed":
            pass  # DeepSpeed's bf16_master_weights_and_grads + bf16_optimizer_states
        if prec.half == "fp16" and prec.mode != "master":
            raise refuse(
                fmt,
                "compute_dtype",
                "fp16",
                "axolotl's fp16: true loads fp16 weights, which the Trainer's fp16 GradScaler refuses",
                "use --recipe bf16-master (DeepSpeed fp16) with fp16",
            )
        entries: list[tuple[str, Any, str | None]] = [
            ("base_model", plan.model_ref, f"the plan's model: {plan.model.id}"),
            (
                "datasets",
                [{"path": "wikitext", "name": "wikitext-2-raw-v1", "type": "completion"}],
                "replace with your data",
            ),
            ("val_set_size", 0.0, None),
            ("output_dir", "./outputs/fitplan", None),
            ("sequence_len", cfg.seq_len, "seq_len"),
            ("sample_packing", True, "every sequence packed to sequence_len, as fitplan modelled"),
            ("pad_to_sequence_len", True, None),
            ("micro_batch_size", cfg.micro_batch, "micro_batch"),
            ("gradient_accumulation_steps", cfg.grad_accum, "grad_accum"),
            ("num_epochs", 1, None),
            ("optimizer", s.optim, f"optimizer {cfg.optimizer}"),
        ]
        if s.optim_args:
            key, value = s.optim_args.split("=")
            entries.append(("optim_args", {key: float(value)}, "SGD with momentum"))
        entries += [
            ("learning_rate", s.lr, None),
            ("lr_scheduler", "cosine", None),
            ("weight_decay", 0.0, None),
            (
                "max_grad_norm",
                1.0,
                "= the DeepSpeed JSON's gradient_clipping" if s.backend == "deepspeed" else None,
            ),
            ("adam_beta1", 0.9, None),
            ("adam_beta2", s.adam_beta2, None),
            ("adam_epsilon", 1e-8, None),
            ("bf16", prec.half == "bf16", f"recipe {cfg.recipe}: loads the model in bf16"),
            ("fp16", prec.half == "fp16", None),
            ("tf32", False, "fp32 matmuls stay fp32" if prec.mode == "fp32" else None),
        ]
        if s.gradient_checkpointing:
            entries.append(("gradient_checkpointing", True, "checkpointing full"))
            entries.append(("gradient_checkpointing_kwargs", {"use_reentrant": False}, None))
        else:
            entries.append(
                (
                    "gradient_checkpointing",
                    False,
                    "done by fsdp_config.activation_checkpointing"
                    if s.activation_checkpointing_by_sharding
                    else "checkpointing none",
                )
            )
        attn_key = {"flash": "flash_attention", "sdpa": "sdp_attention", "eager": "eager_attention"}
        entries.append(
            (
                attn_key[cfg.attention],
                True,
                f"attention {cfg.attention} ({ATTENTION[cfg.attention]})",
            )
        )
        if cfg.loss == "fused":
            entries.append(("plugins", ["axolotl.integrations.liger.LigerPlugin"], "loss fused"))
            entries.append(("liger_fused_linear_cross_entropy", True, None))
        elif cfg.loss == "chunked":
            entries.append(("chunked_cross_entropy", True, "loss chunked"))
        if cfg.method != "full":
            assert s.lora is not None
            if cfg.quant == "int8":
                entries += [
                    ("adapter", "lora", "LoRA on an 8-bit base"),
                    ("load_in_8bit", True, "quant int8"),
                ]
            elif cfg.quant in ("nf4", "nf4-dq"):
                entries += [
                    ("adapter", "qlora", None),
                    ("load_in_4bit", True, f"quant {cfg.quant}"),
                    (
                        "bnb_config_kwargs",
                        {
                            "bnb_4bit_quant_type": "nf4",
                            "bnb_4bit_use_double_quant": cfg.quant == "nf4-dq",
                        },
                        None,
                    ),
                ]
            else:
                entries.append(("adapter", "lora", None))
            alpha_note = (
                "fitplan has no alpha knob: 2 x rank"
                if options.lora_alpha is None
                else "--lora-alpha"
            )
            entries += [
                ("lora_r", s.lora["r"], "lora_rank"),
                ("lora_alpha", s.lora["lora_alpha"], alpha_note),
                ("lora_dropout", cfg.lora_dropout, None),
            ]
            targets = s.lora["target_modules"]
            if targets == "all-linear":
                entries.append(("lora_target_linear", True, "lora_targets all-linear"))
            else:
                entries.append(
                    ("lora_target_modules", list(targets), f"lora_targets {cfg.lora_targets}")
                )
            ad = s.adapter_dtype
            base = "fp32" if prec.mode == "fp32" else prec.half
            if ad == "fp32":
                entries.append(("peft_autocast_adapter_dtype", True, "adapter_dtype fp32"))
            elif cfg.quant == "int8" or ad != base:
                raise refuse(
                    fmt,
                    "adapter_dtype",
                    ad,
                    "axolotl keeps adapters in fp32 (peft_autocast_adapter_dtype) or in the base "
                    f"layer's dtype ({'int8 is not a float: fp32' if cfg.quant == 'int8' else base})",
                    "pin --adapter-dtype fp32",
                )
            else:
                entries.append(
                    ("peft_autocast_adapter_dtype", False, f"adapter_dtype {ad}: the base's dtype")
                )
        files: list[EmittedFile] = []
        if s.backend == "deepspeed":
            assert s.ds_config is not None
            # inline (axolotl takes the DeepSpeed config as a path or a mapping): no path that
            # would be read relative to wherever axolotl is started
            entries.append(
                (
                    "deepspeed",
                    s.ds_config,
                    f"zero {cfg.zero}, offload {cfg.offload}: the DeepSpeed config, inline",
                )
            )
        elif s.backend == "fsdp":
            assert s.fsdp is not None
            entries.append(("fsdp_version", 2, None))
            entries.append(
                (
                    "fsdp_config",
                    {
                        "offload_params": s.fsdp["offload"],
                        "reshard_after_forward": s.fsdp["reshard_after_forward"],
                        "activation_checkpointing": s.activation_checkpointing_by_sharding,
                        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                        "state_dict_type": "SHARDED_STATE_DICT",
                        # loading only (no effect on the step's memory); axolotl 0.19 refuses it
                        # with a 4-bit base under FSDP2 (schemas/validation.py
                        # check_fsdp2_cpu_ram_efficient_loading_w_4bit: rank-0 quantisation
                        # deadlocks the state-dict scatter)
                        "cpu_ram_efficient_loading": cfg.quant not in ("nf4", "nf4-dq"),
                    },
                    f"zero {cfg.zero} (FSDP2 {'FULL_SHARD' if s.fsdp['reshard_after_forward'] else 'SHARD_GRAD_OP'}), offload {cfg.offload}",
                )
            )
            sync = sync_each_batch(cfg)
            if sync is not None:
                entries.append(
                    (
                        "accelerator_config",
                        {"gradient_accumulation_kwargs": {"sync_each_batch": sync}},
                        f"grad_sync {cfg.grad_sync}: the Trainer reduces "
                        + (
                            "every micro-batch"
                            if sync
                            else "on the last micro-batch only (no_sync)"
                        ),
                    )
                )
        entries += [("logging_steps", 1, None), ("save_strategy", "no", None)]
        config_path = out_path(options, "axolotl.yaml")
        if plan.nodes == 1:
            command = (
                f"axolotl train {config_path} --launcher torchrun -- --nnodes 1 "
                f"--nproc_per_node {plan.procs_per_node}"
            )
        else:
            command = (
                f"axolotl train {config_path} --launcher torchrun -- --nnodes {plan.nodes} "
                f"--nproc_per_node {plan.procs_per_node} --node_rank $NODE_RANK "
                "--rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"
            )
        if cfg.expandable_segments:
            command = f"{ALLOC_CONF_VAR}={EXPANDABLE_CONF} {command}"
        header = (
            f"# fitplan plan, --emit axolotl: {plan.model.id}, {cfg.method}, "
            f"{cfg.micro_batch} x {cfg.grad_accum} x {cfg.dp} sequences of {cfg.seq_len} tokens\n"
            f"# launch: {command}\n"
        )
        text = header + commented_yaml(entries)
        return Emission(fmt, (EmittedFile("axolotl.yaml", text), *files, plan_file(plan)), command)


EMITTER = AxolotlEmitter()
