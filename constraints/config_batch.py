"""N training configurations as numpy columns: the same knobs as :class:`TrainConfig`, every
categorical choice an integer code (:data:`constraints.config.CODE`) and every dtype resolved to
bytes per value, so that the memory and throughput models are plain array arithmetic over a
million candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from constraints.backends import BACKEND_NAMES
from constraints.config import (
    ATTENTION,
    ATTENTION_KERNELS,
    CHECKPOINTING,
    CODE,
    COLUMN_DTYPES,
    COMPUTE_NAMES,
    DTYPE_NAMES,
    FP8_RECIPES,
    KERNELS,
    LOSS_CHAINS,
    LOSSES,
    METHODS,
    MODEL_CODES,
    OFFLOADS,
    OPTIMIZER_NAMES,
    QUANT_NAMES,
    RECIPE_NAMES,
    TrainConfig,
)
from constraints.constants import KBIT_PREPARED_BYTES
from constraints.errors import FitplanError
from constraints.precision import recipe


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
    loss_chain: np.ndarray
    zero: np.ndarray
    offload: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    opt_in_bwd: np.ndarray
    embed_units: np.ndarray
    sync_last: np.ndarray
    kbit_saves_input: np.ndarray
    compute: np.ndarray
    weight_override: np.ndarray
    adapter_override: np.ndarray
    backend: np.ndarray
    kernels: np.ndarray
    fp8_recipe: np.ndarray
    tp_overlap: np.ndarray
    expandable: np.ndarray
    virtual_stages: np.ndarray
    model_code: np.ndarray
    attention_kernel: np.ndarray
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

    @property
    def kbit_prepared(self) -> np.ndarray:
        """QLoRA through PEFT's recipe, recognised by its fp32 adapters (PEFT's default):
        ``prepare_model_for_kbit_training`` upcasts every non-quantised parameter to fp32
        (constants.KBIT_PREPARED_BYTES). Sharded runs too: TRL skips the preparation for
        FSDP-QLoRA (``is_sharded_qlora``), but the PEFT docs' measured FSDP / ZeRO-3 QLoRA rows
        of Llama-70B (heldout_memory.csv, pd-*) are -2 to -7 % with it and -19 to -44 % without."""
        return (
            self.is_lora
            & (self.quant != CODE["quant"]["none"])
            & (self.adapter_bytes == KBIT_PREPARED_BYTES)
        )

    def config(self, i: int) -> TrainConfig:
        """Row ``i`` back as a TrainConfig (the inverse of ``from_configs``)."""
        compute = COMPUTE_NAMES[int(self.compute[i])]
        recipe_name = RECIPE_NAMES[int(self.recipe[i])]
        default_compute = recipe(recipe_name).compute
        w_over, a_over = int(self.weight_override[i]), int(self.adapter_override[i])
        return TrainConfig(
            method=METHODS[int(self.method[i])],
            lora_rank=int(self.rank[i]) or 16,
            lora_targets=self.target_names[int(self.targets[i])],
            lora_dropout=0.05 if self.lora_dropout[i] else 0.0,
            recipe=recipe_name,
            weight_dtype=DTYPE_NAMES[w_over] if w_over >= 0 else None,
            adapter_dtype=DTYPE_NAMES[a_over] if a_over >= 0 else None,
            compute_dtype=None if compute == default_compute else compute,
            optimizer=OPTIMIZER_NAMES[int(self.optimizer[i])],
            quant=QUANT_NAMES[int(self.quant[i])],
            micro_batch=int(self.micro_batch[i]),
            seq_len=int(self.seq_len[i]),
            grad_accum=int(self.grad_accum[i]),
            checkpointing=CHECKPOINTING[int(self.checkpointing[i])],  # type: ignore[arg-type]
            attention=ATTENTION[int(self.attention[i])],  # type: ignore[arg-type]
            loss=LOSSES[int(self.loss[i])],  # type: ignore[arg-type]
            loss_chain=LOSS_CHAINS[int(self.loss_chain[i])],  # type: ignore[arg-type]
            zero=int(self.zero[i]),
            offload=OFFLOADS[int(self.offload[i])],  # type: ignore[arg-type]
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            dp=int(self.dp[i]),
            optimizer_in_backward=bool(self.opt_in_bwd[i]),
            fsdp_embedding_units=bool(self.embed_units[i]),
            grad_sync="last-micro-batch" if self.sync_last[i] else "each-micro-batch",
            kbit_saves_input=bool(self.kbit_saves_input[i]),
            backend=BACKEND_NAMES[int(self.backend[i])],  # type: ignore[arg-type]
            kernels=KERNELS[int(self.kernels[i])],  # type: ignore[arg-type]
            fp8_recipe=FP8_RECIPES[int(self.fp8_recipe[i])],  # type: ignore[arg-type]
            tp_comm_overlap=bool(self.tp_overlap[i]),
            expandable_segments=bool(self.expandable[i]),
            virtual_stages=int(self.virtual_stages[i]),
            model_code=MODEL_CODES[int(self.model_code[i])],  # type: ignore[arg-type]
            attention_kernel=ATTENTION_KERNELS[int(self.attention_kernel[i])],  # type: ignore[arg-type]
        )

    @classmethod
    def from_configs(cls, configs: Sequence[TrainConfig]) -> ConfigBatch:
        if not configs:
            raise FitplanError("no configurations to evaluate")
        target_names = tuple(dict.fromkeys(c.lora_targets for c in configs))
        rows: dict[str, list[float]] = {f.name: [] for f in fields(cls) if f.name != "target_names"}
        for c in configs:
            for key, value in c.columns().items():
                rows[key].append(value)
            rows["targets"].append(target_names.index(c.lora_targets))
        cols: dict[str, np.ndarray] = {
            k: np.asarray(v, dtype=COLUMN_DTYPES[k]) for k, v in rows.items()
        }
        return cls(**cols, target_names=target_names)
