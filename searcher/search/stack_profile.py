"""The stack a plan runs on, resolved once: the framework, its library versions and the GPU, and
the defaults they imply for every knob the user does not name.

Each default is what the released code does, read at the version named:

- load dtype: transformers 5 ``PreTrainedModel.from_pretrained`` takes ``dtype="auto"`` when none
  is given (modeling_utils.py: ``if dtype is None: dtype = "auto"``), the checkpoint's dtype;
  transformers 4 loaded fp32. A 16-bit model with torch AdamW keeps its states in the parameter
  dtype (recipe ``bf16-torch``, fp16 where the GPU has no bf16); an fp32 model under
  ``bf16=True`` / ``fp16=True`` is the ``amp`` recipe. torchtune builds the model in its ``dtype``
  (bf16).
- adapters: PEFT >= 0.12 ``get_peft_model(..., autocast_adapter_dtype=True)`` casts 16-bit adapters
  to fp32 (tuners_utils.py ``_cast_adapter_dtype``); torchtune builds them in the model's dtype.
- attention: transformers picks ``attn_implementation="sdpa"`` (FlashAttention-2 only on request);
  torch's SDPA dispatch (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) runs the flash
  kernel at sm80+ for fp16/bf16 with head_dim <= 256, else the memory-efficient kernel (sm50+),
  else math. The flash and memory-efficient kernels save the same tensors (output and log-sum-exp);
  math saves the probabilities like eager attention.
- one GPU: the HF Trainer runs the model itself, no DeepSpeed or FSDP unless asked.
- the causal-LM loss: transformers >= 4.49 pads the labels (loss/loss_utils.py ``ForCausalLMLoss``,
  PR #35646); 4.46-4.48 upcast the returned logits in ``ForCausalLMLoss`` and copy the shifted
  slice; <= 4.45 upcast them in the model's forward and copy the shifted slice
  (constraints/logits.py ``loss_forward_bytes``).
- bitsandbytes' 4-bit matmul (autograd/_functions.py ``MatMul4Bit.forward``, read in the released
  wheels): 0.43.1 and before keep the input for the backward (``ctx.tensors = (A, B)``), 0.43.2
  and after keep ``(None, B)`` (``TrainConfig.kbit_saves_input``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import TYPE_CHECKING

from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.precision import BNB_4BIT
from searcher.search.stack import HF, TORCHTUNE

if TYPE_CHECKING:
    from constraints.config import TrainConfig
    from constraints.model_spec import ModelSpec

#: the releases fitplan's defaults were read from, assumed where the package is not installed
RELEASES = {
    "transformers": "5.25.0",
    "peft": "0.21.2",
    "torch": "2.13.0",
    "bitsandbytes": "0.50.2",
}
FRAMEWORK_NAMES = {HF: "HF Trainer + PEFT", TORCHTUNE: "torchtune"}
#: SDPA's flash kernel: sm80+, 16-bit, head_dim <= 256 (sdp_utils.cpp check_head_dim_size_flash)
FLASH_MIN_SM, FLASH_MAX_HEAD_DIM = 8.0, 256


def installed_version(package: str) -> str | None:
    """The installed version, from the ``{name}-{version}.dist-info`` folder's name (PEP 376 /
    the binary distribution format) on ``sys.path``; ``importlib.metadata`` (20 ms to import on
    explain's path) only where no folder names it."""
    prefix = package.replace("-", "_") + "-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    if importlib.util.find_spec(package.replace("-", "_")) is None:
        return None
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _major(version: str) -> int:
    return release(version)[0]


def release(version: str, parts: int = 2) -> tuple[int, ...]:
    """The first ``parts`` numbers of a version string such as ``4.46.0.dev0`` ((4, 46) by
    default); missing parts read 0."""
    out = []
    for piece in version.split(".")[:parts]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        out.append(int(digits) if digits else 0)
    return tuple(out + [0] * (parts - len(out)))


#: the first transformers release of each causal-LM loss code (TrainConfig.loss_chain), newest first
LOSS_CHAIN_SINCE = (((4, 49), "padded-labels"), ((4, 46), "shifted-upcast"))
#: the first bitsandbytes release whose MatMul4Bit keeps no input (0.43.1: ``(A, B)``)
KBIT_INPUT_FREED_SINCE = (0, 43, 2)


def kbit_keeps_input(bitsandbytes: str) -> bool:
    """Whether this bitsandbytes release's 4-bit matmul keeps its input for the backward."""
    return release(bitsandbytes, 3) < KBIT_INPUT_FREED_SINCE


@frozen
class StackProfile:
    """The framework and library versions a plan is read against (installed ones, else
    :data:`RELEASES`)."""

    framework: str
    versions: dict[str, str]
    installed: tuple[str, ...]
    #: the packages whose version the user named (they count as installed)
    named: tuple[str, ...] = ()

    @classmethod
    def resolve(cls, framework: str = HF, named: dict[str, str] | None = None) -> StackProfile:
        """The installed versions, else fitplan's reference releases; ``named`` (package →
        version, e.g. from ``--transformers``) replaces both."""
        versions, installed = {}, []
        for package, reference in RELEASES.items():
            found = (named or {}).get(package) or installed_version(package)
            versions[package] = found or reference
            if found:
                installed.append(package)
        return cls(
            framework=framework,
            versions=versions,
            installed=tuple(installed),
            named=tuple(sorted(named or {})),
        )

    def loss_chain(self) -> str:
        """The standard causal-LM loss's code path (TrainConfig.loss_chain) of this stack's
        transformers; torchtune runs its own loss (the newest chain's bytes)."""
        if self.framework != HF:
            return "padded-labels"
        version = release(self.versions["transformers"])
        for since, chain in LOSS_CHAIN_SINCE:
            if version >= since:
                return chain
        return "shifted-fp32-logits"

    def kbit_saves_input(self) -> bool:
        """Whether this stack's 4-bit matmul keeps its input (TrainConfig.kbit_saves_input):
        bitsandbytes before 0.43.2; torchtune's QLoRA is torchao's NF4, not bitsandbytes."""
        return self.framework == HF and kbit_keeps_input(self.versions["bitsandbytes"])

    def search_fields(self) -> dict[str, object]:
        """The SearchProblem fields this stack decides: the standard loss's code path and
        whether the 4-bit matmul keeps its inputs."""
        return {"loss_chain": self.loss_chain(), "kbit_saves_input": self.kbit_saves_input()}

    def loads_checkpoint_dtype(self) -> bool:
        """Whether a model loaded without a dtype takes its checkpoint's 16-bit dtype."""
        return self.framework == TORCHTUNE or _major(self.versions["transformers"]) >= 5

    def default_recipe(self) -> str:
        """The precision recipe of a run that names none: a 16-bit model with torch AdamW, or an
        fp32 model under 16-bit autocast (transformers 4)."""
        return "bf16-torch" if self.loads_checkpoint_dtype() else "amp"

    def recipe_reason(self, recipe: str, half: str) -> str:
        if self.framework == TORCHTUNE:
            return f"{recipe}: torchtune builds the model in {half}"
        if recipe == "amp":
            return (
                f"amp: transformers {self.versions['transformers']} loads fp32 weights, "
                f"{half} autocast"
            )
        if half == "fp16":
            return f"{recipe}: the model loaded in fp16 (the card has no bf16), torch AdamW states in it"
        return (
            f"{recipe}: transformers {self.versions['transformers']} loads the checkpoint's dtype "
            f"({half}), torch AdamW states in it"
        )

    def describe(self) -> str:
        """The framework with its versions, and where they came from."""
        names = {HF: ("transformers", "peft", "torch"), TORCHTUNE: ("torch",)}[self.framework]
        parts = [f"{p} {self.versions[p]}" for p in names]
        where = (
            "named"
            if any(p in self.named for p in names)
            else "installed"
            if all(p in self.installed for p in names)
            else "fitplan's reference releases"
        )
        return f"{FRAMEWORK_NAMES[self.framework]} ({', '.join(parts)}: {where})"


def sdpa_kernel(gpu: GpuSpec, compute_dtype: str, head_dim: int) -> str:
    """The kernel torch's SDPA dispatches to for this GPU, dtype and head size."""
    sm = gpu.sm
    sixteen = compute_dtype in ("bf16", "fp16")
    if sixteen and (sm is None or sm >= FLASH_MIN_SM) and head_dim <= FLASH_MAX_HEAD_DIM:
        return "flash"
    return "memory-efficient"


#: the sharding and parallel knobs that mean the user chose a distributed engine: their runs keep
#: the engine's own mixed precision (DeepSpeed / Megatron: ``bf16-master``) when no recipe is named
ENGINE_KNOBS = ("zero", "offload", "tp", "pp")


def fill_defaults(
    profile: StackProfile, fields: dict[str, object], given: frozenset[str], sdpa: bool = True
) -> tuple[str, ...]:
    """Fill the knobs the user left out (not in ``given``) with the stack's defaults, in place;
    the names filled."""
    filled = []
    engine = any(fields.get(k) not in (None, 0, 1, "none") for k in ENGINE_KNOBS)
    plain = fields.get("backend") in (None, "single", "ddp")
    if "recipe" not in fields and not engine and plain:
        fields["recipe"] = profile.default_recipe()
        filled.append("recipe")
    if "attention" not in given:
        # transformers 5 modeling_utils.py get_correct_attn_implementation: sdpa, else eager
        fields["attention"] = "sdpa" if sdpa else "eager"
        filled.append("attention")
    if "loss_chain" not in given:
        fields["loss_chain"] = profile.loss_chain()
        filled.append("loss_chain")
    if fields.get("quant") in BNB_4BIT and "kbit_saves_input" not in given:
        fields["kbit_saves_input"] = profile.kbit_saves_input()
        filled.append("kbit_saves_input")
    if _kbit_prepared(profile, fields, given) and "checkpointing" not in given:
        # peft utils/other.py prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
        fields["checkpointing"] = "full"
        filled.append("checkpointing")
    return tuple(filled)


def _kbit_prepared(profile: StackProfile, fields: dict[str, object], given: frozenset[str]) -> bool:
    """Whether the stack runs PEFT's prepare_model_for_kbit_training on this plan: QLoRA under
    the HF Trainer + PEFT with PEFT's fp32 adapters."""
    return (
        profile.framework == HF
        and fields.get("method") == "qlora"
        and (fields.get("adapter_dtype") in (None, "fp32") or "adapter_dtype" not in given)
    )


def assumed_lines(
    profile: StackProfile,
    cfg: TrainConfig,
    gpu: GpuSpec,
    spec: ModelSpec,
    filled: tuple[str, ...],
    given: frozenset[str],
) -> list[str]:
    """What the plan took from the stack rather than from the user, one phrase each."""
    from constraints.config_batch import ConfigBatch

    compute = cfg.resolved_recipe()[4]
    half = compute if compute in ("bf16", "fp16") else "bf16"
    out = [profile.describe()]
    if "recipe" in filled:
        from searcher.search.briefs import recipe_label

        out.append(profile.recipe_reason(recipe_label(cfg), half))
    if "backend" not in given:
        out.append(f"backend {cfg.backend}" + _BACKEND_WHY.get(str(cfg.backend), ""))
    if cfg.is_lora and "adapter_dtype" not in given:
        dtype = cfg.trainable_dtype()
        why = (
            "PEFT's autocast_adapter_dtype=True"
            if dtype == "fp32" and cfg.resolved_recipe()[0] != "fp32"
            else "DeepSpeed's 16-bit engine casts the model"
            if cfg.engine_casts_adapters()
            else "built like their base layer"
        )
        out.append(f"adapters {dtype} ({why})")
        if bool(ConfigBatch.from_configs([cfg]).kbit_prepared[0]):
            out.append("prepare_model_for_kbit_training: the non-quantised parameters in fp32")
    if cfg.quant in BNB_4BIT and "kbit_saves_input" not in given:
        out.append(_kbit_input_phrase(profile, cfg.kbit_saves_input))
    if "checkpointing" in filled:
        out.append(
            "gradient checkpointing on (prepare_model_for_kbit_training's "
            "use_gradient_checkpointing=True)"
        )
    if not spec.attention_layers:
        out.append(f"no attention layers ({spec.config_type or spec.family}: state-space mixers)")
    elif cfg.attention == "eager" and "attention" in filled:
        out.append(
            f"attention eager (transformers has no SDPA for {spec.family}: it falls back to eager)"
        )
    if cfg.attention == "sdpa" and spec.attention_layers:
        kernel = sdpa_kernel(gpu, compute, spec.head_dim)
        if spec.index_heads and kernel == "flash":
            kernel = "memory-efficient"  # the top-k mask: flash takes no mask
        why = " (transformers' default attn_implementation)" if "attention" in filled else ""
        wide = spec.global_head_dim
        also = (
            f"; its global layers (head_dim {wide}) the {sdpa_kernel(gpu, compute, wide)} kernel"
            if wide and sdpa_kernel(gpu, compute, wide) != kernel
            else ""
        )
        out.append(
            f"attention sdpa{why}: the {kernel} kernel on {gpu.name} "
            f"(sm {gpu.compute_capability}, {compute}, head_dim {spec.head_dim}){also}"
        )
    if spec.linear_layers:
        out.append(gated_deltanet_phrase(spec))
    if spec.mamba_layers:
        mamba = spec.mamba_layers
        out.append(
            f"Mamba-2 ({mamba} of {spec.layers} layers): transformers' torch path (mamba_ssm's "
            "fused kernel, where installed, keeps less: not modelled)"
        )
    if spec.index_heads:
        out.append(
            f"DeepSeek Sparse Attention: transformers' {cfg.attention} path, the indexer's fp32 "
            f"scores ({spec.index_heads} heads × sequence², per query token) a forward transient "
            f"and its top-{spec.index_topk} mask kept per layer"
        )
    if spec.mamba1_layers:
        out.append(
            f"Mamba ({spec.mamba1_layers} of {spec.layers} layers): transformers' torch path, "
            "the scan stepped token by token (mamba_ssm's fused kernel, where installed, keeps "
            "far less: not modelled)"
        )
    if "loss" not in given and cfg.loss == "standard":
        out.append(
            LOSS_CHAIN_PHRASES[cfg.loss_chain].format(v=profile.versions["transformers"])
            if profile.framework == HF
            else "loss: cross-entropy on the whole logits (the recipe's loss_fn)"
        )
    return out


def gated_deltanet_phrase(spec: ModelSpec) -> str:
    """What runs the gated DeltaNet layers (constraints/gated_deltanet.py), as the stack decided
    (searcher/search/stack.py ``with_stack_kernels``)."""
    head = f"gated DeltaNet ({spec.linear_layers} of {spec.layers} layers): "
    if spec.delta_rule_kernel == "fla":
        return head + "flash-linear-attention's chunk kernel (in the stack)"
    return head + "transformers' torch path (flash-linear-attention is not in the stack)"


#: the standard loss's chain, said on screen (constraints/logits.py loss_forward_bytes)
LOSS_CHAIN_PHRASES = {
    "padded-labels": "loss: cross-entropy on the whole logits, upcast to fp32, labels padded "
    "(transformers {v} ForCausalLMLoss)",
    "shifted-upcast": "loss: cross-entropy on the whole logits, upcast to fp32 and a shifted "
    "fp32 copy (transformers {v} ForCausalLMLoss: 14 B per token per vocabulary entry with "
    "16-bit logits)",
    "shifted-fp32-logits": "loss: the model upcasts its logits to fp32, the loss copies the "
    "shifted slice (transformers {v})",
}


_BACKEND_WHY = {
    "single": " (one GPU: the Trainer runs the model itself, no DeepSpeed or FSDP)",
    "ddp": " (torch DDP: the Trainer's default on several GPUs)",
}


def _kbit_input_phrase(profile: StackProfile, saves: bool) -> str:
    version = profile.versions["bitsandbytes"]
    if saves:
        return (
            f"bitsandbytes {version}: each 4-bit linear keeps its input for the backward "
            "(MatMul4Bit before 0.43.2)"
        )
    return f"bitsandbytes {version}: the 4-bit matmul keeps only the packed weight"
