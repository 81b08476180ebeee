"""Page data for ``fitplan serve --report``: the same request on every tensor-parallel degree the
model allows (one point each: memory per GPU against $ per million output tokens), the memory of
each GPU by term against the engine's budget, and the vLLM command that runs it."""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any

from constraints.serving_plan import TP_CANDIDATES, ServePlan, plan_serving, valid_tp
from constraints.serving_speed import serving_speed
from constraints.units import GiB

#: fitplan weight formats → vLLM ``--quantization`` (None: the checkpoint's own dtype).
VLLM_QUANTIZATION = {"fp8": "fp8", "int8": "bitsandbytes", "nf4": "bitsandbytes", "int4": "awq"}


def _repo(spec: Any) -> str:
    """The Hugging Face repository of a catalog model (else its id or config path)."""
    from constraints.errors import FitplanError
    from constraints.models import catalog_entry

    try:
        return str(catalog_entry(spec.id).get("hf_repo") or spec.id)
    except (FitplanError, KeyError):
        return spec.id


def vllm_command(p: ServePlan) -> str:
    r, m = p.request, p.memory
    repo = _repo(p.spec)
    cmd = ["vllm", "serve", repo, "--tensor-parallel-size", str(m.tp)]
    cmd += ["--max-model-len", str(p.context)]
    cmd += ["--gpu-memory-utilization", f"{r.gpu_memory_utilization:g}"]
    cmd += ["--block-size", str(m.block_size), "--max-num-seqs", str(max(p.concurrency, 1))]
    cmd += ["--max-num-batched-tokens", str(p.max_num_batched_tokens)]
    if r.kv_dtype != "auto":
        cmd += ["--kv-cache-dtype", r.kv_dtype]
    if r.weights in VLLM_QUANTIZATION:
        cmd += ["--quantization", VLLM_QUANTIZATION[r.weights]]
    if not r.cuda_graphs:
        cmd.append("--enforce-eager")
    return shlex.join(cmd)


def _kv_needed(p: ServePlan) -> int:
    """KV bytes per GPU the request holds: whole blocks for each of its requests."""
    return p.kv_bytes_per_request_per_gpu * max(p.concurrency, 1)


def _terms(p: ServePlan) -> dict[str, int]:
    m = p.memory
    terms = {
        "weights": m.weights,
        "prefill activations": m.activations,
        "CUDA context + NCCL": m.cuda_context + m.nccl,
        "CUDA graphs": m.cuda_graphs,
    }
    if not p.fits:  # the KV cache it would need, above the budget line
        return {**terms, "KV cache needed": _kv_needed(p)}
    used = min(_kv_needed(p), m.kv_cache)
    return {**terms, "KV cache in use": used, "KV cache free": m.kv_cache - used}


def _member(p: ServePlan) -> dict[str, Any]:
    m, s = p.memory, p.speed
    if s is None and (p.gpu.bf16_tflops or p.gpu.fp16_tflops):
        # it does not fit: the roofline still says what it would cost with room enough
        s = serving_speed(
            p.spec,
            p.gpu,
            m,
            weights=p.request.weights,
            context=p.context,
            concurrency=max(min(p.concurrency, p.max_num_seqs), 1),
            max_num_batched_tokens=p.max_num_batched_tokens,
        )
    price = p.gpu.usd_per_gpu_hour
    gpus = m.tp
    label = f"TP {m.tp}: {p.concurrency} × {p.context:,} tokens" + (
        "" if p.fits else " (does not fit)"
    )
    if s is not None and price:
        y = gpus * price / 3600.0 / s.decode_tokens_per_s * 1e6
        y_text = f"${y:,.3f} per M output tokens"
    else:
        y = float(gpus)
        y_text = f"{gpus} GPUs"
    details = {
        "max concurrency": str(p.max_concurrency),
        "max context": f"{p.max_context:,} tokens",
        "KV per token": f"{m.kv_bytes_per_token:,} B ({m.kv_bytes_per_token_per_gpu:,.0f} B per GPU)",
        "KV blocks": f"{m.kv_blocks:,} × {m.block_size} tokens",
    }
    if s is not None and p.fits:
        details["decode"] = (
            f"{s.decode_tokens_per_s_per_request:,.1f} tokens/s per request, "
            f"{s.decode_tokens_per_s:,.0f} in all"
        )
        details["prefill"] = f"{s.prefill_tokens_per_s:,.0f} tokens/s"
    needed = m.non_kv + _kv_needed(p)
    hover = f"{label}<br>{needed / GiB:.1f} GiB per GPU in use<br>{y_text}"
    return {
        "label": label,
        "method": "serve" if p.fits else "does not fit",
        "x": needed / GiB,
        "y": y,
        "y_text": y_text,
        "hover": hover,
        "terms": _terms(p),
        "command": vllm_command(p),
        "details": details,
    }


def serve_page_data(plan: ServePlan) -> dict[str, Any]:
    r = plan.request
    concurrency = max(plan.concurrency, 1)
    plans = []
    degrees = sorted({*TP_CANDIDATES, plan.memory.tp})
    for tp in degrees:
        if not valid_tp(plan.spec, tp):
            continue
        if tp == plan.memory.tp:
            plans.append(plan)
            continue
        q = replace(r, tp=tp, context=plan.context, concurrency=concurrency)
        plans.append(plan_serving(plan.spec, plan.gpu, q))
    selected = next(i for i, q in enumerate(plans) if q.memory.tp == plan.memory.tp)
    m = plan.memory
    return {
        "title": f"fitplan serve: {plan.spec.name} on {plan.gpu.name}",
        "subtitle": (
            f"{concurrency} requests × {plan.context:,} tokens; weights {r.weights}, KV "
            f"{r.kv_dtype}, blocks of {m.block_size}, gpu_memory_utilization "
            f"{r.gpu_memory_utilization:g}"
        ),
        "facts": {
            "KV per token": f"{m.kv_bytes_per_token:,} B",
            "KV per request": f"{plan.kv_bytes_per_request / GiB:.3f} GiB",
            "max concurrency": str(plan.max_concurrency),
        },
        "members": [_member(q) for q in plans],
        "selected": selected,
        "scatter_title": "Tensor-parallel degrees: cost against memory per GPU",
        "x_title": "memory per GPU in use (GiB)",
        "y_title": "$ per million output tokens" if plan.gpu.usd_per_gpu_hour else "GPUs",
        "y_log": False,
        "usable_bytes": m.budget,
        "usable_label": f"engine budget ({r.gpu_memory_utilization:g} × memory)",
        "notes": list(plan.notes),
    }


def write_serve_page(plan: ServePlan, path: str, *, force: bool = False):
    from searcher.report.page import write_page

    return write_page(serve_page_data(plan), path, force=force)
