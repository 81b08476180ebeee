"""torchtune recipe configs (recipes/configs/**.yaml, or the file a ``tune cp`` made).

Key names and defaults from torchtune's recipes (``lora_finetune_*.py``, ``full_finetune_*.py``):
``batch_size``, ``gradient_accumulation_steps``, ``dtype`` (the model is built in it; adapters
too), ``enable_activation_checkpointing``, ``optimizer_in_bwd``, ``fsdp_cpu_offload``,
``fsdp_reshard_after_forward`` (default True: FSDP2 full shard on several GPUs),
``tokenizer.max_seq_len``; the model builder names the model, its size, and LoRA / QLoRA.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from searcher.check.doc import DELETE, Document, get
from searcher.check.reading import Edit, Reading
from searcher.check.values import name_list, section

LOSSES = {
    "torch.nn.CrossEntropyLoss": "standard",
    "torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
    "torchtune.modules.loss.LinearCrossEntropyLoss": "fused",
}
OPTIMIZERS = {
    "torch.optim.AdamW": "adamw",
    "torch.optim.Adam": "adamw",
    "bitsandbytes.optim.AdamW8bit": "adamw-8bit",
    "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit",
    "torch.optim.SGD": "sgd",
    "torch.optim.Adafactor": "adafactor",
    "bitsandbytes.optim.Lion32bit": "lion",
}
#: bitsandbytes' paged 32-bit AdamW (torchtune's *_low_memory / single-device full configs)
PAGED_32BIT = ("bitsandbytes.optim.PagedAdamW", "bitsandbytes.optim.PagedAdamW32bit")
TT_TO_HF = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
MLP = ["gate_proj", "up_proj", "down_proj"]


def is_torchtune(data: Any) -> bool:
    return isinstance(data, dict) and any(
        isinstance(get(data, f"{key}._component_"), str) for key in ("model", "policy_model")
    )


#: a recipe config's own keys that say which non-training recipe it drives (torchtune v0.6.1
#: recipes/configs: eleuther_eval ``tasks``, generate ``prompt``, quantize ``quantizer``)
NOT_TRAINING = (("tasks", "evaluation"), ("prompt", "generation"), ("quantizer", "quantization"))
#: torchtune.rlhf losses: preference training (chosen + rejected, a reference model)
PREFERENCE_LOSSES = ("torchtune.rlhf.loss.DPOLoss", "torchtune.rlhf.loss.RSOLoss")


def refuse_non_training(doc: Document) -> None:
    """Every torchtune training recipe builds ``cfg.optimizer``; evaluation, generation and
    quantisation configs name a model but no optimizer. PPO (``policy_model``) trains a policy,
    a value model and holds reference and reward models: not one model's step."""
    d = doc.data
    if isinstance(get(d, "policy_model._component_"), str):
        raise FitplanError(
            f"{doc.path}: a torchtune PPO config (policy, value, reference and reward models); "
            "fitplan models one model's fine-tuning step",
            "check a full / LoRA fine-tuning config of the policy model instead",
        )
    if "optimizer" not in d:
        kind = next((k for key, k in NOT_TRAINING if key in d), "non-training")
        raise FitplanError(
            f"{doc.path}: a torchtune {kind} config (it has no optimizer), not a training config",
            "check the recipe config you fine-tune with (…_full.yaml, …_lora.yaml)",
        )


#: builders the emit table does not name whose shapes are a catalog model's (torchtune v0.6.1):
#: models/llama3_3/_model_builders.py ``llama3_3_70b = llama3_1_70b``; models/qwen2_5's
#: ``qwen2_5_*_instruct`` take the ``_base`` builder's sizes (only max_seq_len, and norm_eps
#: for 14B-72B, differ — neither changes a tensor's size)
READ_ALIASES = {
    "llama3_3_70b": "llama-3.1-70b",
    "qwen2_5_1_5b_instruct": "qwen2.5-1.5b",
    "qwen2_5_7b_instruct": "qwen2.5-7b",
    "qwen2_5_14b_instruct": "qwen2.5-14b",
    "qwen2_5_32b_instruct": "qwen2.5-32b",
    "qwen2_5_72b_instruct": "qwen2.5-72b",
}


def _model_for_builder(builder: str) -> str | None:
    from searcher.emitters.formats.torchtune import table

    base = builder.removeprefix("qlora_").removeprefix("lora_")
    if base in READ_ALIASES:
        return READ_ALIASES[base]
    for model_id, entry in table()["models"].items():
        if entry["builder"] == base:
            return str(model_id)
    return None


def read_torchtune(doc: Document) -> Reading:
    d: dict[str, Any] = doc.data
    refuse_non_training(doc)
    r = Reading("torchtune", [doc])
    comp = str(get(d, "model._component_"))
    builder = comp.rsplit(".", 1)[-1]
    r.model = _model_for_builder(builder)
    base = builder.removeprefix("qlora_").removeprefix("lora_")
    why = f"the shapes of {r.model} (torchtune v0.6.1)" if base in READ_ALIASES else ""
    r.read(doc, "model._component_", "model", why)
    if why:
        r.notes.append(f"model builder {builder}: {why}")
    if r.model is None:
        r.no_model = f"{doc.path}: model builder {comp} is not in fitplan's torchtune table"
        r.notes.append(f"model builder {builder} is not in fitplan's torchtune table: pass --model")
    lora = builder.startswith(("lora_", "qlora_"))
    # qlora_* builders are lora_* with quantize_base=True (torchtune models/*/_model_builders.py)
    quantized = builder.startswith("qlora_") or (lora and get(d, "model.quantize_base") is True)
    r.fields["method"] = "qlora" if quantized else "lora" if lora else "full"
    if quantized:
        r.fields["quant"] = "nf4-dq"  # torchao NF4 with double-quantised scalers
    if lora and "quantize_base" in section(doc, "model"):
        r.read(doc, "model.quantize_base", "quant")
    if lora and get(d, "model.use_dora"):
        r.unmapped(doc, "model.use_dora", "DoRA is not modelled (LoRA assumed)")
    for key, why in (
        (
            "teacher_model",
            "knowledge distillation: the teacher's weights and logits are not counted",
        ),
        ("kd_loss", "knowledge distillation: the teacher's weights and logits are not counted"),
        ("ac_mode", "torchtune's selective activation checkpointing is not read (full or none)"),
        ("ac_option", "torchtune's selective activation checkpointing is not read (full or none)"),
        ("quantizer", "quantisation-aware training (fake-quantised weights) is not modelled"),
    ):
        if get(d, key) not in (None, False):
            r.unmapped(doc, key, why)
    if lora:
        if "lora_rank" in section(doc, "model"):
            r.fields["lora_rank"] = int(get(d, "model.lora_rank"))
            r.read(doc, "model.lora_rank", "lora_rank")
        if get(d, "model.lora_dropout") is not None:
            r.fields["lora_dropout"] = float(get(d, "model.lora_dropout"))
            r.read(doc, "model.lora_dropout", "lora_dropout")
        attn = [TT_TO_HF.get(m, m) for m in name_list(doc, "model.lora_attn_modules")]
        mlp = MLP if get(d, "model.apply_lora_to_mlp") else []
        targets = attn + mlp
        if sorted(targets) == sorted([*TT_TO_HF.values(), *MLP]):
            r.fields["lora_targets"] = "all-linear"
        elif targets:
            r.fields["lora_targets"] = ",".join(targets)
        for key in ("model.lora_attn_modules", "model.apply_lora_to_mlp"):
            r.read(doc, key, "lora_targets")
        if get(d, "model.apply_lora_to_output"):
            r.unmapped(
                doc, "model.apply_lora_to_output", "LoRA on the output projection is not counted"
            )
        else:
            r.read(doc, "model.apply_lora_to_output", "lora_targets")
    msl = get(d, "tokenizer.max_seq_len")
    if isinstance(msl, int):
        r.fields["seq_len"] = msl
        r.read(doc, "tokenizer.max_seq_len", "seq_len")
    else:
        r.unmapped(
            doc,
            "tokenizer.max_seq_len",
            "no length limit: sequences as long as the data (pass --seq-len)",
        )
    if get(d, "dataset.packed"):
        r.read(doc, "dataset.packed", "seq_len", "packed to max_seq_len")
    for key, fld in (("batch_size", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if isinstance(d.get(key), int):
            r.fields[fld] = d[key]
            r.read(doc, key, fld)
    opt = get(d, "optimizer._component_")
    opt = opt if isinstance(opt, str) or opt is None else str(opt)
    if opt in OPTIMIZERS:
        r.fields["optimizer"] = OPTIMIZERS[opt]
        if OPTIMIZERS[opt] == "sgd" and get(d, "optimizer.momentum"):
            r.fields["optimizer"] = "sgd-momentum"
        r.read(doc, "optimizer._component_", "optimizer")
    elif opt in PAGED_32BIT:
        # fp32 states in CUDA unified memory, paged out only under pressure (bitsandbytes
        # optim/adamw.py PagedAdamW: AdamW with is_paged=True, optim_bits=32)
        r.fields["optimizer"] = "adamw"
        r.read(doc, "optimizer._component_", "optimizer", "paged 32-bit AdamW: modelled as AdamW")
        r.notes.append(f"{opt}: paged fp32 AdamW states, modelled as resident AdamW")
    elif opt is not None:
        r.unmapped(doc, "optimizer._component_", f"{opt} has no fitplan model")
    if "fused" in section(doc, "optimizer"):
        r.ignore(doc, "optimizer.fused", "fused kernel: speed, not memory")
    loss = get(d, "loss._component_")
    loss = loss if isinstance(loss, str) or loss is None else str(loss)
    if loss in LOSSES:
        r.fields["loss"] = LOSSES[loss]
        r.read(doc, "loss._component_", "loss")
    elif loss in PREFERENCE_LOSSES:
        r.unmapped(
            doc,
            "loss._component_",
            "preference training is not modelled: the chosen+rejected pair doubles each batch and "
            "a reference model's log-probs are computed (an under-estimate)",
        )
    dtype = str(d.get("dtype", "bf16"))
    r.fields["recipe"] = "fp32" if dtype == "fp32" else "bf16-torch"
    r.read(doc, "dtype", "recipe", "torchtune builds the model (and adapters) in this dtype")
    if r.fields["method"] != "full" and dtype != "fp32":
        r.fields["adapter_dtype"] = "bf16"  # LoRALinear under the recipe's default dtype
    r.fields["checkpointing"] = "full" if d.get("enable_activation_checkpointing") else "none"
    r.read(doc, "enable_activation_checkpointing", "checkpointing")
    if d.get("enable_activation_offloading"):
        r.unmapped(
            doc, "enable_activation_offloading", "activation offloading to CPU is not modelled"
        )
    elif "enable_activation_offloading" in d:
        r.read(doc, "enable_activation_offloading", "checkpointing")
    if d.get("optimizer_in_bwd"):
        r.fields["optimizer_in_backward"] = True
    if "optimizer_in_bwd" in d:
        r.read(doc, "optimizer_in_bwd", "optimizer_in_backward")
    r.fields["attention"] = "flash"  # torch SDPA: the FlashAttention-2 kernel on CUDA
    if d.get("compile"):
        r.unmapped(
            doc,
            "compile",
            "torch.compile saves fewer tensors; modelled as eager (an over-estimate)",
        )
    elif "compile" in d:
        r.ignore(doc, "compile", "off")
    if d.get("fsdp_cpu_offload"):
        r.fields["offload"] = "all"
    for key in (
        "fsdp_cpu_offload",
        "fsdp_reshard_after_forward",
        "data_parallel_shard_dim",
        "data_parallel_replicate_dim",
        "tensor_parallel_dim",
    ):
        if key in d:
            r.read(doc, key, "zero")
    for key in (
        "device",
        "seed",
        "shuffle",
        "epochs",
        "max_steps_per_epoch",
    ):
        if key in d:
            r.ignore(doc, key, "not memory-relevant")
    # full_finetune_distributed.py shards these modules as FSDP units before the root: the
    # embedding and the head are then gathered only while they run
    own_units = set(name_list(doc, "custom_sharded_layers"))
    if {"tok_embeddings", "output"} <= own_units:
        r.fields["fsdp_embedding_units"] = True
        r.read(doc, "custom_sharded_layers", "fsdp_embedding_units")
    elif own_units:
        r.unmapped(
            doc,
            "custom_sharded_layers",
            "only part of the embedding and head sharded on their own: counted in the root unit",
        )
    r.writer = write_torchtune
    return r


def sharding(r: Reading, gpus: int) -> None:
    """torchtune's distributed recipes shard with FSDP2 (full shard unless told otherwise)."""
    d = r.docs[0].data
    if gpus > 1:
        r.fields["zero"] = 2 if d.get("fsdp_reshard_after_forward") is False else 3
    elif r.fields.get("offload") == "all":
        r.fields["zero"] = 3


def write_torchtune(r: Reading, old: Any, new: Any) -> list[Edit] | None:
    doc = r.docs[0]
    d = doc.data
    edits: list[Edit] = []
    for fld, key in (
        ("micro_batch", "batch_size"),
        ("grad_accum", "gradient_accumulation_steps"),
        ("seq_len", "tokenizer.max_seq_len"),
    ):
        if getattr(new, fld) != getattr(old, fld):
            edits.append(Edit(doc.path, key, getattr(new, fld)))
    if new.checkpointing != old.checkpointing:
        if new.checkpointing == "selective":
            return None
        edits.append(Edit(doc.path, "enable_activation_checkpointing", new.checkpointing == "full"))
    if new.loss != old.loss:
        comp = {v: k for k, v in LOSSES.items()}[new.loss]
        edits.append(Edit(doc.path, "loss._component_", comp))
    if new.optimizer != old.optimizer:
        opt_comp = {v: k for k, v in OPTIMIZERS.items() if k != "torch.optim.Adam"}.get(
            new.optimizer
        )
        if opt_comp is None or ((r.gpus or 1) > 1 and opt_comp.startswith("bitsandbytes")):
            return None
        edits.append(Edit(doc.path, "optimizer._component_", opt_comp))
        if opt_comp.startswith("bitsandbytes") and "fused" in section(doc, "optimizer"):
            edits.append(Edit(doc.path, "optimizer.fused", DELETE))
    if (new.method, new.quant) != (old.method, old.quant):
        comp = str(get(d, "model._component_"))
        module, _, builder = comp.rpartition(".")
        base = builder.removeprefix("qlora_").removeprefix("lora_")
        if new.method == "full" or new.quant not in ("none", "nf4-dq"):
            return None
        prefix = "qlora_" if new.quant == "nf4-dq" else "lora_"
        edits.append(Edit(doc.path, "model._component_", f"{module}.{prefix}{base}"))
        if old.method == "full":
            edits.append(
                Edit(
                    doc.path,
                    "model.lora_attn_modules",
                    ["q_proj", "k_proj", "v_proj", "output_proj"],
                )
            )
            edits.append(Edit(doc.path, "model.apply_lora_to_mlp", True))
            edits.append(Edit(doc.path, "model.lora_rank", new.lora_rank))
            edits.append(Edit(doc.path, "model.lora_alpha", 2 * new.lora_rank))
    elif new.lora_rank != old.lora_rank:
        edits.append(Edit(doc.path, "model.lora_rank", new.lora_rank))
    if new.offload != old.offload:
        if new.offload == "optimizer" or new.zero != 3:
            return None
        edits.append(Edit(doc.path, "fsdp_cpu_offload", new.offload == "all"))
        if new.zero != old.zero:
            edits.append(Edit(doc.path, "fsdp_reshard_after_forward", True))
    elif new.zero != old.zero:
        if (r.gpus or 1) < 2 or new.zero not in (2, 3):
            return None
        edits.append(Edit(doc.path, "fsdp_reshard_after_forward", new.zero == 3))
    if new.optimizer_in_backward != old.optimizer_in_backward:
        if new.method != "full":
            return None
        edits.append(Edit(doc.path, "optimizer_in_bwd", new.optimizer_in_backward))
    if (new.recipe, new.attention, new.tp, new.pp, new.dp) != (
        old.recipe,
        old.attention,
        old.tp,
        old.pp,
        old.dp,
    ):
        return None
    return edits
