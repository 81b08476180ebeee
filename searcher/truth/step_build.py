"""Build a fitplan configuration as the user's stack does, for the step tracer (on the meta device).

The HF model from its config; QLoRA: every linear but the head replaced by the bitsandbytes NF4
emulation (:mod:`searcher.truth.fake_quant`), then PEFT's ``prepare_model_for_kbit_training``
(fp32 upcast of the non-quantised parameters, input gradients, checkpointing); HF gradient
checkpointing, non-reentrant; PEFT LoRA with its defaults (``autocast_adapter_dtype=True``: fp32
adapters); the optimizer as torch, transformers or bitsandbytes (emulated) allocate it.
"""

from __future__ import annotations

import warnings
from typing import Any

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.models import ModelSpec

#: PEFT LoraConfig default lora_alpha
PEFT_LORA_ALPHA = 8


def torch_dtype(name: str) -> Any:
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in table:
        raise FitplanError(f"the step tracer runs fp32/bf16/fp16 models, not {name}")
    return table[name]


def check_supported(spec: ModelSpec, cfg: TrainConfig) -> None:
    problems = []
    if cfg.gpus > 1 or cfg.zero:
        problems.append("multi-GPU / ZeRO (single-GPU only for now)")
    if cfg.checkpointing == "selective":
        problems.append("selective checkpointing (none or full)")
    if cfg.loss != "standard":
        problems.append(f"--loss {cfg.loss} (standard only)")
    if cfg.optimizer_in_backward:
        problems.append("--optimizer-in-backward")
    if cfg.quant in ("int8", "gptq", "awq"):
        problems.append(f"--quant {cfg.quant} (nf4 and nf4-dq only)")
    if cfg.recipe == "bf16-pure":
        problems.append("recipe bf16-pure (fp32 states on bf16 weights without a master copy)")
    if spec.arch != "decoder":
        problems.append(f"{spec.arch} models (decoder-only for now)")
    if problems:
        raise FitplanError(
            "the step tracer does not run " + "; ".join(problems) + " yet",
            "trace a single-GPU configuration with --loss standard",
        )


def build(cfg_dict: dict[str, Any], cfg: TrainConfig) -> tuple[Any, str]:
    """The model on the meta device, wrapped (PEFT, quantisation, checkpointing)."""
    import torch

    from searcher.truth.cuda_kernels import FLASH_IMPL, _register_flash
    from searcher.truth.hf_build import build_model, hf_config

    weight, _grad, _master, _state, compute, _autocast = cfg.resolved_recipe()
    dtype = torch_dtype(weight)
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": FLASH_IMPL}[cfg.attention]
    _register_flash()
    config = hf_config(cfg_dict, use_cache=False)
    note = ""
    try:
        model = build_model(config, device="meta", dtype=dtype, attn_implementation=impl)
    except (ValueError, KeyError):
        if impl != FLASH_IMPL:
            raise
        model = build_model(config, device="meta", dtype=dtype, attn_implementation="sdpa")
        note = "no attention interface: flash through F.scaled_dot_product_attention"
    if getattr(model.config, "_experts_implementation", None) is not None:
        model.config._experts_implementation = "grouped_mm"
    model.train()
    ckpt_kwargs = {"use_reentrant": False}
    if cfg.method == "qlora":
        from searcher.truth.fake_quant import quantise_linears

        head = model.get_output_embeddings()
        with torch.device("meta"):
            quantise_linears(
                model, torch_dtype(compute), cfg.quant == "nf4-dq", head, cfg.kbit_saves_input
            )
        model.is_loaded_in_4bit = True  # what prepare_model_for_kbit_training looks for
        model.config._is_quantized = True  # what transformers' quantizer sets (quantizers/base.py)
    # PEFT's QLoRA recipe (fp32 adapters, PEFT's default) runs prepare_model_for_kbit_training:
    # every non-quantised parameter upcast to fp32. With 16-bit adapters pinned, the stack is
    # the one fitplan emits (searcher/emitters/hf_template.py: no prepare call, adapters cast to
    # the pinned dtype) or torchtune's, neither of which upcasts: as the analytic model keys it
    upcast = cfg.method == "qlora" and (cfg.adapter_dtype or "fp32").lower() == "fp32"
    if upcast:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=cfg.checkpointing == "full",
            gradient_checkpointing_kwargs=ckpt_kwargs,
        )
    elif cfg.checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs)
    if cfg.is_lora:
        model = peft_wrap(model, cfg, cfg_dict)
    return model, note


def peft_wrap(model: Any, cfg: TrainConfig, cfg_dict: dict[str, Any]) -> Any:
    """PEFT LoRA on ``model``. ``default``: PEFT's own per-family default; ``attention``: the
    attention projections fitplan counts, named as the emitted scripts name them (Falcon's
    ``dense``, OPT's ``out_proj``, GPT-2's ``attn.c_proj`` included)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from constraints.lora_targets import peft_target_modules
    from constraints.models import spec_from_hf_config

    targets: Any = cfg.lora_targets
    if targets == "default":
        targets = None
    else:
        spec = spec_from_hf_config(cfg_dict, id="traced", name="traced")
        targets = peft_target_modules(spec, targets)
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=PEFT_LORA_ALPHA,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    # the adapters are built on the meta device, where the base layers are (PEFT builds them on
    # the default device, initialises them there with real CPU work, then moves them to the base
    # layer's device): the same shapes and dtypes, without the initialisation's arithmetic
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        peft_model = get_peft_model(model, lora)  # autocast_adapter_dtype=True: fp32 adapters
    if cfg.adapter_dtype:
        dtype = torch_dtype(cfg.adapter_dtype.lower())
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.data = p.data.to(dtype)
    return peft_model


def optimizer_for(cfg: TrainConfig, params: list[Any], adamw_impl: str) -> Any:
    import torch

    from searcher.truth.fake_quant import adamw8bit_class, lion_class

    name = cfg.optimizer.lower()
    if name == "adamw":
        if adamw_impl == "fused":
            return torch.optim.AdamW(params, lr=1e-4, fused=True)
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name in ("adamw-8bit", "paged-adamw-8bit"):
        return adamw8bit_class()(params, lr=1e-4, paged=name.startswith("paged"))
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=True)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, foreach=True)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # HF Trainer's optim="adafactor": scale_parameter=False, relative_step=False
        return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)
    if name == "lion":
        return lion_class()(params, lr=1e-4)
    raise FitplanError(f"the step tracer has no optimizer '{cfg.optimizer}'")  # pragma: no cover
