"""The memory cache behind ``predict_throughput`` must key on the whole configuration: rows that
differ only in method, ZeRO stage, TP/PP or dtype get their own memory arrays (issue 12)."""

from __future__ import annotations

import pytest

from constraints.config import TrainConfig
from constraints.gpus import resolve_gpu
from constraints.models import catalog_model
from searcher.truth import predict as P
from searcher.truth.cases import ThroughputCase

SPEC = catalog_model("llama-3.2-1b")
GPU = resolve_gpu("a100-80gb")


def _case(**fields: object) -> ThroughputCase:
    config = TrainConfig(micro_batch=2, seq_len=1024, **fields)  # type: ignore[arg-type]
    return ThroughputCase("t", "test", spec=SPEC, config=config, gpu=GPU, gpus_per_node=8)


def _alone(case: ThroughputCase) -> float:
    P._MEM_CACHE.clear()
    return P.predict_throughput([case])[0].predicted_tokens_per_s_per_gpu


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"method": "full"}, {"method": "lora"}),
        ({"zero": 0, "dp": 2}, {"zero": 3, "dp": 2}),
        ({"recipe": "amp"}, {"recipe": "bf16-torch"}),
        ({"tp": 1}, {"tp": 2}),
    ],
)
def test_a_row_after_a_different_row_gets_its_own_prediction(
    first: dict[str, object], second: dict[str, object]
) -> None:
    a, b = _case(**first), _case(**second)
    expected_b = _alone(b)
    expected_a = _alone(a)
    P._MEM_CACHE.clear()
    got_a = P.predict_throughput([a])[0].predicted_tokens_per_s_per_gpu
    got_b = P.predict_throughput([b])[0].predicted_tokens_per_s_per_gpu  # same index 0, same shape
    assert got_a == pytest.approx(expected_a)
    assert got_b == pytest.approx(expected_b)
    assert got_a != pytest.approx(got_b)
