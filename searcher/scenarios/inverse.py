"""The ``inverse`` scenario kind: the longest sequence, largest micro-batch or fewest GPUs for
which some configuration fits (``searcher.search.inverse``), checked against hand arithmetic.

    - name: "…"
      kind: inverse
      model: {params: 1e9, layers: 24, hidden: 2048, vocab: 1}
      gpu: 24GB
      config: {method: full, recipe: bf16-master, optimizer: adamw}   # pins
      inputs: {question: seq-len, target_batch: 1, gpus: 1, seq_len: 1024}
      expect:
        value: {min: 2400, max: 3029}

Metrics: ``found`` (some value fits), ``value`` (the answer), ``gpus``, ``micro_batch``, ``seq_len`` and ``needed`` (bytes)
of the configuration that achieves it, ``probes`` (exhaustive searches run).
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError

QUESTIONS = ("seq-len", "micro-batch", "gpus")


def inverse_metrics(case: Any) -> dict[str, Any]:
    from constraints.constants import DEFAULT_HEADROOM
    from constraints.gpus import resolve_gpu
    from searcher.scenarios.cases import model_of
    from searcher.search.inverse import max_micro_batch, max_seq_len, min_gpus
    from searcher.search.space import SearchProblem

    inputs = dict(case.inputs)
    unknown = set(inputs) - {"question", "seq_len", "target_batch", "gpus", "max_seq_len"}
    if unknown:
        raise FitplanError(f"inverse case: unknown inputs {sorted(unknown)}")
    question = inputs.get("question")
    if question not in QUESTIONS:
        raise FitplanError(f"inverse case: inputs.question must be one of {', '.join(QUESTIONS)}")
    problem = SearchProblem(
        model=model_of(case.model),
        gpu=resolve_gpu(case.gpu),
        max_gpus=int(inputs.get("gpus", 1)),
        target_batch=int(inputs.get("target_batch", 1)),
        seq_len=int(inputs.get("seq_len", 2048)),
        headroom=DEFAULT_HEADROOM if case.headroom is None else case.headroom,
        pins=dict(case.config),
    )
    if question == "seq-len":
        answer = max_seq_len(problem, inputs.get("max_seq_len"))
    elif question == "micro-batch":
        answer = max_micro_batch(problem)
    else:
        answer = min_gpus(problem)
    metrics: dict[str, Any] = {"probes": answer.probes, "found": answer.value is not None}
    if answer.value is not None:
        metrics["value"] = answer.value
    if answer.member is not None:
        c = answer.member.config
        metrics.update(
            gpus=c.gpus,
            micro_batch=c.micro_batch,
            seq_len=c.seq_len,
            needed=float(answer.member.needed),
        )
    return metrics
