"""Throughput rows → :class:`ThroughputCase` s (or excluded ones, with the reason)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.models import ModelSpec, spec_from_hf_config
from searcher.truth.cases import (
    MEMORY_CSV,
    REQUIRED_MEMORY_COLUMNS,
    REQUIRED_THROUGHPUT_COLUMNS,
    THROUGHPUT_CSV,
    ThroughputCase,
    overrides,
    read_rows,
)
from searcher.truth.memory_rows import map_memory_row
from searcher.truth.row_vocabulary import checkpointing_of, gpu_of, model_of


def _gpt_spec(row: dict[str, str]) -> ModelSpec:
    """A GPT-style decoder from a row's shape columns (MPT of llm-foundry, Megatron's GPT)."""
    h = int(row["d_model"])
    seq = int(row["seq_len"])
    spec = spec_from_hf_config(
        {
            "model_type": "gpt2",
            "n_embd": h,
            "n_head": int(row["n_heads"]),
            "n_layer": int(row["n_layers"]),
            "n_inner": int(row.get("ffn_dim") or 4 * h),
            "vocab_size": int(row["vocab_size"]),
            "n_positions": seq,
            "activation_function": "gelu",
            "resid_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "embd_pdrop": 0.0,
        },
        id=re.sub(r"\s+", "-", row["model"].lower()),
        name=row["model"],
        source=f"{row.get('source', '')}: shape columns of row {row.get('row_id', '?')}",
    )
    return spec


def throughput_case(row: dict[str, str]) -> ThroughputCase:
    row_id = f"tp-{row.get('row_id', '?')}"
    source = row.get("source", "")
    ov = dict(overrides().get(row_id, {}))
    assumptions: list[str] = list(ov.get("assumptions", []))
    if ov.get("exclude"):
        return ThroughputCase(row_id, source, excluded=str(ov["exclude"]))
    try:
        return _throughput_case(row, row_id, source, ov, assumptions)
    except FitplanError as err:
        return ThroughputCase(row_id, source, excluded=str(err))
    except (KeyError, ValueError) as err:
        return ThroughputCase(row_id, source, excluded=f"missing or bad column: {err}")


def _throughput_case(
    row: dict[str, str], row_id: str, source: str, ov: dict[str, Any], assumptions: list[str]
) -> ThroughputCase:
    if ov.get("from_memory_row"):
        return _throughput_from_memory_row(row, row_id, source, ov, assumptions)
    low_src = source.lower()
    if "llm-foundry" in low_src:
        spec = _gpt_spec(row)
        assumptions.append(
            "MPT as a GPT-2-shaped decoder (LayerNorm, GELU 4x, learned positions); MPT has no "
            "biases, which are under 0.01 % of the weights and left in"
        )
    elif ov.get("model"):
        spec = model_of(ov["model"])
    else:
        try:
            spec = model_of(row["model"])
        except FitplanError:
            spec = _gpt_spec(row)
    gpu = gpu_of(ov.get("gpu") or row["gpu"])
    gpus = int(row["gpu_count"])
    tp = int(row.get("tp") or 1)
    pp = int(row.get("pp") or 1)
    dp = int(row.get("dp") or gpus // (tp * pp))
    prec = row.get("precision", "").lower()
    fields: dict[str, Any] = {"seq_len": int(row["seq_len"]), "tp": tp, "pp": pp, "dp": dp}
    if "amp_fp8" in prec:
        # Composer's amp_fp8 runs Transformer Engine linears under fp8_autocast (DelayedScaling)
        fields.update(recipe="amp", compute_dtype="fp8", fp8_recipe="te-delayed")
    elif "fp8" in prec:
        fields.update(recipe="amp", compute_dtype="fp8")
    elif "amp" in prec:
        fields.update(recipe="amp")
    elif "pure" in prec:
        fields.update(recipe="bf16-master")
    elif "fp16" in prec:
        fields.update(recipe="bf16-master", compute_dtype="fp16")
    else:
        fields.update(recipe="bf16-torch")
    if row.get("micro_batch_seqs"):
        fields["micro_batch"] = int(row["micro_batch_seqs"])
    if row.get("grad_accum"):
        fields["grad_accum"] = int(row["grad_accum"])
    ckpt = checkpointing_of(row.get("activation_checkpointing", ""))
    if ckpt is not None:
        fields["checkpointing"] = ckpt
    sharding = row.get("sharding", "").upper()
    if sharding == "FULL_SHARD" and dp > 1:
        fields["zero"] = 3
    elif sharding == "SHARD_GRAD_OP" and dp > 1:
        fields["zero"] = 2
    fields["attention"] = "flash" if gpu.supports_flash_attention else "sdpa"
    fields.update(speed_fields(row, assumptions))
    fields.update(ov.get("config", {}))
    config = TrainConfig(**fields)
    measured = _measured_tokens_per_gpu(row, spec)
    inter = float(ov.get("inter_node_gb_s", 0.0))
    if not inter:
        caveats = row.get("caveats", "").lower()
        if "1600 gbps" in caveats and "a100" in row.get("gpu", "").lower():
            inter = 1600 / 8 / 8  # 1600 Gb/s RoCE per 8-GPU node → 25 GB/s per GPU
        else:
            inter = 50.0
            if gpus > 8:
                assumptions.append("inter-node bandwidth not stated: 400 Gb/s per GPU assumed")
    return ThroughputCase(
        row_id,
        source,
        spec=spec,
        config=config,
        gpu=gpu,
        inter_node_gb_s=inter,
        measured_tokens_per_s_per_gpu=measured,
        assumptions=tuple(dict.fromkeys(assumptions)),
    )


def _throughput_from_memory_row(
    row: dict[str, str], row_id: str, source: str, ov: dict[str, Any], assumptions: list[str]
) -> ThroughputCase:
    """A throughput row whose configuration the matching memory row spells out."""
    mem_id = str(ov["from_memory_row"])
    rows = {r["id"]: r for r in read_rows(MEMORY_CSV, REQUIRED_MEMORY_COLUMNS)}
    mem_ov = {k: v for k, v in overrides().get(mem_id, {}).items() if k != "exclude"}
    mem = map_memory_row(rows[mem_id], mem_ov, list(mem_ov.get("assumptions", [])))
    assert mem.spec is not None and mem.gpu is not None and mem.config is not None
    config = TrainConfig(**{**mem.config.model_dump(), **speed_fields(row, assumptions)})
    return ThroughputCase(
        row_id,
        source,
        spec=mem.spec,
        config=config,
        gpu=mem.gpu,
        measured_tokens_per_s_per_gpu=_measured_tokens_per_gpu(row, mem.spec),
        assumptions=tuple(dict.fromkeys([f"configuration of memory row {mem_id}", *assumptions])),
    )


#: fp8 recipes as throughput rows name them (precision column), most specific first
_FP8_RECIPE_WORDS = (
    ("mxfp8", "mxfp8"),
    ("rowwise", "rowwise"),
    ("tensorwise", "tensorwise"),
    ("delayed", "te-delayed"),
    ("current", "te-current"),
)


def speed_fields(row: dict[str, str], assumptions: list[str]) -> dict[str, Any]:
    """The speed knobs a row states: kernel stack and async TP (``kernels_and_opts``), the fp8
    recipe (``precision``), virtual pipeline stages (``vp``)."""
    opts = row.get("kernels_and_opts", "").lower()
    prec = row.get("precision", "").lower()
    fields: dict[str, Any] = {}
    if "liger" in opts:
        fields["kernels"] = "liger"
    elif "transformer engine" in opts or "transformer_engine" in opts:
        fields["kernels"] = "te"
    elif "torch.compile" in opts or "compile=true" in opts:
        fields["kernels"] = "compile"
    if "async tp" in opts or "asynctp" in opts or "tp-comm-overlap" in opts:
        fields["tp_comm_overlap"] = True
    if "fp8" in prec or "float8" in prec:
        for word, name in _FP8_RECIPE_WORDS:
            if word in prec:
                fields["fp8_recipe"] = name
                break
    if (row.get("vp") or "").strip().isdigit() and int(row["vp"]) > 1:
        fields["virtual_stages"] = int(row["vp"])
    if fields.get("kernels") == "compile":
        assumptions.append("torch.compile: fused elementwise kernels (kernel stack 'compile')")
    code = model_code_of(row)
    if code != "hf":
        fields["model_code"] = code
    if attention_kernel_of(row) != "fa2":
        fields["attention_kernel"] = attention_kernel_of(row)
    return fields


def attention_kernel_of(row: dict[str, str]) -> str:
    """The flash-attention generation the row ran: llm-foundry's benchmark table ran
    FlashAttention-1 (its setup.py ``gpu`` extra pins flash-attn==1.0.9 at both table revisions,
    b2a43a1 2023-10 and 5e85bd6 2024-01; FA2 only under ``gpu-flash2``; submit_benchmarks.py
    defaults to attn_impl=triton); torchtune / torchtitan (SDPA's flash backend) and Qwen / HF
    (flash-attn 2) run FA2."""
    return "fa1" if "llm-foundry" in row.get("source", "").lower() else "fa2"


def model_code_of(row: dict[str, str]) -> str:
    """Whose model code the row ran (its eager kernels: constraints/eager_traffic.py): torchtune,
    torchtitan (with ``norm_type=fused_rmsnorm`` in ``kernels_and_opts`` where its train config
    set it), else Hugging Face's (llm-foundry's MPT rows are the fitted reference either way)."""
    source = row.get("source", "").lower()
    if "torchtune" in source:
        return "torchtune"
    if "torchtitan" in source:
        opts = row.get("kernels_and_opts", "").lower()
        return "torchtitan-fused-rmsnorm" if "fused_rmsnorm" in opts else "torchtitan"
    return "hf"


def _measured_tokens_per_gpu(row: dict[str, str], spec: ModelSpec) -> float:
    if row.get("tokens_per_sec_per_gpu"):
        column, tokens = "tokens_per_sec_per_gpu", float(row["tokens_per_sec_per_gpu"])
    elif row.get("tokens_per_sec_total"):
        column = "tokens_per_sec_total"
        tokens = float(row["tokens_per_sec_total"]) / int(row["gpu_count"])
    else:
        raise FitplanError("no measured tokens/s")
    if not math.isfinite(tokens) or tokens <= 0:
        raise FitplanError(f"{column} must be a positive number of tokens/s, got {row[column]!r}")
    return tokens


def load_throughput_cases(paths: Iterable[str | Path] | None = None) -> list[ThroughputCase]:
    cases: list[ThroughputCase] = []
    for path in paths or [THROUGHPUT_CSV]:
        for row in read_rows(path, REQUIRED_THROUGHPUT_COLUMNS):
            cases.append(throughput_case(row))
    return cases
