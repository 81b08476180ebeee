"""The configuration applied as a training script would apply it, for ``fitplan measure``.

The model from its ``config.json`` with random weights on the device (nothing downloaded), its
precision, LoRA adapters (PEFT) or QLoRA (bitsandbytes NF4), and the optimizer (with fp32 master
copies for ``bf16-master``); what a single process cannot run is refused up front
(:data:`UNSUPPORTED`). The steps themselves and the record: :mod:`searcher.truth.measure`.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError

UNSUPPORTED = {
    "zero": "ZeRO/FSDP sharding needs several processes and a launcher",
    "tp": "tensor parallelism needs several processes",
    "pp": "pipeline parallelism needs several processes",
    "offload": "CPU offload needs DeepSpeed/FSDP",
}


def check_supported(cfg: Any, gpus: int) -> None:
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


def pick_device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise FitplanError("--device cuda: no CUDA device is visible", "use --device cpu")
    if choice not in ("cpu", "cuda"):
        raise FitplanError(f"--device {choice}: use auto, cpu or cuda")
    return choice


def torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _lora_targets(spec: Any, targets: str) -> Any:
    """PEFT target_modules: PEFT's own default, else the modules fitplan counts, named as the
    emitted scripts name them (GPT-2's attention is c_attn and attn.c_proj, not mlp.c_proj)."""
    if targets == "default":
        return None
    from constraints.lora_targets import peft_target_modules

    return peft_target_modules(spec, targets)


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
    if cfg.quant in ("gptq", "awq"):
        raise FitplanError(
            f"cannot measure --quant {cfg.quant}: a GPTQ / AWQ base is a pre-quantised checkpoint, "
            "and measure builds random weights",
            "measure --quant nf4, nf4-dq or int8 (bitsandbytes quantises at load)",
        )
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
            bnb_4bit_compute_dtype=torch_dtype(compute if compute in ("bf16", "fp16") else "bf16"),
        )
    if quant_config is not None:
        model = _quantized_random_model(
            config, quant_config, torch_dtype(weight_dtype), attn, device
        )
    else:
        model = build_model(
            config, device=device, dtype=torch_dtype(weight_dtype), attn_implementation=attn
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
                    p.data = p.data.to(torch_dtype(cfg.adapter_dtype))
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
                new: Any  # a bitsandbytes Linear4bit or Linear8bitLt
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


def build_optimizer(model: Any, cfg: Any, device: str) -> tuple[Any, Any]:
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


def detected_gpu() -> str:
    import torch

    from searcher.truth.row_vocabulary import gpu_of

    name = torch.cuda.get_device_name()
    try:
        return gpu_of(name).id
    except FitplanError:
        total = torch.cuda.mem_get_info()[1]
        return f"{total / 2**30:.2f}GiB"
