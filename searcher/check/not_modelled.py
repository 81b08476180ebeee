"""Keys that change the memory of a training step but that fitplan does not model, per format,
with the reason shown to the user. A key listed here and set (truthy) in the file is reported as
*unmapped*, so the answer says what it left out instead of silently modelling the default.

Found by running ``fitplan check`` over the released example configs of axolotl v0.18.0
(2f5cb9da), LLaMA-Factory v0.9.5 (7af90952), torchtune v0.6.1 (a6290a5b), the
alignment-handbook v0.3.0 (6da26f58) and accelerate v1.14.0 (beb0672a): each key below was
classified "unknown key, not memory-relevant" there. Meanings from each project's schema:
axolotl ``src/axolotl/utils/schemas/config.py``, LLaMA-Factory ``hparams/finetuning_args.py``,
TRL ``trainer/dpo_config.py`` (``beta``, ``max_prompt_length``), torchtune recipes.
"""

from __future__ import annotations

from typing import Any

from searcher.check.doc import Document, get
from searcher.check.reading import Reading

_LIGER = "Liger's fused kernels save fewer activations: not modelled (an over-estimate)"
_PREFERENCE = (
    "preference / RL training is not modelled: the chosen+rejected pair doubles each batch, a "
    "reference (or reward/value) model is held, generation needs a KV cache — fitplan counts "
    "supervised fine-tuning only (an under-estimate)"
)

#: HF-Trainer based formats (axolotl, LLaMA-Factory, TrainingArguments)
TRAINER: dict[str, str] = {
    "activation_offloading": "activation offloading to CPU is not modelled",
    "enable_activation_offloading": "activation offloading to CPU is not modelled",
    "torch_compile": "torch.compile changes which tensors are saved; modelled as eager",
    "peft_use_dora": "DoRA is not modelled (LoRA assumed)",
    "use_dora": "DoRA is not modelled (LoRA assumed)",
    "unfrozen_parameters": "partial freezing is not modelled",
    "tensor_parallel_size": "axolotl tensor parallelism is not read",
    "context_parallel_size": "context parallelism is not modelled",
    "sequence_parallel_degree": "sequence parallelism is not modelled",
    "fp8": "fp8 training is not read",
    "relora_steps": "ReLoRA is not modelled",
    "use_unsloth": "Unsloth's kernels save different tensors; modelled as plain HF",
    "use_galore": "GaLore is not modelled",
    "use_badam": "BAdam is not modelled",
    "use_apollo": "APOLLO is not modelled",
    "freeze_trainable_layers": "freeze tuning is not modelled",
    "lora_on_cpu": "adapters on CPU are not modelled",
}
AXOLOTL: dict[str, str] = {
    "rl": _PREFERENCE,
    "reward_model": "reward-model training (a classification head) is not modelled",
    "process_reward_model": "reward-model training (a classification head) is not modelled",
    "liger_rms_norm": _LIGER,
    "liger_glu_activation": _LIGER,
    "liger_layer_norm": _LIGER,
    "liger_rope": _LIGER,
    "liger_rms_norm_gated": _LIGER,
    "lora_mlp_kernel": "axolotl's fused LoRA autograd kernels save different tensors: not modelled",
    "lora_qkv_kernel": "axolotl's fused LoRA autograd kernels save different tensors: not modelled",
    "lora_o_kernel": "axolotl's fused LoRA autograd kernels save different tensors: not modelled",
    "tiled_mlp": "tiled MLP (activations computed in chunks) is not modelled (an over-estimate)",
    "quantize_moe_experts": "4-bit quantised MoE experts are not modelled",
    "gptq": "a GPTQ-quantised base is not modelled (its weights counted at the load dtype)",
    "model_quantization_config": "the model's own quantisation config is not read",
    "lora_target_parameters": "LoRA on parameters (MoE experts) is not counted",
    "dp_shard_size": "the FSDP shard-group size is not read: sharded over all GPUs",
    "dp_replicate_size": "hybrid sharding (replica groups) is not read: sharded over all GPUs",
    "expert_parallel_size": "expert parallelism is not modelled",
    "use_scattermoe": "MoE expert kernels are not modelled",
    "use_sonicmoe": "MoE expert kernels are not modelled",
    "experts_implementation": "MoE expert kernels are not modelled",
    "llama4_linearized_experts": "MoE expert layout is not modelled",
    "qat": "quantisation-aware training (fake-quantised weights) is not modelled",
    "flash_attn_cross_entropy": "flash-attn's cross-entropy kernel is not modelled",
    "flash_attn_fuse_mlp": "flash-attn's fused MLP is not modelled",
}
#: LoRA keys an axolotl / Trainer YAML may carry while training the full model
LORA_KEYS = (
    "lora_r",
    "lora_rank",
    "lora_dropout",
    "lora_target_modules",
    "lora_target_linear",
    "lora_target",
    "lora_fan_in_fan_out",
)
LLAMAFACTORY: dict[str, str] = {
    "use_adam_mini": "Adam-mini (one second moment per block) is not modelled (AdamW assumed)",
    "use_muon": "Muon is not modelled (AdamW assumed)",
    "use_llama_pro": "LLaMA Pro (expanded, partly frozen blocks) is not modelled",
    "mixture_of_depths": "mixture-of-depths is not modelled",
    "use_kt": "KTransformers (experts on CPU) is not modelled",
    "tensor_model_parallel_size": "Megatron tensor parallelism is not read",
    "pipeline_model_parallel_size": "Megatron pipeline parallelism is not read",
    "expert_model_parallel_size": "Megatron expert parallelism is not read",
    "sequence_parallel": "sequence parallelism is not modelled",
}
#: LLaMA-Factory ``stage`` (finetuning_args.py): pt and sft are supervised training
LLAMAFACTORY_SUPERVISED_STAGES = ("pt", "sft")
#: TRL preference trainers' config fields that SFTConfig / TrainingArguments do not have
TRL_PREFERENCE_KEYS = ("beta", "max_prompt_length", "ref_model_init_kwargs")


def mark(r: Reading, doc: Document, d: dict[str, Any], table: dict[str, str]) -> None:
    """Report every key of ``table`` that ``d`` sets to something other than off/empty."""
    for key, why in table.items():
        value = get(d, key)
        if value not in (None, False, "", 0, [], {}, "none", "None"):
            r.unmapped(doc, key, why)
        elif value is not None:
            r.ignore(doc, key, "off")


def mark_stage(r: Reading, doc: Document, d: dict[str, Any], fmt: str) -> None:
    """The training objective: LLaMA-Factory ``stage``, TRL preference keys in a Trainer YAML."""
    if fmt == "llamafactory" and "stage" in d:
        stage = str(d["stage"]).strip().lower()
        if stage in LLAMAFACTORY_SUPERVISED_STAGES:
            r.read(doc, "stage", "method", "supervised training")
        else:
            r.unmapped(doc, "stage", f"stage {stage}: {_PREFERENCE}")
    if fmt == "hf-trainer":
        for key in TRL_PREFERENCE_KEYS:
            if key in d:
                r.unmapped(doc, key, f"{key} is a TRL preference-trainer field: {_PREFERENCE}")
