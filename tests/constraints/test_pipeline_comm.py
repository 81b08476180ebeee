"""Pipeline point-to-point traffic under sequence parallel.

Megatron-Core sends each stage's output with shape [s/tp, b, h] when sequence parallel is on
(megatron/core/pipeline_parallel/schedules.py get_tensor_shapes: ``seq_length //=
tensor_model_parallel_size`` under sequence_parallel): each TP rank sends its own sequence
shard, 1/tp of the activation, forward, and receives its gradient backward."""

from __future__ import annotations

import pytest

from constraints.collectives import intra_node_bandwidth
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from constraints.throughput import throughput_arrays

S, B, ACCUM, TP, PP = 4096, 1, 8, 2, 4


def test_sequence_parallel_sends_a_tp_shard_between_stages() -> None:
    spec, gpu = catalog_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    cfg = TrainConfig(
        recipe="bf16-master",
        micro_batch=B,
        seq_len=S,
        grad_accum=ACCUM,
        tp=TP,
        pp=PP,
        dp=1,
        backend="megatron",
    )
    t = throughput_arrays(spec, ConfigBatch.from_configs([cfg]), gpu)
    # forward activation + backward gradient, 2 bytes each, every micro-batch; one node (NVLink)
    expected = 2 * (S // TP) * B * spec.hidden * 2 * ACCUM / intra_node_bandwidth(gpu)
    assert t["pp_comm_s"][0] == pytest.approx(expected, rel=1e-9)
