"""A training configuration (a checked record) and the integer codes of its categorical knobs.

:class:`TrainConfig` is what a person writes; :class:`constraints.config_batch.ConfigBatch` is the
same knobs as numpy columns (``TrainConfig.columns`` gives one row of them).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from constraints.backends import BACKEND_CODE, infer_backend, why_not
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.precision import (
    COMPUTE_DTYPES,
    DEFAULT_RECIPE,
    DTYPE_BYTES,
    FLOAT_DTYPES,
    OPTIMIZERS,
    QUANTS,
    RECIPES,
    dtype_bytes,
    optimizer,
    quant,
    recipe,
    with_compute,
)
from constraints.record import Record, bounded

Method = Literal["full", "lora", "qlora"]
METHODS: tuple[Method, ...] = ("full", "lora", "qlora")
CHECKPOINTING = ("none", "selective", "full")
ATTENTION = ("flash", "sdpa", "eager")
LOSSES = ("standard", "chunked", "fused", "standard-held")
#: the causal-LM loss code of the transformers release that runs the standard loss
#: (constraints/logits.py): ForCausalLMLoss padding the labels (>= 4.49), ForCausalLMLoss
#: upcasting the returned logits and copying their shifted slice (4.46-4.48), the model upcasting
#: its logits and copying the shifted slice (<= 4.45)
LOSS_CHAINS = ("padded-labels", "shifted-upcast", "shifted-fp32-logits")
OFFLOADS = ("none", "optimizer", "all")
#: kernel stacks (constraints/kernels.py): PyTorch eager, torch.compile (inductor), Transformer
#: Engine fused modules (Megatron / NeMo), Liger kernels (fused norm, SwiGLU, RoPE, linear-CE)
KERNELS = ("eager", "compile", "te", "liger")
#: fp8 scaling recipes (constraints/fp8.py): torchao tensorwise / rowwise, TE delayed / current
#: scaling, MXFP8 (Blackwell block scaling)
FP8_RECIPES = ("tensorwise", "rowwise", "te-delayed", "te-current", "mxfp8")
#: whose model code runs the layers (its eager kernels: constraints/eager_traffic.py)
MODEL_CODES = ("hf", "torchtune", "torchtitan", "torchtitan-fused-rmsnorm")
#: the model codes whose LoRA is PEFT's (adapters in fp32 unless pinned: trainable_dtype)
PEFT_MODEL_CODES = ("hf",)
#: flash-attention kernel generation (constraints/attention_kernels.py): FlashAttention-2 (flash-attn
#: 2 and PyTorch SDPA's flash backend, what fitplan's plans run), FlashAttention-1 (flash-attn 1.x)
ATTENTION_KERNELS = ("fa2", "fa1")
OPTIMIZER_NAMES = tuple(OPTIMIZERS)
QUANT_NAMES = tuple(QUANTS)
RECIPE_NAMES = tuple(RECIPES)
COMPUTE_NAMES = COMPUTE_DTYPES
DTYPE_NAMES = tuple(DTYPE_BYTES)
_INT_COLUMNS = (
    "method",
    "rank",
    "targets",
    "recipe",
    "optimizer",
    "quant",
    "micro_batch",
    "seq_len",
    "grad_accum",
    "checkpointing",
    "attention",
    "loss",
    "loss_chain",
    "zero",
    "offload",
    "tp",
    "pp",
    "dp",
    "compute",
    "weight_override",
    "adapter_override",
    "backend",
    "kernels",
    "fp8_recipe",
    "virtual_stages",
    "model_code",
    "attention_kernel",
)
_BOOL_COLUMNS = (
    "lora_dropout",
    "compute_is_fp16",
    "compute_is_fp8",
    "autocast",
    "opt_in_bwd",
    "embed_units",
    "sync_last",
    "kbit_saves_input",
    "tp_overlap",
    "expandable",
)
_FLOAT_COLUMNS = (
    "weight_bytes",
    "grad_bytes",
    "master_bytes",
    "state_bytes",
    "adapter_bytes",
    "compute_bytes",
)
COLUMN_DTYPES: dict[str, type] = {
    **dict.fromkeys(_INT_COLUMNS, np.int64),
    **dict.fromkeys(_BOOL_COLUMNS, bool),
    **dict.fromkeys(_FLOAT_COLUMNS, np.float64),
}


@frozen(slots=True, kw_only=True)
class TrainConfig(Record):
    """One training configuration (per data-parallel replica unless stated)."""

    method: Method = "full"
    lora_rank: int = bounded(16, ge=1, le=65536)
    lora_targets: str = "all-linear"
    lora_dropout: float = bounded(0.0, ge=0.0, lt=1.0)
    recipe: str = DEFAULT_RECIPE
    weight_dtype: str | None = None
    adapter_dtype: str | None = None
    compute_dtype: str | None = None
    optimizer: str = "adamw"
    quant: str = "none"
    micro_batch: int = bounded(1, ge=1, le=1_000_000)
    seq_len: int = bounded(2048, ge=1, le=10_000_000)
    grad_accum: int = bounded(1, ge=1, le=1_000_000)
    checkpointing: Literal["none", "selective", "full"] = "none"
    attention: Literal["flash", "sdpa", "eager"] = "flash"
    #: standard-held: the training loop keeps the fp32 logits it gave the loss (constants.py)
    loss: Literal["standard", "chunked", "fused", "standard-held"] = "standard"
    zero: int = bounded(0, ge=0, le=3)
    offload: Literal["none", "optimizer", "all"] = "none"
    tp: int = bounded(1, ge=1, le=1024)
    pp: int = bounded(1, ge=1, le=1024)
    dp: int = bounded(1, ge=1, le=1_000_000)
    optimizer_in_backward: bool = False
    #: FSDP wraps the embedding and the output head as units of their own (torchtune
    #: custom_sharded_layers=['tok_embeddings', 'output']), gathered only while they run; False:
    #: they sit in the root unit, which FSDP keeps unsharded for the whole step
    fsdp_embedding_units: bool = False
    #: when data-parallel gradients are reduced under gradient accumulation: every micro-batch
    #: (what fitplan emits), or only the last one, the others running backward under FSDP's
    #: ``no_sync`` (HF Trainer / accelerate without sync_each_batch, Lightning Fabric's
    #: no_backward_sync), which holds every FSDP unit's gradient unsharded until the last
    grad_sync: Literal["each-micro-batch", "last-micro-batch"] = "each-micro-batch"
    #: the standard loss's code path, by transformers release (LOSS_CHAINS; the stack profile
    #: reads it from the installed or named transformers)
    loss_chain: Literal["padded-labels", "shifted-upcast", "shifted-fp32-logits"] = "padded-labels"
    #: bitsandbytes < 0.43.2: ``MatMul4Bit.forward`` keeps each 4-bit linear's input for the
    #: backward (``ctx.tensors = (A, B)``; 0.43.2 keeps ``(None, B)``); the stack profile reads it
    #: from the installed or named bitsandbytes
    kbit_saves_input: bool = False
    # ---- issue 11: the training framework (constraints/backends.py); None = inferred
    backend: Literal["single", "ddp", "deepspeed", "fsdp2", "fsdp1", "megatron"] | None = None
    # ---- speed knobs (issue 12): they change the step time, not the memory ----
    #: kernel stack: eager, compile (torch.compile), te (Transformer Engine), liger
    kernels: Literal["eager", "compile", "te", "liger"] = "eager"
    #: fp8 scaling recipe, used when the compute dtype is fp8
    fp8_recipe: Literal["tensorwise", "rowwise", "te-delayed", "te-current", "mxfp8"] = "tensorwise"
    #: tensor-parallel communication overlapped with the GEMMs (Megatron tp_comm_overlap, async TP)
    tp_comm_overlap: bool = False
    #: virtual pipeline stages per rank (interleaved 1F1B); 1 = plain 1F1B
    virtual_stages: int = bounded(1, ge=1, le=128)
    #: whose model code runs the layers: its eager kernels differ (constraints/eager_traffic.py);
    #: fitplan emits Hugging Face code, the others describe measured runs
    model_code: Literal["hf", "torchtune", "torchtitan", "torchtitan-fused-rmsnorm"] = "hf"
    #: flash-attention generation (fa2: flash-attn 2 / SDPA flash, what fitplan emits; fa1:
    #: flash-attn 1.x, which measured runs such as llm-foundry's 2023 benchmarks used)
    attention_kernel: Literal["fa2", "fa1"] = "fa2"
    # ---- the caching allocator (constraints/allocator.py): changes reserved memory, not speed
    #: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torchtitan's run_train.sh sets it)
    expandable_segments: bool = False

    def _consistent(self) -> None:
        recipe(self.recipe)
        optimizer(self.optimizer)
        quant(self.quant)
        for value in (self.weight_dtype, self.adapter_dtype):
            if value is not None:
                dtype_bytes(value)
        if self.method == "full" and self.quant != "none":
            raise FitplanError(
                f"--quant {self.quant} with --method full: a quantised base cannot be trained",
                "use --method qlora (LoRA on a quantised base) or --quant none",
            )
        if self.method == "qlora" and self.quant == "none":
            raise FitplanError(
                "--method qlora needs a quantised base",
                "use --quant nf4, nf4-dq, int8, gptq or awq",
            )
        if self.offload != "none" and self.zero == 0:
            raise FitplanError(
                f"--offload {self.offload} needs ZeRO/FSDP sharding",
                "add --zero 1, 2 or 3 (--offload all needs --zero 3)",
            )
        if self.offload == "all" and self.zero != 3:
            raise FitplanError(
                "--offload all (parameter offload) needs --zero 3 (ZeRO-3 / FSDP full shard)"
            )
        if self.optimizer_in_backward and self.grad_accum > 1:
            raise FitplanError(
                "the optimizer step fused into backward cannot accumulate gradients",
                "use --grad-accum 1 or drop --optimizer-in-backward",
            )
        if self.backend is None:
            object.__setattr__(self, "backend", self.inferred_backend())

    def inferred_backend(self) -> str:
        """The backend this configuration runs under when none is given."""
        return infer_backend(
            gpus=self.gpus,
            zero=self.zero,
            offload=self.offload,
            tp=self.tp,
            pp=self.pp,
            recipe=self.recipe.lower(),
            method=self.method,
        )

    def backend_problem(self) -> str | None:
        """Why this configuration's backend does not run it (None when it does)."""
        return why_not(
            str(self.backend),
            gpus=self.gpus,
            zero=self.zero,
            offload=self.offload,
            tp=self.tp,
            pp=self.pp,
            recipe=self.recipe.lower(),
            method=self.method,
            optimizer=self.optimizer.lower(),
            optimizer_in_backward=self.optimizer_in_backward,
            loss=self.loss,
        )

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def global_batch(self) -> int:
        """Effective batch in sequences: micro × accumulation × data-parallel."""
        return self.micro_batch * self.grad_accum * self.dp

    @property
    def is_lora(self) -> bool:
        return self.method != "full"

    def resolved_recipe(self) -> tuple[str, str, str | None, str | None, str, bool]:
        """(weight, grad, master, state, compute, autocast) dtypes after overrides."""
        r = recipe(self.recipe)
        if self.compute_dtype:
            r = with_compute(r, self.compute_dtype)
        weight = (self.weight_dtype or r.weight).lower()
        return weight, r.grad, r.master, r.state_dtype, r.compute, r.autocast

    def trainable_dtype(self) -> str:
        """The dtype of the trained parameters: the weights', or the adapters' under LoRA (the
        override, else the stack's default: fp32 where PEFT builds them, the base's elsewhere)."""
        if not self.is_lora:
            return self.resolved_recipe()[0]
        if self.adapter_dtype:
            return self.adapter_dtype.lower()
        if self.model_code in PEFT_MODEL_CODES and not self.engine_casts_adapters():
            # PEFT's get_peft_model(autocast_adapter_dtype=True), its default: fp16 / bf16
            # adapters are cast to fp32 (peft/tuners/tuners_utils.py _cast_adapter_dtype)
            return "fp32"
        return self.base_adapter_dtype()

    def engine_casts_adapters(self) -> bool:
        """Whether the training engine casts the whole model, adapters included, to the 16-bit
        weight dtype: DeepSpeed's bf16 / fp16 modes (``DeepSpeedEngine._configure_distributed_model``
        calls ``module.bfloat16()`` / ``half()``), which run every recipe with a master copy or
        fp32 states beside 16-bit weights, and a 16-bit model under DeepSpeed."""
        weight, _grad, master, state, _compute, _autocast = self.resolved_recipe()
        if weight not in ("bf16", "fp16"):
            return False
        return master is not None or state == "fp32" or self.backend == "deepspeed"

    def base_adapter_dtype(self) -> str:
        """The dtype adapters take when built like their base layer, as torchtune builds them:
        the weights', or the compute dtype when the weights are quantised."""
        weight, _grad, _master, _state, compute, _autocast = self.resolved_recipe()
        if weight not in FLOAT_DTYPES:
            return "bf16" if compute in ("bf16", "fp8") else compute
        return weight

    def as_planned(self) -> TrainConfig:
        """This configuration with the adapter dtype the model assumed pinned (LoRA/QLoRA only),
        so that a traced or measured run builds the adapters fitplan counted (PEFT's fp32 by
        default, which for QLoRA also means PEFT's recipe: ``prepare_model_for_kbit_training``
        upcasts every non-quantised parameter to fp32)."""
        if not self.is_lora or self.adapter_dtype:
            return self
        return self.model_copy(update={"adapter_dtype": self.trainable_dtype()})

    def columns(self) -> dict[str, float]:
        """This configuration as one row of ConfigBatch columns (dtypes resolved to bytes)."""
        weight, grad, master, state, compute, autocast = self.resolved_recipe()
        trainable_dtype = self.trainable_dtype()
        wb = DTYPE_BYTES[weight]
        tb = DTYPE_BYTES[trainable_dtype]
        # gradients take the trainable parameter's dtype (torch allocates grads like the param)
        grad_b = (
            tb
            if self.is_lora
            else DTYPE_BYTES[grad]
            if weight == recipe(self.recipe).weight
            else wb
        )
        return {
            "method": CODE["method"][self.method],
            "rank": self.lora_rank if self.is_lora else 0,
            "lora_dropout": self.lora_dropout > 0,
            "recipe": CODE["recipe"][self.recipe.lower()],
            "weight_bytes": wb,
            "grad_bytes": grad_b,
            "master_bytes": DTYPE_BYTES[master] if master and tb < 4 else 0.0,
            "state_bytes": DTYPE_BYTES[state] if state else tb,
            "adapter_bytes": tb,
            "compute_bytes": 4.0 if compute == "fp32" else 2.0,
            "compute_is_fp16": compute == "fp16",
            "compute_is_fp8": compute == "fp8",
            "autocast": bool(autocast),
            "optimizer": CODE["optimizer"][self.optimizer.lower()],
            "quant": CODE["quant"][self.quant.lower()],
            "micro_batch": self.micro_batch,
            "seq_len": self.seq_len,
            "grad_accum": self.grad_accum,
            "checkpointing": CODE["checkpointing"][self.checkpointing],
            "attention": CODE["attention"][self.attention],
            "loss": CODE["loss"][self.loss],
            "loss_chain": LOSS_CHAINS.index(self.loss_chain),
            "zero": self.zero,
            "offload": CODE["offload"][self.offload],
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "opt_in_bwd": self.optimizer_in_backward,
            "embed_units": self.fsdp_embedding_units,
            "sync_last": self.grad_sync == "last-micro-batch",
            "kbit_saves_input": self.kbit_saves_input,
            "compute": COMPUTE_NAMES.index(compute),
            "weight_override": DTYPE_NAMES.index(self.weight_dtype.lower())
            if self.weight_dtype
            else -1,
            "adapter_override": DTYPE_NAMES.index(self.adapter_dtype.lower())
            if self.adapter_dtype
            else -1,
            "backend": BACKEND_CODE[str(self.backend)],
            "kernels": KERNELS.index(self.kernels),
            "fp8_recipe": FP8_RECIPES.index(self.fp8_recipe),
            "tp_overlap": self.tp_comm_overlap,
            "expandable": self.expandable_segments,
            "virtual_stages": self.virtual_stages,
            "model_code": MODEL_CODES.index(self.model_code),
            "attention_kernel": ATTENTION_KERNELS.index(self.attention_kernel),
        }


#: integer codes of the categorical columns
CODE: dict[str, dict[str, int]] = {
    "method": {m: i for i, m in enumerate(METHODS)},
    "checkpointing": {c: i for i, c in enumerate(CHECKPOINTING)},
    "attention": {a: i for i, a in enumerate(ATTENTION)},
    "loss": {x: i for i, x in enumerate(LOSSES)},
    "loss_chain": {x: i for i, x in enumerate(LOSS_CHAINS)},
    "offload": {o: i for i, o in enumerate(OFFLOADS)},
    "optimizer": {o: i for i, o in enumerate(OPTIMIZER_NAMES)},
    "quant": {q: i for i, q in enumerate(QUANT_NAMES)},
    "recipe": {r: i for i, r in enumerate(RECIPE_NAMES)},
    "kernels": {k: i for i, k in enumerate(KERNELS)},
    "fp8_recipe": {r: i for i, r in enumerate(FP8_RECIPES)},
    "model_code": {m: i for i, m in enumerate(MODEL_CODES)},
    "attention_kernel": {k: i for i, k in enumerate(ATTENTION_KERNELS)},
}
