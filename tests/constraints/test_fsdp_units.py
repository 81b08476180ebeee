"""FSDP's unsharded working set with the embedding and the head as units of their own.

Golden numbers from Llama-3.1-70B's published shapes (hidden 8192, MLP 28672, 64 query and 8
key/value heads of 128, vocabulary 128256), not from the code: one decoder layer is
2·8192² (q, o) + 2·8192·1024 (k, v) + 3·8192·28672 (MLP) + 2·8192 (norms) = 855,654,400
parameters; the embedding and the untied head are 128256·8192 = 1,050,673,152 each; the final
norm 8192. torchtune's recipes/configs/llama3_1/70B_full.yaml (commit 30b8519e8) shards
``custom_sharded_layers: ['tok_embeddings', 'output']`` before the root, which then holds only
the final norm.
"""

from __future__ import annotations

import numpy as np

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.model_states import (
    fsdp_working_bytes,
    model_share,
    trainable_params,
    weight_parts,
)
from constraints.models import resolve_model
from searcher.truth.row_vocabulary import sharding_of

LAYER = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
VOCAB_UNIT = 128256 * 8192
NORM = 8192
ONE = np.ones(1)  # one byte per parameter: the working set in parameters


def _batch(**kw: object) -> tuple[object, ConfigBatch]:
    spec = resolve_model("llama-3.1-70b")
    cfg = TrainConfig(method="full", zero=3, dp=8, backend="fsdp2", **kw)  # type: ignore[arg-type]
    return spec, ConfigBatch.from_configs([cfg])


def test_shapes_are_the_published_ones() -> None:
    assert LAYER == 855_654_400
    assert VOCAB_UNIT == 1_050_673_152


def test_root_unit_holds_embedding_and_head_for_the_whole_step() -> None:
    spec, batch = _batch()
    mid, ends = fsdp_working_bytes(spec, batch, ONE, ONE)  # type: ignore[arg-type]
    assert mid[0] == 2 * LAYER + 2 * VOCAB_UNIT + NORM
    assert ends[0] == mid[0]


def test_own_units_two_layers_mid_step_one_vocab_unit_at_the_ends() -> None:
    spec, batch = _batch(fsdp_embedding_units=True)
    mid, ends = fsdp_working_bytes(spec, batch, ONE, ONE)  # type: ignore[arg-type]
    assert mid[0] == 2 * LAYER + NORM
    assert ends[0] == LAYER + VOCAB_UNIT + NORM


def test_full_offload_gathers_bf16_units_on_the_gpu() -> None:
    """CPU offload (FSDP2 CPUOffloadPolicy): nothing resident, the whole working set is
    gathered; bf16 weights: 2 bytes each."""
    spec, batch = _batch(fsdp_embedding_units=True, offload="all")
    p = trainable_params(spec, batch)  # type: ignore[arg-type]
    w = weight_parts(spec, batch, p, model_share(spec, batch))  # type: ignore[arg-type]
    assert np.isclose(w["gathered_weights"][0], (2 * LAYER + NORM) * 2.0, rtol=1e-3)
    assert np.isclose(w["gathered_at_ends"][0], (VOCAB_UNIT - LAYER) * 2.0, rtol=1e-3)


def test_sharded_working_set_counts_the_other_ranks_shards_only() -> None:
    spec, batch = _batch(fsdp_embedding_units=True)
    p = trainable_params(spec, batch)  # type: ignore[arg-type]
    w = weight_parts(spec, batch, p, model_share(spec, batch))  # type: ignore[arg-type]
    assert np.isclose(w["gathered_weights"][0], (2 * LAYER + NORM) * 2.0 * 7 / 8, rtol=1e-3)


def test_default_leaves_the_ends_alone() -> None:
    spec, batch = _batch()
    p = trainable_params(spec, batch)  # type: ignore[arg-type]
    w = weight_parts(spec, batch, p, model_share(spec, batch))  # type: ignore[arg-type]
    assert w["gathered_at_ends"][0] == 0.0


def test_round_trip_through_the_batch() -> None:
    _, batch = _batch(fsdp_embedding_units=True)
    assert batch.config(0).fsdp_embedding_units is True


def test_no_cpu_offload_is_not_an_offload() -> None:
    assert "offload" not in sharding_of("FSDP2 full shard, no CPU offload", 8)
    both = sharding_of("FSDP full shard + FSDP CPU offload of params/grads/optimizer", 8)
    assert both["offload"] == "all"


def test_qlora_root_unit_is_16_bit() -> None:
    """Under QLoRA only the layers' linears are NF4; the embedding and the head in the root stay
    bf16 (2 bytes): moving them out of the root removes 2 x 128256 x 8192 x 2 B of the other
    ranks' shards (7/8 of it on 8 GPUs) from the working set."""
    spec = resolve_model("llama-3.1-70b")
    base = TrainConfig(method="qlora", quant="nf4-dq", zero=3, dp=8, backend="fsdp2")
    own = base.model_copy(update={"fsdp_embedding_units": True})
    batch = ConfigBatch.from_configs([base, own])
    p = trainable_params(spec, batch)
    w = weight_parts(spec, batch, p, model_share(spec, batch))
    moved = w["gathered_weights"][0] - w["gathered_weights"][1]
    assert np.isclose(moved, 2 * VOCAB_UNIT * 2.0 * 7 / 8, rtol=1e-6)
