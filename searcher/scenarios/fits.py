"""The ``fits`` scenario kind: which methods of a model fit a card ("what fits on my 24 GB card").

    - name: "Llama-2-7B on a 24 GB card"
      kind: fits
      model: {id: llama-2-7b}
      gpu: rtx-4090
      config: {optimizer: adamw, offload: none}      # pins (the source's assumptions)
      inputs: {seq_len: 2048, target_batch: 8}      # also gpus, cpu_ram
      expect:
        full.fits: {equals: false}
        qlora.fits: {equals: true}
        qlora.needed: {min_gb: 6, max_gb: 10}

Metrics: ``<method>.fits`` (some configuration of that method fits: the search's feasibility,
knobs searched unless pinned), ``<method>.needed`` (the least memory any configuration of that
method needs that the card can run, bytes; for a fitting method, among those that fit),
``inference.fits`` / ``inference.needed`` (16-bit weights, one request of ``seq_len`` tokens),
``usable`` (bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from constraints.errors import FitplanError


def fits_metrics(case: Any) -> dict[str, Any]:
    from constraints.breakdown import usable_bytes
    from constraints.config import CODE
    from constraints.constants import DEFAULT_HEADROOM
    from constraints.gpus import resolve_gpu
    from constraints.inference import inference_memory
    from constraints.units import parse_size
    from searcher.scenarios.cases import model_of
    from searcher.search.run import run_search
    from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE, SearchProblem
    from searcher.search.strategies import ExhaustiveStrategy

    spec = model_of(case.model)
    gpu = resolve_gpu(case.gpu)
    headroom = DEFAULT_HEADROOM if case.headroom is None else case.headroom
    inputs = dict(case.inputs)
    unknown = set(inputs) - {"seq_len", "target_batch", "gpus", "cpu_ram"}
    if unknown:
        raise FitplanError(f"fits case: unknown inputs {sorted(unknown)}")
    seq_len = int(inputs.get("seq_len", 2048))
    cpu_ram = inputs.get("cpu_ram")
    problem = SearchProblem(
        model=spec,
        gpu=gpu,
        max_gpus=int(inputs.get("gpus", 1)),
        target_batch=int(inputs.get("target_batch", 8)),
        seq_len=seq_len,
        headroom=headroom,
        cpu_ram_per_node=parse_size(str(cpu_ram)) if cpu_ram else DEFAULT_CPU_RAM_PER_NODE,
        pins=dict(case.config),
    )
    result = run_search(problem, ExhaustiveStrategy(), keep_evaluation=True)
    ev = result.evaluation
    assert ev is not None
    usable = usable_bytes(gpu, headroom)[0]
    metrics: dict[str, Any] = {"usable": usable}
    runnable = (ev.hardware == 0) & ev.cpu_ok
    for method in ("full", "lora", "qlora"):
        sel = ev.batch.method == CODE["method"][method]
        feasible = sel & ev.feasible
        metrics[f"{method}.fits"] = bool(feasible.any())
        pool = feasible if feasible.any() else sel & runnable
        metrics[f"{method}.needed"] = float(ev.needed[pool].min()) if pool.any() else None
    half = "bf16" if gpu.supports_bf16 or gpu.custom else "fp16"
    inf = inference_memory(spec, gpu, batch=1, context=seq_len, weight_dtype=half)
    needed = inf.total - inf.cuda_context
    metrics["inference.fits"] = bool(needed <= usable)
    metrics["inference.needed"] = float(needed)
    return {k: v for k, v in metrics.items() if v is not None and not _nan(v)}


def _nan(v: Any) -> bool:
    return isinstance(v, float) and bool(np.isnan(v))
