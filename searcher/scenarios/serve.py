"""The ``serve`` scenario kind: a serving plan's numbers (fitplan serve --json), checked.

    - name: "Llama-2-7B, one request of 2,048 tokens"
      kind: serve
      model: {id: llama-2-7b}
      gpu: a100-80gb
      inputs: {context: 2048}       # also concurrency, tp, weights, kv_dtype, block_size,
                                    # gpu_memory_utilization, max_num_batched_tokens, max_num_seqs
      expect:
        kv_bytes_per_token: {bytes: 524288}
        kv_bytes_per_request: {gib: 1.0}

Metrics: every top-level number of ``fitplan serve --json`` (kv_bytes_per_token,
kv_bytes_per_request, max_concurrency, max_context, tp, fits …), ``memory_bytes.<term>``,
``speed.<figure>``, and ``kv_bytes_for.<tokens>`` (the cache of that many tokens, one copy).
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError

INPUTS = {
    "context",
    "concurrency",
    "tp",
    "weights",
    "kv_dtype",
    "block_size",
    "gpu_memory_utilization",
    "max_num_batched_tokens",
    "max_num_seqs",
    "cuda_graphs",
    "allow_long_context",
    "tokens",
}


def serve_metrics(case: Any) -> dict[str, Any]:
    from constraints.gpus import resolve_gpu
    from constraints.serving_plan import ServeRequest, plan_serving, serve_json
    from searcher.scenarios.cases import model_of

    inputs = dict(case.inputs)
    unknown = set(inputs) - INPUTS
    if unknown:
        raise FitplanError(
            f"serve case: unknown inputs {sorted(unknown)}", f"known: {sorted(INPUTS)}"
        )
    tokens = [int(t) for t in inputs.pop("tokens", [])]
    plan = plan_serving(model_of(case.model), resolve_gpu(case.gpu), ServeRequest(**inputs))
    j = serve_json(plan)
    metrics: dict[str, Any] = {
        k: v for k, v in j.items() if isinstance(v, (int, float)) and not isinstance(v, str)
    }
    metrics.update({f"memory_bytes.{k}": v for k, v in j["memory_bytes"].items()})
    if j["speed"]:
        metrics.update({f"speed.{k}": v for k, v in j["speed"].items()})
    for t in tokens:
        metrics[f"kv_bytes_for.{t}"] = plan.memory.kv_bytes_per_token * t
    return metrics
