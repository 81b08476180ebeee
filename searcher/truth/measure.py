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
from typing import Any

from constraints.errors import FitplanError

UNSUPPORTED = {
    "zero": "ZeRO/FSDP sharding needs several processes and a launcher",
    "tp": "tensor parallelism needs several processes",
    "pp": "pipeline parallelism needs several processes",
    "offload": "CPU offload needs DeepSpeed/FSDP",
}


def _check_supported(cfg: Any, gpus: int) -> None:
    if gpus > 1 or cfg.dp > 1:
        raise FitplanError("fitplan measure runs one process on one device", "drop --gpus")
    for field, why in UNSUPPORTED.items():
        value = getattr(cfg, field)
        if value not in (0, 1, "none"):
            raise FitplanError(f"fitplan measure cannot apply --{field} {value}: {why}")
    if cfg.recipe == "bf16-pure":
        raise FitplanError(
            "--recipe bf16-pure keeps fp32 optimizer states on bf16 weights, which stock torch "
            "optimizers cannot do",
            "measure bf16-torch (states in bf16) or bf16-master (fp32 master + states) instead",
        )
    if cfg.loss != "standard":
        raise FitplanError(
            f"fitplan measure runs the transformers loss; --loss {cfg.loss} is not implemented"
        )
    if cfg.checkpointing == "selective":
        raise FitplanError(
            "transformers has no selective recomputation", "use --checkpointing none or full"
        )
    if cfg.optimizer == "lion":
        raise FitplanError("Lion is not in torch; measure adamw, sgd or adafactor")


def _device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise FitplanError("--device cuda: no CUDA device is visible", "use --device cpu")
    if choice not in ("cpu", "cuda"):
        raise FitplanError(f"--device {choice}: use auto, cpu or cuda")
    return choice


def _dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _lora_targets(spec: Any, targets: str) -> Any:
    if targets == "all-linear":
        return "all-linear"
    if targets == "default":
        return None
    from constraints.params import lora_target_groups

    return sorted({g.module for g in lora_target_groups(spec, targets)})


def build(spec: Any, cfg_dict: dict[str, Any], cfg: Any, device: str) -> tuple[Any, list[str]]:
    """The HF model of ``spec`` with the configuration applied; and notes."""
    from searcher.truth.hf_build import build_model, hf_config

    notes: list[str] = []
    weight, _grad, _master, _state, compute, autocast = cfg.resolved_recipe()
    weight_dtype = "fp32" if autocast or weight == "fp32" else weight
    if weight_dtype not in ("fp32", "bf16", "fp16"):
        raise FitplanError(f"fitplan measure cannot hold weights in {weight_dtype}")
    attn = {"flash": "sdpa", "sdpa": "sdpa", "eager": "eager"}[cfg.attention]
    if cfg.attention == "flash" and device == "cpu":
        notes.append(
            "CPU: SDPA takes the math path (it saves the s² scores a CUDA flash kernel does not)"
        )
    config = hf_config(cfg_dict, use_cache=False)
    quant_config = None
    if cfg.quant != "none":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError:
            raise FitplanError(
                "cannot measure QLoRA here: bitsandbytes is not installed",
                "pip install bitsandbytes on a CUDA machine; everything else measures without it",
            ) from None
        if device != "cuda":
            raise FitplanError("cannot measure QLoRA on the CPU: bitsandbytes NF4 needs CUDA")
        from transformers import BitsAndBytesConfig

        quant_config = BitsAndBytesConfig(
            load_in_4bit=cfg.quant.startswith("nf4"),
            load_in_8bit=cfg.quant == "int8",
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=cfg.quant == "nf4-dq",
            bnb_4bit_compute_dtype=_dtype(compute if compute in ("bf16", "fp16") else "bf16"),
        )
    if quant_config is not None:
        model = _quantized_random_model(config, quant_config, _dtype(weight_dtype), attn, device)
    else:
        model = build_model(
            config, device=device, dtype=_dtype(weight_dtype), attn_implementation=attn
        )
    model.train()
    if cfg.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.is_lora:
        from peft import LoraConfig, get_peft_model

        if cfg.quant != "none":
            from peft import prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=cfg.checkpointing == "full"
            )
        lora = LoraConfig(
            r=cfg.lora_rank,
            lora_alpha=2 * cfg.lora_rank,
            lora_dropout=cfg.lora_dropout,
            target_modules=_lora_targets(spec, cfg.lora_targets),
            task_type="SEQ_2_SEQ_LM" if spec.arch == "encoder-decoder" else "CAUSAL_LM",
        )
        model = get_peft_model(
            model, lora, autocast_adapter_dtype=(cfg.adapter_dtype or "fp32") == "fp32"
        )
        if cfg.adapter_dtype and cfg.adapter_dtype != "fp32":
            for name, p in model.named_parameters():
                if p.requires_grad and "lora_" in name:
                    p.data = p.data.to(_dtype(cfg.adapter_dtype))
        if cfg.checkpointing == "full":
            model.enable_input_require_grads()
    return model, notes


def _quantized_random_model(config: Any, quant: Any, dtype: Any, attn: str, device: str) -> Any:
    """A bitsandbytes-quantised model with random weights: build it on the CPU, swap each linear
    inside the layers for a 4-bit (or 8-bit) one holding the same random weight, move to CUDA
    (bitsandbytes quantises on the move). Embeddings and the output head stay 16-bit, as
    transformers' BitsAndBytesConfig leaves them. Needs bitsandbytes and CUDA (checked before)."""
    import bitsandbytes as bnb
    import transformers
    from torch import nn

    from searcher.truth.hf_build import layer_stacks

    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=dtype, attn_implementation=attn
    )
    for _stack_name, stack in layer_stacks(model):
        for parent in list(stack.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not nn.Linear:
                    continue
                bias = child.bias is not None
                if quant.load_in_4bit:
                    new = bnb.nn.Linear4bit(
                        child.in_features,
                        child.out_features,
                        bias=bias,
                        compute_dtype=quant.bnb_4bit_compute_dtype,
                        compress_statistics=quant.bnb_4bit_use_double_quant,
                        quant_type="nf4",
                    )
                    new.weight = bnb.nn.Params4bit(
                        child.weight.data,
                        requires_grad=False,
                        compress_statistics=quant.bnb_4bit_use_double_quant,
                        quant_type="nf4",
                    )
                else:
                    new = bnb.nn.Linear8bitLt(
                        child.in_features, child.out_features, bias=bias, has_fp16_weights=False
                    )
                    new.weight = bnb.nn.Int8Params(
                        child.weight.data, requires_grad=False, has_fp16_weights=False
                    )
                if bias:
                    new.bias = child.bias
                setattr(parent, name, new)
    return model.to(device)


def _optimizer(model: Any, cfg: Any, device: str) -> tuple[Any, Any]:
    """(optimizer, master params or None). bf16-master steps fp32 copies and copies them back."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    master = None
    if cfg.recipe == "bf16-master" and not cfg.is_lora:
        master = [p.detach().float().clone().requires_grad_(True) for p in params]
        target = master
    else:
        target = params
    lr = 1e-5
    name = cfg.optimizer
    opt: Any
    if name == "adamw":
        opt = torch.optim.AdamW(target, lr=lr, fused=device == "cuda" or None)
    elif name == "sgd":
        opt = torch.optim.SGD(target, lr=lr)
    elif name == "sgd-momentum":
        opt = torch.optim.SGD(target, lr=lr, momentum=0.9)
    elif name == "adafactor":
        from transformers.optimization import Adafactor

        opt = Adafactor(target, lr=lr, scale_parameter=False, relative_step=False)
    elif name in ("adamw-8bit", "paged-adamw-8bit"):
        try:
            import bitsandbytes as bnb
        except ImportError:
            raise FitplanError(
                f"--optimizer {name} needs bitsandbytes, which is not installed here"
            ) from None
        cls = bnb.optim.PagedAdamW8bit if name.startswith("paged") else bnb.optim.AdamW8bit
        opt = cls(target, lr=lr)
    else:  # pragma: no cover - rejected before
        raise FitplanError(f"fitplan measure cannot build --optimizer {name}")
    return opt, (params, master) if master is not None else None


def run_steps(
    model: Any, cfg: Any, device: str, steps: int, vocab: int, encoder_decoder: bool
) -> dict[str, Any]:
    """Train ``steps`` optimizer steps on random tokens; memory (CUDA) and step times."""
    import contextlib

    import torch

    opt, master = _optimizer(model, cfg, device)
    _weight, _g, _m, _s, compute, autocast = cfg.resolved_recipe()
    amp = (
        torch.autocast(device_type=device, dtype=_dtype(compute))
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

    require_torch()
    import torch
    import transformers

    if args.steps < 1:
        raise FitplanError(f"--steps must be at least 1, got {args.steps}")
    device = _device(args.device)
    cfg_dict, _spec = config_of(args.model)
    if args.gpu is None:
        args.gpu = _detected_gpu() if device == "cuda" else "a100-80gb"
    from searcher.inputs import explain_config

    spec, gpu, cfg, headroom, notes = explain_config(args)
    _check_supported(cfg, args.gpus or 1)
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
        from constraints.config import ConfigBatch
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


def _detected_gpu() -> str:
    import torch

    from searcher.truth.accuracy import gpu_of

    name = torch.cuda.get_device_name()
    try:
        return gpu_of(name).id
    except FitplanError:
        total = torch.cuda.mem_get_info()[1]
        return f"{total / 2**30:.2f}GiB"


def csv_row(record: dict[str, Any], spec: Any, cfg: Any) -> dict[str, str]:
    """The record as a row of the calibration memory CSV (with the structured fitplan_* columns)."""
    from constraints.units import GiB
    from searcher.truth.accuracy import MEMORY_COLUMNS, STRUCTURED_COLUMNS

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


def append_csv(path: Path, row: dict[str, str]) -> None:
    """Append ``row``; write the header first when the file is new or empty."""
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with path.open(encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        if header != list(row):
            raise FitplanError(
                f"{path} has other columns than fitplan's calibration format",
                "append to a file written by fitplan measure, or a new file",
            )
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(row))
    if new:
        writer.writeheader()
    writer.writerow(row)
    try:
        with path.open("a", encoding="utf-8", newline="") as f:
            f.write(buf.getvalue())
    except OSError as err:
        raise FitplanError(f"cannot write {path}: {err.strerror or err}") from None


def cmd_measure(args: argparse.Namespace) -> int:
    import warnings

    from searcher.truth.hf_build import quiet_transformers

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
