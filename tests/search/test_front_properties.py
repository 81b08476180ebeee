"""The front's contract for every model family (issue 14), over generated problems (hypothesis,
derandomised): every member fits (the scalar explain agrees), meets the target batch exactly,
uses at most the GPUs given, and no evaluated feasible configuration dominates it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constraints.breakdown import explain
from constraints.config_batch import ConfigBatch
from constraints.gpus import resolve_gpu
from constraints.models import resolve_model
from searcher.search.evaluate import evaluate
from searcher.search.run import run_search
from searcher.search.space import SearchProblem
from searcher.search.strategies import ExhaustiveStrategy

#: one catalog model of each family fitplan parses (small ones where the family has them)
FAMILIES = [
    "gpt2",
    "llama-3.2-1b",
    "qwen2.5-0.5b",
    "qwen3-0.6b",
    "gemma-2-2b",
    "phi-3-mini-4k",
    "opt-1.3b",
    "t5-small",
    "bert-base-uncased",
    "mistral-7b-v0.1",
    "falcon-7b",
    "olmo-7b",
    "olmo-2-7b",
    "mixtral-8x7b",
    "qwen3-30b-a3b",
]


@settings(
    max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    model=st.sampled_from(FAMILIES),
    gpu=st.sampled_from(["rtx-4090", "a100-80gb", "h100-sxm"]),
    gpus=st.sampled_from([1, 2, 4]),
    batch=st.sampled_from([4, 8, 16]),
    seq=st.sampled_from([256, 512, 1024]),
)
def test_front_fits_meets_the_batch_and_is_non_dominated(
    model: str, gpu: str, gpus: int, batch: int, seq: int
) -> None:
    spec = resolve_model(model)
    p = SearchProblem(
        model=spec,
        gpu=resolve_gpu(gpu),
        max_gpus=gpus,
        target_batch=batch,
        seq_len=min(seq, spec.max_position or seq),
    )
    result = run_search(p, ExhaustiveStrategy(), keep_evaluation=True)
    ev = result.evaluation
    assert ev is not None
    feasible = ev.objectives()[ev.feasible]
    for m in result.front:
        c = m.config
        assert c.micro_batch * c.grad_accum * c.dp == p.target_batch
        assert c.gpus <= p.max_gpus
        verdict = explain(p.model, c, p.gpu, p.headroom).verdict
        assert verdict.fits and m.needed <= verdict.usable, (model, c)
        row = evaluate(p, ConfigBatch.from_configs([c])).objectives()[0]
        dominated = (feasible <= row).all(axis=1) & (feasible < row).any(axis=1)
        assert not dominated.any(), (model, c)
