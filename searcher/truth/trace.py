"""``fitplan trace``: run the real Hugging Face model on the meta device and measure what autograd saves.

The model is built from its ``config.json`` on PyTorch's meta device (tensors with shapes and
storages but no data, so a 405B model costs no memory) and run forward once in training mode.
A :func:`torch.autograd.graph.saved_tensors_hooks` pack hook sees every tensor autograd saves for
backward. Each is counted once per storage (views share their base's storage; meta storages have
no address, so identity is the storage's ``_cdata``), parameters and buffers (and views of them)
are left out, and each storage is charged to the layer whose forward saved it first (forward
pre/post hooks on the layer modules). The representative layer of each stack is its last one, so
storages shared across layers (rotary cos/sin) are charged to the first layer and count as model
level here.

Attention is emulated as a CUDA kernel runs it, not as the CPU runs it:

- ``flash``: a registered attention function (transformers' ``AttentionInterface``; for models
  without it, ``F.scaled_dot_product_attention`` is patched) calls a custom autograd Function that
  saves exactly what FlashAttention-2 / PyTorch's CUDA flash SDPA save: q, k, v (not expanded to
  all heads), the output (in the kernel's (b, s, h, d) layout, which the output projection then
  reads as a view) and the fp32 log-sum-exp (b, h, s). The CPU math path would save the s² scores.
- ``eager``: the model's own eager attention (softmax of the s² scores).
- ``eager`` + ``selective``: the eager attention core under a re-entrant checkpoint, i.e.
  Korthikanti's selective recomputation: only its inputs (q, k, v) stay.
- ``full`` checkpointing: ``gradient_checkpointing_enable(use_reentrant=True)``: what each layer
  keeps is its input; a recomputed layer holds the ``none`` figure again.

The numbers are bytes per token per layer, compared with fitplan's analytic lists
(:func:`constraints.activations.layer_bytes_per_token`) at the same dtype. The kernel
emulations are in :mod:`searcher.truth.cuda_emulation`; the command is
:mod:`searcher.truth.trace_command`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from constraints.errors import FitplanError
from constraints.models import ModelSpec
from searcher.truth.cuda_emulation import (
    TRACE_ATTN,
    TRACE_SELECTIVE,
    cuda_dropout,
    meta_safe_masks,
    patched_sdpa,
    register_attention,
)

#: (attention, checkpointing) modes traced by default
MODES: tuple[tuple[str, str], ...] = (
    ("flash", "none"),
    ("flash", "full"),
    ("eager", "none"),
    ("eager", "selective"),
    ("eager", "full"),
)


@dataclass
class SavedTensor:
    where: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclass
class ModeTrace:
    attention: str
    checkpointing: str
    #: block kind → bytes per token of one layer (the stack's last layer of that kind)
    layer_bytes: dict[str, float]
    #: block kind → fitplan's analytic bytes per token of one layer
    analytic_bytes: dict[str, float]
    #: saved outside the layers (embeddings, final norm, head input), per token
    model_level_bytes: float
    #: saved by the loss (logits upcast, log-softmax …), per token
    loss_bytes: float
    tensors: dict[str, list[SavedTensor]] = field(default_factory=dict)
    note: str = ""

    def error(self, block: str) -> float:
        return self.analytic_bytes[block] / self.layer_bytes[block] - 1.0


@dataclass
class TraceResult:
    model: str
    spec: ModelSpec
    traced_layers: int
    params_traced: int
    params_inventory: int
    batch: int
    seq_len: int
    dtype: str
    modes: list[ModeTrace]


# --------------------------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------------------------


def _block_kinds(spec: ModelSpec, stack: str, n: int) -> list[str]:
    if spec.family in ("t5", "mt5"):
        return ["encoder" if "encoder" in stack else "decoder"] * n
    return [spec.layer_block(i) for i in range(n)]


def trace_mode(
    cfg: dict[str, Any],
    spec: ModelSpec,
    attention: str,
    checkpointing: str,
    *,
    batch: int = 2,
    seq_len: int = 256,
    dtype: str = "bf16",
    keep_tensors: bool = False,
) -> tuple[ModeTrace, int]:
    """Trace one (attention, checkpointing) mode; returns it and the model's parameter count."""
    import torch

    from constraints.activations import layer_bytes_per_token
    from searcher.truth.hf_build import build_model, dummy_inputs, hf_config, layer_stacks

    if attention == "flash" and spec.family in ("t5", "mt5"):
        raise FitplanError(
            "T5 adds a learned position bias to the attention scores, which FlashAttention "
            "cannot take: fitplan costs T5 attention as eager"
        )
    register_attention()
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    config = hf_config(cfg, use_cache=False)
    impl = TRACE_ATTN if attention == "flash" else "eager"
    if attention == "eager" and checkpointing == "selective":
        impl = TRACE_SELECTIVE
    note = ""
    try:
        model = build_model(config, device="meta", dtype=torch_dtype, attn_implementation=impl)
    except (ValueError, KeyError, FitplanError):
        # no attention interface (Falcon): its SDPA branch, with F.sdpa patched to the emulation
        if impl == TRACE_SELECTIVE:
            raise FitplanError(
                f"{spec.name}: selective recomputation needs the attention interface"
            ) from None
        impl = "sdpa" if attention == "flash" else "eager"
        model = build_model(config, device="meta", dtype=torch_dtype, attn_implementation=impl)
        note = "attention through F.scaled_dot_product_attention (patched)"
    if getattr(model.config, "_experts_implementation", None) is not None:
        model.config._experts_implementation = "grouped_mm"  # shapes independent of routing
    model.train()
    if checkpointing == "full":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
        model.enable_input_require_grads()
    params_total = int(model.num_parameters())
    excluded = {p.untyped_storage()._cdata for p in model.parameters()}
    excluded |= {b.untyped_storage()._cdata for b in model.buffers()}

    where = ["model"]
    layer_of: dict[str, str] = {}
    for stack_name, stack in layer_stacks(model):
        kinds = _block_kinds(spec, stack_name, len(stack))
        for i, layer in enumerate(stack):
            label = f"{stack_name}.{i}"
            layer_of[label] = kinds[i]

            def pre(_m: Any, _a: Any, label: str = label) -> None:
                where.append(label)

            def post(_m: Any, _a: Any, _o: Any) -> None:
                where.pop()

            layer.register_forward_pre_hook(pre)
            layer.register_forward_hook(post)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        head.register_forward_hook(lambda _m, _a, _o: where.append("loss"))

    seen: dict[int, SavedTensor] = {}
    alive: list[Any] = []  # hold every saved tensor: a freed storage's address could be reused

    def pack(t: Any) -> Any:
        st = t.untyped_storage()
        key = st._cdata
        alive.append(t)
        if key not in excluded and key not in seen:
            seen[key] = SavedTensor(where[-1], tuple(t.shape), str(t.dtype), int(st.nbytes()))
        return t

    inputs = dummy_inputs(model, batch, seq_len, "meta")
    ctx = patched_sdpa() if note else _nullcontext()
    with (
        ctx,
        meta_safe_masks(),
        cuda_dropout(),
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
    ):
        out = model(**inputs)
        logits = getattr(out, "logits", None)
        if logits is not None and spec.arch != "encoder":
            labels = inputs.get("decoder_input_ids", inputs["input_ids"])
            model.loss_function(logits, labels, vocab_size=logits.shape[-1])

    tokens = float(batch * seq_len)
    per_layer: dict[str, dict[str, float]] = {}
    for label, kind in layer_of.items():
        total = sum(x.nbytes for x in seen.values() if x.where == label)
        per_layer.setdefault(kind, {})[label] = total / tokens
    layer_bytes = {kind: list(v.values())[-1] for kind, v in per_layer.items()}
    rep = {kind: list(v)[-1] for kind, v in per_layer.items()}
    model_level = sum(x.nbytes for x in seen.values() if x.where == "model") / tokens
    loss = sum(x.nbytes for x in seen.values() if x.where == "loss") / tokens
    kind_bytes = {
        "compute": 4.0 if dtype == "fp32" else 2.0,
        "residual": 4.0 if dtype == "fp32" else 2.0,
        "fp32": 4.0,
        "softmax": 4.0 if dtype == "fp32" else 2.0,
        "cast16": 0.0 if dtype == "fp32" else 2.0,
        "autocast16": 0.0,  # the layer trace runs without autocast
        "matmul32": 4.0,
        "stream32": 4.0 if dtype == "fp32" else 0.0,
        "autocast32": 0.0,  # the layer trace runs without autocast
        "mask": 1.0,
    }
    analytic = {
        kind: layer_bytes_per_token(
            spec,
            kind,
            attention=attention,
            checkpointing=checkpointing,
            kind_bytes=kind_bytes,
            seq_len=seq_len,
            batch=batch,
        )
        for kind in layer_bytes
    }
    tensors = (
        {kind: [x for x in seen.values() if x.where == rep[kind]] for kind in layer_bytes}
        if keep_tensors
        else {}
    )
    mode = ModeTrace(
        attention,
        checkpointing,
        layer_bytes,
        analytic,
        model_level,
        loss,
        tensors,
        note,
    )
    return mode, params_total


@contextmanager
def _nullcontext() -> Iterator[None]:
    yield


def trace(
    model: str,
    *,
    modes: tuple[tuple[str, str], ...] = MODES,
    layers: int | None = 2,
    batch: int = 2,
    seq_len: int = 256,
    dtype: str = "bf16",
    keep_tensors: bool = False,
) -> TraceResult:
    """Trace ``model`` (catalog id or config.json) in each mode; parameters of the full model."""
    from constraints.params import total_params
    from searcher.truth.hf_build import config_of, hf_config, require_torch, with_layers

    require_torch()
    if batch < 1 or seq_len < 2:
        raise FitplanError("--batch must be ≥ 1 and --seq-len ≥ 2")
    if layers is not None and layers < 1:
        raise FitplanError(f"--layers must be positive, got {layers}")
    cfg, spec = config_of(model)
    small_cfg = with_layers(cfg, layers)
    from constraints.models import spec_from_hf_config

    small_spec = spec_from_hf_config(small_cfg, id=spec.id, name=spec.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notices
        params_full = _count_params(hf_config(cfg), bool(cfg.get("tie_word_embeddings", True)))
        results = _trace_modes(small_cfg, small_spec, modes, batch, seq_len, dtype, keep_tensors)
    return TraceResult(
        model=spec.id,
        spec=spec,
        traced_layers=small_spec.total_layers,
        params_traced=params_full,
        params_inventory=total_params(spec),
        batch=batch,
        seq_len=seq_len,
        dtype=dtype,
        modes=results,
    )


def _trace_modes(
    small_cfg: dict[str, Any],
    small_spec: ModelSpec,
    modes: tuple[tuple[str, str], ...],
    batch: int,
    seq_len: int,
    dtype: str,
    keep_tensors: bool,
) -> list[ModeTrace]:
    results = []
    for attention, ckpt in modes:
        try:
            mode, _ = trace_mode(
                small_cfg,
                small_spec,
                attention,
                ckpt,
                batch=batch,
                seq_len=seq_len,
                dtype=dtype,
                keep_tensors=keep_tensors,
            )
        except FitplanError as err:
            mode = ModeTrace(attention, ckpt, {}, {}, 0.0, 0.0, note=str(err))
        results.append(mode)
    return results


def _count_params(config: Any, tie_word_embeddings: bool) -> int:
    """Parameters of the full-size model, counted on the meta device (no memory), for the class
    fitplan's inventory counts (BERT: the bare encoder with its pooler, as the catalog)."""
    import torch
    import transformers

    from searcher.truth.hf_build import build_model

    if config.model_type == "bert":
        with torch.device("meta"):
            return int(transformers.BertModel(config, add_pooling_layer=True).num_parameters())
    model = build_model(config, device="meta", dtype=torch.bfloat16, attn_implementation="eager")
    if not tie_word_embeddings:
        _untie_t5_head(model, config)
    return int(model.num_parameters())


def _untie_t5_head(model: Any, config: Any) -> None:
    """transformers 5 ties T5's head to the embedding whatever the config says; a v1.1 / Flan /
    mT5 checkpoint (tie_word_embeddings false) loads a separate head, so count it separately
    (as tools/verify_catalog_with_transformers.py does)."""
    import torch
    from torch import nn

    if config.model_type not in ("t5", "mt5"):
        return
    if model.lm_head.weight is model.shared.weight:
        with torch.device("meta"):
            model.lm_head.weight = nn.Parameter(torch.empty_like(model.lm_head.weight))
