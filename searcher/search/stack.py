"""The software stack: which optional packages a plan needs, and which are installed.

A configuration is only useful where it runs. Some knob values need a package beyond torch and
transformers (the HF Trainer family that most launch formats write): FlashAttention-2, the
bitsandbytes optimizers and quantised bases, Liger's fused cross-entropy, DeepSpeed. The search
narrows those knobs to what the stack has (``SearchProblem.stack``) and marks, never silently
picks, the plans that need more (:mod:`searcher.search.stack_front`).

``attention sdpa`` stands in for ``flash`` when flash-attn is missing: on sm80+ GPUs torch's
``scaled_dot_product_attention`` dispatches to its own FlashAttention-2 kernel (PyTorch 2.2
release notes, "FlashAttention-2 backend for SDPA"), so the memory and throughput models treat
the two alike (constraints/activations.py: 'flash' means flash or memory-efficient SDPA).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.model_spec import ModelSpec

#: optional package (pip name) -> (import name that find_spec looks for, what needs it)
KNOWN_PACKAGES: dict[str, tuple[str, str]] = {
    "flash-attn": ("flash_attn", "attention flash (attn_implementation flash_attention_2)"),
    "bitsandbytes": (
        "bitsandbytes",
        "optimizers adamw-8bit, paged-adamw-8bit, lion; quantised bases int8, nf4, nf4-dq",
    ),
    "liger-kernel": (
        "liger_kernel",
        "loss fused (Liger fused linear cross-entropy); kernels liger",
    ),
    "deepspeed": ("deepspeed", "backend deepspeed (ZeRO, CPU offload)"),
    "torchao": ("torchao", "fp8 recipes tensorwise, rowwise, mxfp8 (torchao float8 training)"),
    "transformer-engine": (
        "transformer_engine",
        "fp8 recipes te-delayed, te-current; kernels te",
    ),
    "megatron-core": ("megatron", "backend megatron (tensor/pipeline parallel with LoRA)"),
    "flash-linear-attention": (
        "fla",
        "gated DeltaNet layers (Qwen 3.5, Qwen3-Next) through fla's chunk kernel",
    ),
}

#: the words --stack takes besides package names
ALL, NONE = "all", "none"

#: optimizer -> package: bitsandbytes' AdamW8bit, PagedAdamW8bit and Lion32bit (HF Trainer
#: optim names adamw_bnb_8bit, paged_adamw_8bit, lion_32bit: transformers' training_args.py)
OPTIMIZER_PACKAGE = {
    "adamw-8bit": "bitsandbytes",
    "paged-adamw-8bit": "bitsandbytes",
    "lion": "bitsandbytes",
}
#: quantised frozen base -> package (transformers' BitsAndBytesConfig)
QUANT_PACKAGE = {"int8": "bitsandbytes", "nf4": "bitsandbytes", "nf4-dq": "bitsandbytes"}
ATTENTION_PACKAGE = {"flash": "flash-attn"}
LOSS_PACKAGE = {"fused": "liger-kernel"}
BACKEND_PACKAGE = {"deepspeed": "deepspeed", "megatron": "megatron-core"}
KERNELS_PACKAGE = {"liger": "liger-kernel", "te": "transformer-engine"}
FP8_RECIPE_PACKAGE = {
    "tensorwise": "torchao",
    "rowwise": "torchao",
    "mxfp8": "torchao",
    "te-delayed": "transformer-engine",
    "te-current": "transformer-engine",
}

#: the framework a launch format runs on: torchtune's recipes, or the HF Trainer family
#: (transformers + PEFT + bitsandbytes: --emit hf, accelerate, deepspeed, torchrun, axolotl),
#: the default when no format is named
HF, TORCHTUNE = "hf", "torchtune"
FRAMEWORK_OF_FORMAT = {"torchtune": TORCHTUNE, "torchtune-command": TORCHTUNE}
#: what every plan of a framework needs: torchtune 0.6.1 (the release fitplan writes for) raises
#: ImportError at ``import torchtune`` without torchao (torchtune/__init__.py; torchao is not in
#: its pyproject dependencies), and takes NF4 from torchao (torchtune/modules/peft/lora.py:
#: ``from torchao.dtypes.nf4tensor import linear_nf4, to_nf4``); github.com/pytorch/torchtune
#: tag v0.6.1, commit a6290a5b
FRAMEWORK_PACKAGES: dict[str, tuple[str, ...]] = {HF: (), TORCHTUNE: ("torchao",)}
#: torchtune's QLoRA base is torchao's NF4Tensor (the qlora_* builders; plain nf4 and int8 are
#: refused by --emit torchtune), and its attention is torch SDPA (no flash-attn)
TORCHTUNE_QUANT_PACKAGE = {**QUANT_PACKAGE, "nf4-dq": "torchao"}
TORCHTUNE_ATTENTION_PACKAGE: dict[str, str] = {}


def framework_of(fmt: str | None) -> str:
    """The framework a launch format (``--emit``, or the format ``check`` read) runs on."""
    return FRAMEWORK_OF_FORMAT.get(fmt or "", HF)


def quant_table(framework: str = HF) -> dict[str, str]:
    """Quantised base -> package under ``framework``."""
    return TORCHTUNE_QUANT_PACKAGE if framework == TORCHTUNE else QUANT_PACKAGE


def attention_table(framework: str = HF) -> dict[str, str]:
    """Attention implementation -> package under ``framework``."""
    return TORCHTUNE_ATTENTION_PACKAGE if framework == TORCHTUNE else ATTENTION_PACKAGE


@frozen
class Stack:
    """The optional packages a plan may use, and where that set came from."""

    packages: frozenset[str]
    #: "detected" (importable here) or "--stack" (named by the user)
    source: str

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(p for p in KNOWN_PACKAGES if p not in self.packages)


def with_stack_kernels(spec: ModelSpec, stack: Stack) -> ModelSpec:
    """The model as this stack runs it: its gated DeltaNet layers through flash-linear-attention's
    kernel where the stack has it (transformers picks it when ``fla`` imports and the inputs are on
    a GPU: integrations/hub_kernels.py), else transformers' torch path."""
    if not spec.linear_layers:
        return spec
    kernel = "fla" if "flash-linear-attention" in stack.packages else "torch"
    return (
        spec
        if spec.delta_rule_kernel == kernel
        else spec.model_copy(update={"delta_rule_kernel": kernel})
    )


def resolve_stack(text: str | None) -> Stack:
    """``--stack``'s value parsed (a bad name refused), or what is importable here."""
    return parse_stack(text) if text is not None else detect_stack()


def detect_stack() -> Stack:
    """What is importable in this Python: ``importlib.util.find_spec``, which finds a package
    without importing it (the CLI stays fast; nothing heavy loads)."""
    found = frozenset(
        name for name, (module, _why) in KNOWN_PACKAGES.items() if _importable(module)
    )
    return Stack(found, "detected")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install: not usable
        return False


def parse_stack(text: str) -> Stack:
    """``--stack flash-attn,bitsandbytes`` / ``none`` / ``all``; unknown names refused."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == [ALL]:
        return Stack(frozenset(KNOWN_PACKAGES), "--stack")
    if names == [NONE]:
        return Stack(frozenset(), "--stack")
    unknown = [n for n in names if n not in KNOWN_PACKAGES]
    if unknown or not names:
        raise FitplanError(
            f"--stack: unknown package {', '.join(map(repr, unknown)) or repr(text)}",
            f"name some of {', '.join(KNOWN_PACKAGES)} (comma-separated), or none, or all",
        )
    return Stack(frozenset(names), "--stack")


def config_needs(cfg: Any, framework: str = HF) -> tuple[str, ...]:
    """The optional packages a configuration needs (a TrainConfig or anything with its knob
    attributes) when run by ``framework``, in the order of :data:`KNOWN_PACKAGES`."""
    needs = {
        *FRAMEWORK_PACKAGES[framework],
        OPTIMIZER_PACKAGE.get(cfg.optimizer),
        quant_table(framework).get(cfg.quant),
        attention_table(framework).get(cfg.attention),
        LOSS_PACKAGE.get(cfg.loss),
        BACKEND_PACKAGE.get(_backend(cfg)),
        KERNELS_PACKAGE.get(getattr(cfg, "kernels", "eager")),
    }
    if getattr(cfg, "compute_dtype", None) == "fp8":
        needs.add(FP8_RECIPE_PACKAGE.get(getattr(cfg, "fp8_recipe", "tensorwise")))
    return tuple(p for p in KNOWN_PACKAGES if p in needs)


def _backend(cfg: Any) -> str:
    """The configuration's backend, or the one it runs under when written without one."""
    from constraints.backends import infer_backend

    if getattr(cfg, "backend", None):
        return str(cfg.backend)
    return infer_backend(
        gpus=cfg.tp * cfg.pp * cfg.dp,
        zero=cfg.zero,
        offload=cfg.offload,
        tp=cfg.tp,
        pp=cfg.pp,
        recipe=cfg.recipe,
        method=cfg.method,
    )


def missing_for(cfg: Any, stack: frozenset[str] | None, framework: str = HF) -> tuple[str, ...]:
    """What ``cfg`` needs beyond ``stack`` under ``framework`` (nothing when the stack is
    unrestricted)."""
    if stack is None:
        return ()
    return tuple(p for p in config_needs(cfg, framework) if p not in stack)


def narrow(
    values: Iterable[Any], table: dict[str, str], stack: frozenset[str] | None
) -> tuple[Any, ...]:
    """The values whose package the stack has (all of them when the stack is unrestricted).

    Strict: a value outside the stack is dropped even when none is left (the caller then drops
    what needs the knob, or the search of the narrowed space finds nothing). Only pins keep
    values outside the stack, and a pin is shared by every configuration of the space, so the
    narrowed space is all inside the stack or all outside it (search/stack_front.py relies on
    that: the front of the narrowed space is then its 4-objective front)."""
    values = tuple(values)
    if stack is None:
        return values
    return tuple(v for v in values if table.get(v) is None or table[v] in stack)


#: the ConfigBatch columns :func:`config_needs` reads (the recipe for its default compute dtype)
NEEDS_COLUMNS = (
    "optimizer",
    "quant",
    "attention",
    "loss",
    "backend",
    "kernels",
    "recipe",
    "compute",
    "fp8_recipe",
)


def rows_missing(
    batch: Any, rows: Any, stack: frozenset[str] | None, framework: str = HF
) -> list[tuple[str, ...]]:
    """What each of ``rows`` (indices into a ConfigBatch) needs beyond ``stack``: one
    :func:`missing_for` per distinct combination of :data:`NEEDS_COLUMNS` (a few dozen where a
    search has thousands of rows), so no TrainConfig is built per row."""
    import numpy as np

    rows = np.asarray(rows)
    if stack is None or not rows.size:
        return [()] * int(rows.size)
    keys = np.stack([np.asarray(getattr(batch, c))[rows] for c in NEEDS_COLUMNS], axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    per = [missing_for(batch.config(int(rows[i])), stack, framework) for i in first]
    return [per[int(k)] for k in np.ravel(inverse)]
