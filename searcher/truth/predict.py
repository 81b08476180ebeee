"""fitplan's prediction for each mapped case: peak memory on the row's metric, tokens/s per GPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constraints.config import TrainConfig
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from searcher.truth.cases import MemoryCase, ThroughputCase


@frozen
class MemoryResult:
    case: MemoryCase
    predicted_bytes: float
    #: parts of the prediction: allocated, allocator slack, CUDA context (fitting uses them)
    allocated: float
    slack: float
    context: float
    phase: str
    fits_predicted: bool
    fits_predicted_no_headroom: bool

    @property
    def error(self) -> float:
        """Signed relative error, (predicted − measured) / measured."""
        return self.predicted_bytes / self.case.measured_bytes - 1.0


def predict_memory(case: MemoryCase) -> MemoryResult:
    from constraints.breakdown import breakdown_of, verdict_of

    assert case.spec is not None and case.config is not None and case.gpu is not None
    config = case.config
    if case.grads_persist and config.grad_accum == 1 and not config.optimizer_in_backward:
        # the memory model holds gradients through the forward when accumulating; with
        # set_to_none=False they are held the same way, so evaluate it as accumulating
        config = config.model_copy(update={"grad_accum": 2})
    b = breakdown_of(case.spec, [config], case.gpu)[0]
    context = float(case.context_bytes if case.context_bytes is not None else b.cuda_context)
    allocated = float(b.allocated)
    slack = float(b.allocator_slack)
    predicted = {
        "allocated": allocated,
        "reserved": allocated + slack,
        # nvidia-smi also sees NCCL's buffers and the resident paged states
        "nvml": allocated + slack + context + float(b.nccl_buffers) + float(b.paged_optimizer),
    }[case.metric]
    return MemoryResult(
        case,
        predicted,
        allocated,
        slack,
        context,
        b.phase,
        verdict_of(b, case.gpu, 0.1).fits,
        verdict_of(b, case.gpu, 0.0).fits,
    )


@frozen
class ThroughputResult:
    case: ThroughputCase
    predicted_tokens_per_s_per_gpu: float

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_s_per_gpu / self.case.measured_tokens_per_s_per_gpu - 1.0


def predict_throughput(cases: Sequence[ThroughputCase], **constants: Any) -> list[ThroughputResult]:
    """Tokens/s per GPU of each case; ``constants`` override ETA_GEMM etc. (for the fit)."""
    import numpy as np

    from constraints.config_batch import ConfigBatch
    from constraints.memory import memory_arrays
    from constraints.throughput import throughput_arrays

    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(cases):
        assert c.spec is not None and c.gpu is not None
        groups.setdefault(
            (c.spec, c.gpu, c.gpus_per_node, c.inter_node_gb_s, c.nvlink_domain), []
        ).append(i)
    out = np.zeros(len(cases))
    for (spec, gpu, per_node, inter, domain), idx in groups.items():
        batch = ConfigBatch.from_configs([cases[i].config for i in idx])  # type: ignore[misc]
        configs = tuple(cases[i].config for i in idx)
        mem = _memory_cached(spec, batch, gpu, configs, memory_arrays)  # type: ignore[arg-type]
        t = throughput_arrays(
            spec,
            batch,
            gpu,
            gpus_per_node=per_node,
            inter_node_gb_s=inter,
            nvlink_domain=domain,
            memory=mem,
            **constants,
        )
        out[idx] = t["tokens_per_s"] / batch.gpus
    return [ThroughputResult(c, float(v)) for c, v in zip(cases, out, strict=True)]


#: memory arrays of a group of cases, keyed on everything they depend on: the model, the GPU and
#: the whole configuration of every row (method, ZeRO, TP/PP, dtypes... — TrainConfig is frozen
#: and hashable). The fit calls ``predict_throughput`` many times on the same cases.
_MEM_CACHE: dict[tuple[Any, ...], Any] = {}


def _memory_cached(
    spec: ModelSpec, batch: Any, gpu: GpuSpec, configs: tuple[TrainConfig, ...], fn: Any
) -> Any:
    k = (spec, gpu, configs)
    if k not in _MEM_CACHE:
        _MEM_CACHE[k] = fn(spec, batch, gpu)
    return _MEM_CACHE[k]
