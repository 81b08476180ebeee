"""The search problem and its knob space.

The space holds only valid combinations: the batch arithmetic multiplies out exactly
(micro-batch × accumulation × data-parallel = target batch), parallel degrees divide the GPUs,
heads and layers, and knobs that do not apply to a method are absent (no rank for a full
fine-tune, no quantisation for plain LoRA, selective recomputation only where attention scores
exist). The constraints left to evaluate are memory and hardware.

Default knob values are what a practitioner would consider; a pin (``--optimizer adamw``)
replaces a knob's values with one. Optimizers default to the Adam family (AdamW, 8-bit, paged
8-bit): SGD, Adafactor and Lion change the training dynamics, so they are searched only when
pinned. Recipes default to ``bf16-master`` and ``bf16-torch`` (fp32-weight recipes use more memory
for no speed).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import field
from typing import Any

import numpy as np

from constraints.backends import backend as backend_entry
from constraints.backends import searched_by_default
from constraints.config import CODE
from constraints.constants import DEFAULT_HEADROOM
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.units import GiB
from searcher.search import stack as S
from searcher.search.launch_formats import tensor_parallel_degrees, writable

DEFAULT_RANKS = (8, 16, 32, 64, 128)
DEFAULT_RECIPES = ("bf16-master", "bf16-torch")
DEFAULT_OPTIMIZERS = ("adamw", "adamw-8bit", "paged-adamw-8bit")
DEFAULT_QUANTS = ("nf4", "nf4-dq")
DEFAULT_LOSSES = ("standard", "fused")
DEFAULT_CPU_RAM_PER_NODE = 256 * GiB
PARALLEL_DEGREES = (1, 2, 4, 8, 16, 32, 64)
MAX_MICRO_BATCH = 256

#: (ZeRO stage, offload) pairs worth searching
SHARDING_SINGLE = ((0, "none"), (2, "optimizer"), (3, "all"))
SHARDING_MULTI = (
    (0, "none"),
    (1, "none"),
    (2, "none"),
    (3, "none"),
    (2, "optimizer"),
    (3, "optimizer"),
    (3, "all"),
)


@frozen
class SearchProblem:
    """Everything a search needs: the model, the hardware, the target and the user's pins."""

    model: ModelSpec
    gpu: GpuSpec
    max_gpus: int
    target_batch: int
    seq_len: int
    headroom: float = DEFAULT_HEADROOM
    cpu_ram_per_node: int = DEFAULT_CPU_RAM_PER_NODE
    gpus_per_node: int = 8
    inter_node_gb_s: float = 50.0
    #: GPUs per NVLink domain when it spans nodes (None: the GPU row's, else the node)
    nvlink_domain: int | None = None
    pins: dict[str, Any] = field(default_factory=dict)
    min_gpus: int = 1
    all_gpu_counts: bool = False
    #: exactly these GPU counts (within min_gpus..max_gpus) when given, e.g. a fleet pool's
    #: whole nodes; otherwise powers of two and the full count
    gpu_counts: tuple[int, ...] = ()
    #: optional packages installed (searcher/search/stack.py); None: every one (the library's
    #: default; the CLI detects what is importable). Unpinned knobs keep to it.
    stack: frozenset[str] | None = None
    #: the framework the plan runs on, which decides what a knob value needs (search/stack.py:
    #: "hf", the HF Trainer family, or "torchtune")
    framework: str = S.HF
    #: the launch format the plan is written for (``--emit``): unpinned, the backends keep to
    #: those it writes, so the front holds plans it can express; None: every format's
    emit_format: str | None = None
    #: the standard loss's code path of the stack's transformers (TrainConfig.loss_chain)
    loss_chain: str = "padded-labels"
    #: the stack's bitsandbytes keeps each 4-bit linear's input (TrainConfig.kbit_saves_input)
    kbit_saves_input: bool = False

    def __post_init__(self) -> None:
        if self.max_gpus < 1:
            raise FitplanError(f"--gpus must be at least 1, got {self.max_gpus}")
        if self.target_batch < 1:
            raise FitplanError(
                f"--target-batch must be at least 1 sequence, got {self.target_batch}"
            )
        if self.seq_len < 1:
            raise FitplanError(f"--seq-len must be positive, got {self.seq_len}")


@frozen
class Layout:
    gpus: int
    tp: int
    pp: int
    dp: int


def divisors(n: int, cap: int | None = None) -> list[int]:
    """The divisors of ``n`` up to ``cap`` (all of them without one), ascending."""
    top = n if cap is None else min(n, cap)
    return [d for d in range(1, top + 1) if n % d == 0]


def gpu_counts(problem: SearchProblem) -> list[int]:
    """GPU counts to try: powers of two up to what the user has, and the full count."""
    if "gpus" in problem.pins:
        return [int(problem.pins["gpus"])]
    if problem.gpu_counts:
        return sorted({g for g in problem.gpu_counts if problem.min_gpus <= g <= problem.max_gpus})
    if problem.all_gpu_counts:
        return list(range(problem.min_gpus, problem.max_gpus + 1))
    counts = {
        g
        for g in PARALLEL_DEGREES + tuple(2**k for k in range(7, 14))
        if problem.min_gpus <= g <= problem.max_gpus
    }
    counts.add(problem.max_gpus)
    return sorted(counts)


def layouts(problem: SearchProblem) -> list[Layout]:
    spec = problem.model
    out = []
    tps = (
        [int(problem.pins["tp"])]
        if "tp" in problem.pins
        else tensor_parallel_degrees(problem.emit_format, PARALLEL_DEGREES)
    )
    pps = [int(problem.pins["pp"])] if "pp" in problem.pins else PARALLEL_DEGREES
    for gpus in gpu_counts(problem):
        for tp in tps:
            if tp > min(gpus, problem.gpus_per_node):
                continue
            if tp > 1 and (
                spec.heads % tp
                or (spec.kv_heads % tp and tp % spec.kv_heads)
                or spec.arch in ("encoder-decoder", "raw")
            ):
                continue
            for pp in pps:
                if gpus % (tp * pp) or pp > spec.layers or (pp > 1 and spec.layers % pp):
                    continue
                dp = gpus // (tp * pp)
                if problem.target_batch % dp:
                    continue
                out.append(Layout(gpus, tp, pp, dp))
    return out


def knob_values(problem: SearchProblem) -> dict[str, tuple[Any, ...]]:
    """The values each categorical knob takes (pins replace the defaults)."""
    pins, gpu, spec = problem.pins, problem.gpu, problem.model
    methods: tuple[str, ...] = ("full", "lora", "qlora")
    if spec.arch == "raw" and spec.raw_trainable_params is None:
        methods = ("full",)
    compute = pins.get("compute_dtype") or ("bf16" if gpu.supports_bf16 or gpu.custom else "fp16")
    attention = pins.get("attention") or (
        "flash"
        if (gpu.supports_flash_attention or gpu.custom)
        and S.narrow(("flash",), S.attention_table(problem.framework), problem.stack)
        # torch's SDPA runs FlashAttention-2 itself on sm80+ (search/stack.py); a model
        # without SDPA runs eager, as transformers falls back to
        else ("sdpa" if spec.sdpa_supported else "eager")
    )
    ckpt = ("none", "selective", "full") if attention == "eager" else ("none", "full")
    pinned_method = pins.get("method")
    if isinstance(pinned_method, (list, tuple)):  # several allowed methods (a fleet job)
        methods = tuple(m for m in methods if m in pinned_method)
    elif pinned_method is not None:
        methods = (pinned_method,)
    quants = (
        (pins["quant"],)
        if pins.get("quant") not in (None, "none")
        else writable(
            problem.emit_format,
            "quant",
            S.narrow(DEFAULT_QUANTS, S.quant_table(problem.framework), problem.stack),
        )
    )
    if not quants:  # no quantised base in the stack: QLoRA only where the user asked for it
        quants = DEFAULT_QUANTS
        if pinned_method != "qlora":
            methods = tuple(m for m in methods if m != "qlora")
    return {
        "method": methods,
        "rank": (int(pins["lora_rank"]),) if "lora_rank" in pins else DEFAULT_RANKS,
        "lora_targets": (pins.get("lora_targets") or "all-linear",),
        "recipe": (pins["recipe"],) if "recipe" in pins else DEFAULT_RECIPES,
        "optimizer": (pins["optimizer"],)
        if "optimizer" in pins
        else S.narrow(DEFAULT_OPTIMIZERS, S.OPTIMIZER_PACKAGE, problem.stack),
        "quant": quants,
        "checkpointing": (pins["checkpointing"],) if "checkpointing" in pins else ckpt,
        "loss": (pins["loss"],)
        if "loss" in pins
        else writable(
            problem.emit_format, "loss", S.narrow(DEFAULT_LOSSES, S.LOSS_PACKAGE, problem.stack)
        ),
        "compute_dtype": (compute,),
        "attention": (attention,),
        "lora_dropout": (float(pins.get("lora_dropout", 0.0)),),
        "adapter_dtype": (pins.get("adapter_dtype"),),
        "weight_dtype": (pins.get("weight_dtype"),),
    }


def sharding_options(problem: SearchProblem, dp: int) -> list[tuple[int, str]]:
    options = list(SHARDING_MULTI if dp > 1 else SHARDING_SINGLE)
    if problem.gpu.custom:
        # a card known only by its memory has no throughput to weigh offload's PCIe cost against
        options = [o for o in options if o[1] == "none"]
    if "zero" in problem.pins:
        options = [o for o in options if o[0] == int(problem.pins["zero"])] or [
            (int(problem.pins["zero"]), "none")
        ]
    if "offload" in problem.pins:
        options = [o for o in options if o[1] == problem.pins["offload"]]
    return options


#: the backend of a one-GPU run that shards and offloads nothing
SINGLE = "single"


def backend_options(problem: SearchProblem, lay: Layout, zero: int, offload: str) -> list[str]:
    """Backends that run this layout and sharding (the rest of the capability table is applied
    per configuration in :func:`grid`). Default: every backend some launch format writes."""
    pinned = "backend" in problem.pins
    names = (str(problem.pins["backend"]),) if pinned else searched_by_default(problem.emit_format)
    out = []
    for name in names:
        b = backend_entry(name)
        if (b["gpus"] == "one" and lay.gpus != 1) or (b["gpus"] == "many" and lay.gpus == 1):
            continue
        if zero not in b["zero"] or offload not in b["offload"]:
            continue
        if (lay.tp > 1 and not b["tp"]) or (lay.pp > 1 and not b["pp"]):
            continue
        out.append(name)
    if pinned:
        return out
    asked = any(k in problem.pins for k in ("zero", "recipe"))
    if lay.gpus == 1 and offload == "none" and not asked and SINGLE in out:
        # one GPU: the Trainer runs the model itself; DeepSpeed or FSDP only for what they add
        # there (CPU offload), or when a pin asks for them (--zero, or a recipe only an engine
        # runs, such as bf16-master: searcher.search.stack_profile)
        out = [SINGLE]
    # unpinned, the stack keeps to the backends it has (a row none of them runs is dropped)
    return list(S.narrow(out, S.BACKEND_PACKAGE, problem.stack))


#: knobs that change only the step time: a search keeps them as pinned (or at their defaults)
SPEED_PINS = (
    "kernels",
    "fp8_recipe",
    "tp_comm_overlap",
    "virtual_stages",
    "model_code",
    "attention_kernel",
)
#: knobs a search never varies: the speed knobs and the allocator's segment mode (it changes the
#: reserved memory, not the training: the user's environment decides it)
PINNED_ONLY = (*SPEED_PINS, "expandable_segments")


def static_variants(problem: SearchProblem) -> list[dict[str, Any]]:
    """Every combination of the knobs that do not depend on the layout, per method family."""
    v = knob_values(problem)
    out: list[dict[str, Any]] = []
    for method in v["method"]:
        ranks = v["rank"] if method != "full" else (16,)
        quants = v["quant"] if method == "qlora" else ("none",)
        opt_in_bwd = (
            writable(problem.emit_format, "optimizer_in_backward", (False, True))
            if "optimizer_in_backward" not in problem.pins
            else (bool(problem.pins["optimizer_in_backward"]),)
        )
        for rank, quant, recipe, opt, ckpt, loss, oib in itertools.product(
            ranks, quants, v["recipe"], v["optimizer"], v["checkpointing"], v["loss"], opt_in_bwd
        ):
            out.append(
                {
                    "method": method,
                    "lora_rank": rank,
                    "lora_targets": v["lora_targets"][0],
                    "lora_dropout": v["lora_dropout"][0] if method != "full" else 0.0,
                    "recipe": recipe,
                    "weight_dtype": v["weight_dtype"][0],
                    "adapter_dtype": _adapter_dtype(problem, v, method, recipe, quant),
                    "compute_dtype": v["compute_dtype"][0],
                    "optimizer": opt,
                    "quant": quant,
                    "checkpointing": ckpt,
                    "attention": v["attention"][0],
                    "loss": loss,
                    "loss_chain": problem.loss_chain,
                    "kbit_saves_input": problem.kbit_saves_input,
                    "optimizer_in_backward": oib,
                    # speed knobs and the segment mode: not searched, pinned or their defaults
                    **{k: problem.pins[k] for k in PINNED_ONLY if k in problem.pins},
                }
            )
    return out


def _adapter_dtype(
    problem: SearchProblem, v: dict[str, Any], method: str, recipe: str, quant: str
) -> str | None:
    """The variant's adapter dtype: the pin, else the stack's default (None: PEFT's fp32, or
    the base's where an engine casts the model), except under torchtune, whose recipes build
    the adapters in the model's dtype."""
    if method == "full":
        return None
    pinned = v["adapter_dtype"][0]
    if pinned or problem.framework != S.TORCHTUNE:
        return pinned
    from constraints.config import TrainConfig

    return TrainConfig.model_validate(
        {
            "method": method,
            "recipe": recipe,
            "quant": quant,
            "weight_dtype": v["weight_dtype"][0],
            "compute_dtype": v["compute_dtype"][0],
        }
    ).base_adapter_dtype()


def layout_rows(problem: SearchProblem) -> list[dict[str, int | str]]:
    rows: list[dict[str, int | str]] = []
    pinned_mb = problem.pins.get("micro_batch")
    # the backends of a row depend on the layout only through these: computed once each
    backends: dict[tuple[bool, bool, bool, int, str], list[str]] = {}
    for lay in layouts(problem):
        per_replica = problem.target_batch // lay.dp
        mbs = [int(pinned_mb)] if pinned_mb else divisors(per_replica, MAX_MICRO_BATCH)
        shardings = []
        for zero, offload in sharding_options(problem, lay.dp):
            key = (lay.gpus == 1, lay.tp > 1, lay.pp > 1, zero, offload)
            if key not in backends:
                backends[key] = backend_options(problem, lay, zero, offload)
            shardings.append((zero, offload, backends[key]))
        for mb in mbs:
            if per_replica % mb:
                continue
            for zero, offload, names in shardings:
                for backend in names:
                    rows.append(
                        {
                            "tp": lay.tp,
                            "pp": lay.pp,
                            "dp": lay.dp,
                            "micro_batch": mb,
                            "grad_accum": per_replica // mb,
                            "zero": zero,
                            "offload": offload,
                            "backend": backend,
                        }
                    )
    return rows


def pair_ok(
    opt_in_bwd: Any, eight_bit: Any, grad_accum: Any, gpus: Any, zero: Any, offload_code: Any
) -> Any:
    """Whether a layout row can carry a layout-independent variant (scalars or arrays).

    The optimizer step fused into backward needs one GPU, no accumulation and no ZeRO; the 8-bit
    bitsandbytes optimizers cannot run on CPU-offloaded states."""
    fused_ok = ~np.asarray(opt_in_bwd) | (
        (np.asarray(grad_accum) == 1) & (np.asarray(gpus) == 1) & (np.asarray(zero) == 0)
    )
    offload_ok = ~np.asarray(eight_bit) | (np.asarray(offload_code) == CODE["offload"]["none"])
    return fused_ok & offload_ok


def describe_space(problem: SearchProblem) -> dict[str, Sequence[Any]]:
    v = knob_values(problem)
    return {**v, "layouts": [f"tp{x.tp}·pp{x.pp}·dp{x.dp}" for x in layouts(problem)]}
