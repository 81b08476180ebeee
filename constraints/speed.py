"""One configuration's speed: step time, tokens/s, MFU and the step's decomposition.

What ``fitplan explain`` prints beside the memory, whether the configuration fits or not, and what
``fitplan accuracy`` scores per row::

    from constraints.speed import speed_of
    s = speed_of(spec, TrainConfig(micro_batch=2), gpu)
    s.step_time_s, s.tokens_per_s_per_gpu, s.parts["attention_s"]
"""

from __future__ import annotations

import math

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.record import Record
from constraints.throughput import DECOMPOSITION, DEFAULT_INTER_NODE_GB_S, throughput_arrays

__all__ = ["StepTime", "speed_of"]


@frozen(slots=True, kw_only=True)
class StepTime(Record):
    """Seconds per optimizer step and its parts (they add up to ``step_time_s``); tokens/s."""

    step_time_s: float
    tokens_per_step: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    usd_per_mtok: float | None
    #: DECOMPOSITION → seconds per step
    parts: dict[str, float]
    #: GEMM group → seconds per step (its share of ``parts["gemm_s"]``)
    gemm_groups: dict[str, float]
    gpus_per_node: int
    inter_node_gb_s: float
    nvlink_domain: int | None = None


def speed_of(
    spec: ModelSpec,
    cfg: TrainConfig,
    gpu: GpuSpec,
    *,
    gpus_per_node: int = 8,
    inter_node_gb_s: float = DEFAULT_INTER_NODE_GB_S,
    nvlink_domain: int | None = None,
) -> StepTime:
    t = throughput_arrays(
        spec,
        ConfigBatch.from_configs([cfg]),
        gpu,
        gpus_per_node=gpus_per_node,
        inter_node_gb_s=inter_node_gb_s,
        nvlink_domain=nvlink_domain,
    )
    usd = float(t["usd_per_mtok"][0])
    tokens_per_s = float(t["tokens_per_s"][0])
    return StepTime(
        step_time_s=float(t["step_time_s"][0]),
        tokens_per_step=float(t["tokens_per_step"][0]),
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / cfg.gpus,
        mfu=float(t["mfu"][0]),
        usd_per_mtok=None if math.isnan(usd) else usd,
        parts={k: float(t[k][0]) for k in DECOMPOSITION},
        gemm_groups={
            k.removeprefix("gemm:").removesuffix("_s"): float(v[0])
            for k, v in t.items()
            if k.startswith("gemm:")
        },
        gpus_per_node=gpus_per_node,
        inter_node_gb_s=inter_node_gb_s,
        nvlink_domain=nvlink_domain,
    )
