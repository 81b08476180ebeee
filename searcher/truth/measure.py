"""``fitplan measure``: run a few real training steps of a configuration and compare with fitplan.

The model is built from its ``config.json`` (catalog, calibration extra, or a path) with random
weights on the device; nothing is downloaded. The configuration is applied as a training script
would apply it:

- precision: ``fp32`` (fp32 weights), ``amp`` (fp32 weights + torch.autocast to the compute
  dtype), ``bf16-torch`` (a 16-bit model and plain torch AdamW), ``bf16-master`` (a 16-bit model,
  fp32 master copies stepped by the optimizer and copied back, as DeepSpeed does); ``bf16-pure``
  needs fp32 optimizer states on 16-bit parameters, which stock torch optimizers cannot hold, so it
  is refused;
- LoRA with PEFT (rank, targets, dropout; adapters in fp32 unless ``--adapter-dtype``), QLoRA with
  bitsandbytes NF4 where bitsandbytes and a CUDA GPU exist (a clear refusal elsewhere);
- optimizer: torch AdamW / SGD, transformers Adafactor, bitsandbytes 8-bit AdamW; the step
  fused into backward with post-accumulate-grad hooks (``--optimizer-in-backward``);
- activation checkpointing (HF ``gradient_checkpointing_enable``), the attention implementation
  (``flash`` → SDPA, which takes the flash kernel on CUDA; ``eager``), micro-batch, sequence
  length and gradient accumulation.

On CUDA it records ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` over all steps,
the device memory in use (``cudaMemGetInfo``, what NVML shows) and the CUDA context (in use −
reserved), and the step time (median of the steps after the first). On the CPU it records the
step time only and says memory is not measured. ``--json`` prints the result and the calibration
CSV row; ``--json FILE.csv`` also appends the row to that file (``fitplan accuracy FILE.csv``
then compares it).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from constraints.errors import FitplanError
from searcher.truth.training_setup import (
    build,
    build_optimizer,
    check_supported,
    detected_gpu,
    pick_device,
    torch_dtype,
)

if TYPE_CHECKING:
    from searcher.files import Output


def run_steps(
    model: Any, cfg: Any, device: str, steps: int, vocab: int, encoder_decoder: bool
) -> dict[str, Any]:
    """Train ``steps`` optimizer steps on random tokens; memory (CUDA) and step times."""
    import contextlib

    import torch

    opt, master = build_optimizer(model, cfg, device)
    _weight, _g, _m, _s, compute, autocast = cfg.resolved_recipe()
    amp = (
        torch.autocast(device_type=device, dtype=torch_dtype(compute))
        if autocast and compute in ("bf16", "fp16")
        else contextlib.nullcontext()
    )
    hooks = []
    if cfg.optimizer_in_backward:
        per_param = {}
        for p in (q for q in model.parameters() if q.requires_grad):
            per_param[p] = type(opt)([p], **{k: v for k, v in opt.defaults.items() if k in ("lr",)})

            def hook(param: Any) -> None:
                per_param[param].step()
                per_param[param].zero_grad(set_to_none=True)

            hooks.append(p.register_post_accumulate_grad_hook(hook))
    gen = torch.Generator(device="cpu").manual_seed(0)

    def batch() -> dict[str, Any]:
        ids = torch.randint(0, vocab, (cfg.micro_batch, cfg.seq_len), generator=gen).to(device)
        if encoder_decoder:
            return {"input_ids": ids, "labels": ids.clone()}
        return {"input_ids": ids, "labels": ids}

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        for _ in range(cfg.grad_accum):
            with amp:
                loss = model(**batch()).loss
            (loss / cfg.grad_accum).backward()
            del loss
        if not cfg.optimizer_in_backward:
            if master is not None:
                params, masters = master
                for p, m in zip(params, masters, strict=True):
                    m.grad = None if p.grad is None else p.grad.float()
                    p.grad = None
                opt.step()
                opt.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for p, m in zip(params, masters, strict=True):
                        p.copy_(m)
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    for h in hooks:
        h.remove()
    out: dict[str, Any] = {
        "step_times_s": times,
        "step_time_s": statistics.median(times[1:] if len(times) > 1 else times),
    }
    if cuda:
        free, total = torch.cuda.mem_get_info()
        reserved = torch.cuda.max_memory_reserved()
        out.update(
            allocated=torch.cuda.max_memory_allocated(),
            reserved=reserved,
            device_used=total - free,
            cuda_context=max(0, (total - free) - torch.cuda.memory_reserved()),
        )
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the configuration the arguments describe; returns the result record."""
    from searcher.truth.hf_build import config_of, require_torch

    if args.steps < 1:
        raise FitplanError(f"--steps must be at least 1, got {args.steps}")
    from searcher.inputs import explain_config

    # everything the arguments alone can refuse, before torch is needed (the GPU only names the
    # card the prediction is for: any will do to check the rest)
    explain_config(argparse.Namespace(**{**vars(args), "gpu": args.gpu or "a100-80gb"}))
    require_torch()
    import torch
    import transformers

    device = pick_device(args.device)
    cfg_dict, _spec = config_of(args.model)
    if args.gpu is None:
        args.gpu = detected_gpu() if device == "cuda" else "a100-80gb"
    spec, gpu, cfg, headroom, notes, _assumed = explain_config(args)
    cfg = cfg.as_planned()
    check_supported(cfg, args.gpus or 1)
    torch.manual_seed(0)
    model, build_notes = build(spec, cfg_dict, cfg, device)
    result = run_steps(model, cfg, device, args.steps, spec.vocab, spec.arch == "encoder-decoder")
    from constraints.breakdown import explain

    e = explain(spec, cfg, gpu, headroom)
    predicted: dict[str, float] = {
        "allocated": e.breakdown.allocated,
        "reserved": e.breakdown.reserved,
        "nvml_used": e.breakdown.total,
        "cuda_context": e.breakdown.cuda_context,
    }
    if device == "cuda":
        from constraints.config_batch import ConfigBatch
        from constraints.throughput import throughput_arrays

        t = throughput_arrays(spec, ConfigBatch.from_configs([cfg]), gpu)
        predicted["step_time_s"] = float(t["step_time_s"][0])
    tokens = cfg.micro_batch * cfg.seq_len * cfg.grad_accum
    record = {
        "model": spec.id,
        "model_arg": args.model,
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
        "gpu_for_prediction": gpu.id,
        "config": cfg.model_dump(),
        "steps": args.steps,
        "tokens_per_step": tokens,
        "measured": {
            **{k: v for k, v in result.items() if k != "step_times_s"},
            "step_times_s": result["step_times_s"],
            "tokens_per_s": tokens / result["step_time_s"],
        },
        "predicted": predicted,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "notes": [*notes, *build_notes]
        + ([] if device == "cuda" else ["CPU run: memory is not measured (step time only)"]),
    }
    record["csv_row"] = csv_row(record, spec, cfg)
    return record


def csv_row(record: dict[str, Any], spec: Any, cfg: Any) -> dict[str, str]:
    """The record as a row of the calibration memory CSV (with the structured fitplan_* columns)."""
    from constraints.units import GiB
    from searcher.truth.cases import MEMORY_COLUMNS, STRUCTURED_COLUMNS

    m = record["measured"]
    cuda = "allocated" in m
    weight, _g, _master, _s, compute, autocast = cfg.resolved_recipe()
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    targets = cfg.lora_targets if cfg.is_lora else ""
    row = {
        "id": f"measure-{now.strftime('%Y%m%dT%H%M%S')}-{spec.id}",
        "source": "fitplan measure",
        "source_location": record["device"],
        "source_version_or_date": f"{now.isoformat()}; torch {record['versions']['torch']}, "
        f"transformers {record['versions']['transformers']}",
        "model": spec.id,
        "params_b": f"{spec_total(spec) / 1e9:.3f}",
        "method": {"full": "full", "lora": "LoRA", "qlora": "QLoRA"}[cfg.method],
        "adapter_details": f"r={cfg.lora_rank} on {targets} dropout {cfg.lora_dropout}"
        if cfg.is_lora
        else "",
        "weight_precision": "fp32" if autocast else weight,
        "compute_precision": f"{compute} autocast" if autocast else compute,
        "optimizer": cfg.optimizer + (" (step in backward)" if cfg.optimizer_in_backward else ""),
        "micro_batch_size": str(cfg.micro_batch),
        "seq_len": str(cfg.seq_len),
        "seq_len_note": "random tokens, fixed length",
        "grad_checkpointing": "on" if cfg.checkpointing == "full" else "off",
        "attention_impl": cfg.attention,
        "num_gpus": "1",
        "gpu_type": record["device"],
        "sharding_offload": "none",
        "other_settings": f"{record['steps']} steps, grad_accum {cfg.grad_accum}",
        "peak_memory": f"{m['allocated'] / GiB:.4f}" if cuda else "",
        "memory_unit": "GiB",
        "memory_metric": (
            f"torch.cuda.max_memory_allocated (max_memory_reserved {m['reserved'] / GiB:.4f} GiB, "
            f"device used {m['device_used'] / GiB:.4f} GiB, CUDA context "
            f"{m['cuda_context'] / GiB:.4f} GiB)"
            if cuda
            else "not measured (CPU run)"
        ),
        "per_gpu_or_total": "per GPU",
        "throughput": f"{m['tokens_per_s']:.1f} tokens/s",
        "measured_or_estimated": "measured",
        "trust": "high" if cuda else "",
        "notes": "; ".join(record["notes"]),
        "fitplan_model": record.get("model_arg", spec.id),
        "fitplan_gpu": record["gpu_for_prediction"],
        "fitplan_config": json.dumps(cfg.model_dump(exclude_defaults=True), sort_keys=True),
        "fitplan_metric": "allocated",
        "fitplan_step_time_s": f"{m['step_time_s']:.6f}",
    }
    assert list(row) == [*MEMORY_COLUMNS, *STRUCTURED_COLUMNS]
    return row


def spec_total(spec: Any) -> int:
    from constraints.params import total_params

    return total_params(spec)


def calibration_header() -> str:
    """The header line of fitplan's calibration memory CSV."""
    from searcher.truth.cases import MEMORY_COLUMNS, STRUCTURED_COLUMNS

    buf = io.StringIO()
    csv.writer(buf).writerow([*MEMORY_COLUMNS, *STRUCTURED_COLUMNS])
    return buf.getvalue()


def csv_output(path: Path, row: dict[str, str] | None = None) -> Output:
    """``row`` appended to the CSV at ``path`` through the one writer (header checked, a missing
    final newline repaired, no existing byte rewritten); without a row, for the check before work."""
    from searcher.files import Output

    buf = io.StringIO()
    if row is not None:
        csv.DictWriter(buf, fieldnames=list(row)).writerow(row)
    return Output(path, buf.getvalue(), append=True, header=calibration_header(), flag="--json")


def append_csv(path: Path, row: dict[str, str]) -> None:
    """Append ``row``; write the header first when the file is new or empty."""
    from searcher.files import write_outputs

    write_outputs([csv_output(path, row)])


def cmd_measure(args: argparse.Namespace) -> int:
    import warnings

    from searcher.truth.hf_build import quiet_transformers

    if args.json not in (None, "-"):
        from searcher.files import check_outputs

        check_outputs([csv_output(Path(args.json))], force=False)  # before the steps run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quiet_transformers()
        record = measure(args)
    if args.json is not None:
        if args.json != "-":
            append_csv(Path(args.json), record["csv_row"])
        sys.stdout.write(json.dumps(record, indent=2, default=str) + "\n")
        return 0
    _print(record)
    return 0


def _print(record: dict[str, Any]) -> None:
    from constraints.units import fmt_bytes

    m, p = record["measured"], record["predicted"]
    out = [
        f"{record['model']} on {record['device']} "
        f"({record['steps']} steps, {record['tokens_per_step']} tokens per step)",
        f"{'':24s}{'predicted':>28s}{'measured':>28s}",
    ]
    for key, label in (
        ("allocated", "peak allocated"),
        ("reserved", "peak reserved"),
        ("nvml_used", "device used (NVML)"),
        ("cuda_context", "CUDA context"),
    ):
        mk = "device_used" if key == "nvml_used" else key
        measured = fmt_bytes(m[mk]) if mk in m else "not measured (CPU)"
        out.append(f"{label:24s}{fmt_bytes(p[key]):>28s}{measured:>28s}")
    pred_t = f"{p['step_time_s']:.4f} s" if "step_time_s" in p else "— (no GPU)"
    out.append(f"{'step time':24s}{pred_t:>28s}{m['step_time_s']:>26.4f} s")
    out.append(f"{'tokens/s':24s}{'':>28s}{m['tokens_per_s']:>28.1f}")
    if p.get("step_time_s") is None:
        out.append(f"(prediction for {record['gpu_for_prediction']})")
    out += [f"note: {n}" for n in record["notes"]]
    sys.stdout.write("\n".join(out) + "\n")
