"""A training configuration: one (pydantic, validated) or a numpy batch of many (vectorised).

:class:`TrainConfig` is what a person writes; :class:`ConfigBatch` is the same knobs as numpy
columns, with every categorical choice already resolved to bytes per value, so that the memory and
throughput models are plain array arithmetic over a million candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from constraints.errors import FitplanError
from constraints.precision import (
    DEFAULT_RECIPE,
    DTYPE_BYTES,
    OPTIMIZERS,
    QUANTS,
    RECIPES,
    dtype_bytes,
    optimizer,
    quant,
    recipe,
    with_compute,
)

Method = Literal["full", "lora", "qlora"]
METHODS: tuple[Method, ...] = ("full", "lora", "qlora")
CHECKPOINTING = ("none", "selective", "full")
ATTENTION = ("flash", "sdpa", "eager")
LOSSES = ("standard", "chunked", "fused")
OFFLOADS = ("none", "optimizer", "all")
OPTIMIZER_NAMES = tuple(OPTIMIZERS)
QUANT_NAMES = tuple(QUANTS)
RECIPE_NAMES = tuple(RECIPES)


class TrainConfig(BaseModel):
    """One training configuration (per data-parallel replica unless stated)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method = "full"
    lora_rank: int = Field(default=16, ge=1, le=65536)
    lora_targets: str = "all-linear"
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    recipe: str = DEFAULT_RECIPE
    weight_dtype: str | None = None
    adapter_dtype: str | None = None
    compute_dtype: str | None = None
    optimizer: str = "adamw"
    quant: str = "none"
    micro_batch: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=2048, ge=1, le=10_000_000)
    grad_accum: int = Field(default=1, ge=1, le=1_000_000)
    checkpointing: Literal["none", "selective", "full"] = "none"
    attention: Literal["flash", "sdpa", "eager"] = "flash"
    loss: Literal["standard", "chunked", "fused"] = "standard"
    zero: int = Field(default=0, ge=0, le=3)
    offload: Literal["none", "optimizer", "all"] = "none"
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    dp: int = Field(default=1, ge=1, le=1_000_000)
    optimizer_in_backward: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
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
                "--method qlora needs a quantised base", "use --quant nf4, nf4-dq or int8"
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
        return self

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


#: integer codes of the categorical columns
CODE: dict[str, dict[str, int]] = {
    "method": {m: i for i, m in enumerate(METHODS)},
    "checkpointing": {c: i for i, c in enumerate(CHECKPOINTING)},
    "attention": {a: i for i, a in enumerate(ATTENTION)},
    "loss": {x: i for i, x in enumerate(LOSSES)},
    "offload": {o: i for i, o in enumerate(OFFLOADS)},
    "optimizer": {o: i for i, o in enumerate(OPTIMIZER_NAMES)},
    "quant": {q: i for i, q in enumerate(QUANT_NAMES)},
    "recipe": {r: i for i, r in enumerate(RECIPE_NAMES)},
}


@dataclass
class ConfigBatch:
    """N configurations as columns. Categorical knobs are integer codes (see ``CODE``); dtype
    choices are resolved to bytes per element. ``targets`` indexes ``target_names``."""

    method: np.ndarray
    rank: np.ndarray
    targets: np.ndarray
    lora_dropout: np.ndarray
    recipe: np.ndarray
    weight_bytes: np.ndarray
    grad_bytes: np.ndarray
    master_bytes: np.ndarray
    state_bytes: np.ndarray
    adapter_bytes: np.ndarray
    compute_bytes: np.ndarray
    compute_is_fp16: np.ndarray
    compute_is_fp8: np.ndarray
    autocast: np.ndarray
    optimizer: np.ndarray
    quant: np.ndarray
    micro_batch: np.ndarray
    seq_len: np.ndarray
    grad_accum: np.ndarray
    checkpointing: np.ndarray
    attention: np.ndarray
    loss: np.ndarray
    zero: np.ndarray
    offload: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    opt_in_bwd: np.ndarray
    target_names: tuple[str, ...] = ("all-linear",)

    def __len__(self) -> int:
        return int(self.method.shape[0])

    def take(self, index: np.ndarray) -> ConfigBatch:
        cols = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "target_names"}
        return ConfigBatch(**{k: v[index] for k, v in cols.items()}, target_names=self.target_names)

    @property
    def gpus(self) -> np.ndarray:
        return self.dp * self.tp * self.pp

    @property
    def is_lora(self) -> np.ndarray:
        return self.method != CODE["method"]["full"]

    @classmethod
    def from_configs(cls, configs: Sequence[TrainConfig]) -> ConfigBatch:
        if not configs:
            raise FitplanError("no configurations to evaluate")
        target_names = tuple(dict.fromkeys(c.lora_targets for c in configs))
        rows: dict[str, list[float]] = {f.name: [] for f in fields(cls) if f.name != "target_names"}
        for c in configs:
            weight, grad, master, state, compute, autocast = c.resolved_recipe()
            trainable_dtype = (c.adapter_dtype or weight).lower() if c.is_lora else weight
            if c.is_lora and c.adapter_dtype is None and weight not in ("fp32", "bf16", "fp16"):
                trainable_dtype = "bf16" if compute in ("bf16", "fp8") else compute
            wb = DTYPE_BYTES[weight]
            rows["method"].append(CODE["method"][c.method])
            rows["rank"].append(c.lora_rank if c.is_lora else 0)
            rows["targets"].append(target_names.index(c.lora_targets))
            rows["lora_dropout"].append(c.lora_dropout > 0)
            rows["recipe"].append(CODE["recipe"][c.recipe.lower()])
            rows["weight_bytes"].append(wb)
            # gradients take the trainable parameter's dtype (torch allocates grads like the param)
            rows["grad_bytes"].append(
                DTYPE_BYTES[trainable_dtype]
                if c.is_lora
                else DTYPE_BYTES[grad]
                if weight == recipe(c.recipe).weight
                else wb
            )
            rows["master_bytes"].append(
                DTYPE_BYTES[master] if master and DTYPE_BYTES[trainable_dtype] < 4 else 0.0
            )
            rows["state_bytes"].append(
                DTYPE_BYTES[state] if state else DTYPE_BYTES[trainable_dtype]
            )
            rows["adapter_bytes"].append(DTYPE_BYTES[trainable_dtype])
            rows["compute_bytes"].append(4.0 if compute == "fp32" else 2.0)
            rows["compute_is_fp16"].append(compute == "fp16")
            rows["compute_is_fp8"].append(compute == "fp8")
            rows["autocast"].append(bool(autocast))
            rows["optimizer"].append(CODE["optimizer"][c.optimizer.lower()])
            rows["quant"].append(CODE["quant"][c.quant.lower()])
            rows["micro_batch"].append(c.micro_batch)
            rows["seq_len"].append(c.seq_len)
            rows["grad_accum"].append(c.grad_accum)
            rows["checkpointing"].append(CODE["checkpointing"][c.checkpointing])
            rows["attention"].append(CODE["attention"][c.attention])
            rows["loss"].append(CODE["loss"][c.loss])
            rows["zero"].append(c.zero)
            rows["offload"].append(CODE["offload"][c.offload])
            rows["tp"].append(c.tp)
            rows["pp"].append(c.pp)
            rows["dp"].append(c.dp)
            rows["opt_in_bwd"].append(c.optimizer_in_backward)
        ints = {
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
            "zero",
            "offload",
            "tp",
            "pp",
            "dp",
        }
        bools = {"lora_dropout", "compute_is_fp16", "compute_is_fp8", "autocast", "opt_in_bwd"}
        cols = {
            k: np.asarray(v, dtype=np.int64 if k in ints else bool if k in bools else np.float64)
            for k, v in rows.items()
        }
        return cls(**cols, target_names=target_names)
