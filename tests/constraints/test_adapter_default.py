"""Unpinned adapters take the dtype the stack builds them in: PEFT's fp32 (``get_peft_model``'s
``autocast_adapter_dtype=True``), the base's where DeepSpeed's 16-bit engine casts the whole model
or torchtune builds them; and the search pairs each variant with the dtype of the row's backend."""

from __future__ import annotations

import numpy as np
import pytest

from constraints.backends import BACKEND_CODE
from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.memory import memory_arrays
from constraints.models import catalog_model
from searcher.search.factors import Factors
from searcher.search.space import SearchProblem


@pytest.mark.heavy
def test_peft_builds_fp32_adapters_on_a_bf16_base() -> None:
    """The real PEFT on a tiny bf16 Llama: what fitplan assumes when --adapter-dtype is left out."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=128,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    peft_model = get_peft_model(model, LoraConfig(r=8, target_modules="all-linear"))
    dtypes = {p.dtype for n, p in peft_model.named_parameters() if "lora_" in n}
    assert dtypes == {torch.float32}
    assert TrainConfig(method="lora", recipe="bf16-torch").trainable_dtype() == "fp32"


def test_fp32_adapters_cost_their_four_bytes_and_the_kbit_recipe() -> None:
    """Llama-3.1-8B r16 all-linear: 41,943,040 adapter parameters (PEFT's
    print_trainable_parameters for this model); QLoRA's recipe holds the embedding and the head
    (2 × 128,256 × 4,096 values) and the norms in fp32 instead of bf16."""
    spec, gpu = catalog_model("llama-3.1-8b"), resolve_gpu("a100-80gb")
    lora = TrainConfig(method="lora", recipe="bf16-torch", lora_rank=16)
    cast = lora.model_copy(update={"adapter_dtype": "bf16"})
    arrays = memory_arrays(spec, ConfigBatch.from_configs([lora, cast]), gpu)
    assert arrays["weights"][0] - arrays["weights"][1] == pytest.approx(41_943_040 * 2, rel=1e-6)
    qlora = TrainConfig(method="qlora", quant="nf4", recipe="bf16-torch")
    q_cast = qlora.model_copy(update={"adapter_dtype": "bf16"})
    prepared, plain = ConfigBatch.from_configs([qlora, q_cast]).kbit_prepared.tolist()
    assert prepared and not plain
    q = memory_arrays(spec, ConfigBatch.from_configs([qlora, q_cast]), gpu)
    embed_and_head = 2 * 128_256 * 4_096
    assert q["weights"][0] - q["weights"][1] >= embed_and_head * 2 + 41_943_040 * 2


def test_search_rows_take_their_backends_adapter_dtype() -> None:
    """The same bf16-torch LoRA variant: fp32 adapters on FSDP2 / DDP rows, bf16 on DeepSpeed."""
    problem = SearchProblem(
        model=catalog_model("llama-3.2-1b"),
        gpu=resolve_gpu("a100-80gb"),
        max_gpus=2,
        min_gpus=2,
        target_batch=8,
        seq_len=2048,
        pins={"method": "lora", "recipe": "bf16-torch", "lora_rank": 16},
    )
    f = Factors(problem)
    pairs = list(f.pairs(None, chunk=1 << 20))
    s, r = np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])
    batch = f.batch(s, r)
    on_ds = batch.backend == BACKEND_CODE["deepspeed"]
    assert on_ds.any() and (~on_ds).any()
    assert set(batch.adapter_bytes[on_ds].tolist()) == {2.0}
    assert set(batch.adapter_bytes[~on_ds].tolist()) == {4.0}
    for i in (int(np.flatnonzero(on_ds)[0]), int(np.flatnonzero(~on_ds)[0])):
        cfg = batch.config(i)
        assert ConfigBatch.from_configs([cfg]).adapter_bytes[0] == batch.adapter_bytes[i]


def test_torchtune_search_builds_adapters_in_the_model_dtype() -> None:
    problem = SearchProblem(
        model=catalog_model("llama-3.2-1b"),
        gpu=resolve_gpu("a100-80gb"),
        max_gpus=1,
        target_batch=8,
        seq_len=2048,
        pins={"method": "lora", "lora_rank": 16},
        emit_format="torchtune",
        framework="torchtune",
    )
    f = Factors(problem)
    assert {st["adapter_dtype"] for st in f.statics} <= {"bf16", "fp32"}
    for st in f.statics:
        assert st["adapter_dtype"] == TrainConfig(**{**st}).base_adapter_dtype()
