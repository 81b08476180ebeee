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
(:func:`constraints.activations.layer_bytes_per_token`) at the same dtype.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from constraints.errors import FitplanError
from constraints.models import ModelSpec

#: (attention, checkpointing) modes traced by default
MODES: tuple[tuple[str, str], ...] = (
    ("flash", "none"),
    ("flash", "full"),
    ("eager", "none"),
    ("eager", "selective"),
    ("eager", "full"),
)
TRACE_ATTN = "fitplan_trace"
TRACE_SELECTIVE = "fitplan_trace_selective"


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
# The flash emulation
# --------------------------------------------------------------------------------------------


def _flash_function() -> Any:
    import torch

    class FlashEmulation(torch.autograd.Function):
        """Forward shapes of flash attention; saves (q, k, v, out, lse) as the CUDA kernel does."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> Any:  # q: (b, h, s, d)
            b, h, s, _ = q.shape
            out = torch.empty(b, s, h, v.shape[-1], dtype=q.dtype, device=q.device)
            lse = torch.empty(b, h, s, dtype=torch.float32, device=q.device)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:  # pragma: no cover - never run
            raise RuntimeError("fitplan's flash emulation only traces the forward pass")

    return FlashEmulation


def _register_attention() -> None:
    import torch
    from transformers import AttentionInterface

    flash = _flash_function()

    def flash_attention(module: Any, query: Any, key: Any, value: Any, *args: Any, **kw: Any):
        return flash.apply(query, key, value), None  # (b, s, h, d): HF's expected layout

    def selective_attention(module: Any, query: Any, key: Any, value: Any, mask: Any, **kw: Any):
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise FitplanError(f"{type(module).__name__} has no eager attention to checkpoint")

        def core(q: Any, k: Any, v: Any) -> Any:
            return eager(module, q, k, v, mask, **kw)[0]

        out = torch.utils.checkpoint.checkpoint(core, query, key, value, use_reentrant=True)
        return out, None

    AttentionInterface.register(TRACE_ATTN, flash_attention)
    AttentionInterface.register(TRACE_SELECTIVE, selective_attention)


@contextmanager
def _patched_sdpa() -> Iterator[None]:
    """F.scaled_dot_product_attention → the flash emulation (models without the interface)."""
    import torch.nn.functional as F

    flash = _flash_function()
    original = F.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *args: Any, **kw: Any) -> Any:
        return flash.apply(q, k, v).transpose(1, 2)  # (b, h, s, d) view of (b, s, h, d)

    setattr(F, "scaled_dot_product_attention", sdpa)  # noqa: B010
    try:
        yield
    finally:
        setattr(F, "scaled_dot_product_attention", original)  # noqa: B010


@contextmanager
def _cuda_dropout() -> Iterator[None]:
    """Dropout as CUDA runs it: the fused kernel saves a 1-byte bool mask. Off CUDA, PyTorch's
    composite dropout multiplies by a noise tensor in the input's dtype and saves that instead
    (2 or 4 bytes per element), so the trace routes dropout through ``torch.native_dropout``."""
    import torch
    import torch.nn.functional as F

    original = F.dropout

    def dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or p == 0.0:
            return x
        return torch.native_dropout(x, p, True)[0]

    setattr(F, "dropout", dropout)  # noqa: B010
    try:
        yield
    finally:
        setattr(F, "dropout", original)  # noqa: B010


@contextmanager
def _meta_safe_masks() -> Iterator[None]:
    """transformers looks for packed sequences in position_ids with a data-dependent check
    (``.all()``), which meta tensors cannot answer; a trace has no packing, so say so."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda *a, **k: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


# --------------------------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------------------------


def _block_kinds(spec: ModelSpec, stack: str, n: int) -> list[str]:
    if spec.family in ("t5", "mt5"):
        return ["encoder" if "encoder" in stack else "decoder"] * n
    return ["moe" if spec.moe_layer(i) else "dense" for i in range(n)]


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
    _register_attention()
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
    ctx = _patched_sdpa() if note else _nullcontext()
    with (
        ctx,
        _meta_safe_masks(),
        _cuda_dropout(),
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


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def result_json(r: TraceResult) -> dict[str, Any]:
    return {
        "model": r.model,
        "params": {"traced": r.params_traced, "inventory": r.params_inventory},
        "traced_layers": r.traced_layers,
        "batch": r.batch,
        "seq_len": r.seq_len,
        "dtype": r.dtype,
        "modes": [
            {
                "attention": m.attention,
                "checkpointing": m.checkpointing,
                "bytes_per_token_per_layer": {
                    block: {
                        "traced": m.layer_bytes[block],
                        "analytic": m.analytic_bytes[block],
                        "error": m.error(block),
                    }
                    for block in m.layer_bytes
                },
                "model_level_bytes_per_token": m.model_level_bytes,
                "loss_bytes_per_token": m.loss_bytes,
                "note": m.note,
                "tensors": {block: [vars(t) for t in ts] for block, ts in m.tensors.items()},
            }
            for m in r.modes
        ],
    }


def _trace_for_cli(args: Any, modes: tuple[tuple[str, str], ...]) -> TraceResult:
    return trace(
        args.model,
        modes=modes,
        layers=args.layers,
        batch=args.batch,
        seq_len=args.seq_len,
        dtype=args.dtype,
        keep_tensors=args.tensors,
    )


def cmd_trace(args: Any) -> int:
    import json
    import sys

    modes = MODES
    if args.attention or args.checkpointing:
        modes = tuple(
            (a, c)
            for a, c in MODES
            if (not args.attention or a == args.attention)
            and (not args.checkpointing or c == args.checkpointing)
        )
        if not modes:
            raise FitplanError(
                f"no traced mode has --attention {args.attention} --checkpointing "
                f"{args.checkpointing}",
                "flash: none or full; eager: none, selective or full",
            )
    from searcher.truth.hf_build import quiet_transformers, require_torch

    require_torch()
    quiet_transformers()
    r = _trace_for_cli(args, modes)
    if args.json:
        sys.stdout.write(json.dumps(result_json(r), indent=2) + "\n")
        return 0
    same = "equal" if r.params_traced == r.params_inventory else "DIFFER"
    lines = [
        f"{r.spec.name}: parameters {r.params_traced:,} traced on the meta device, "
        f"{r.params_inventory:,} by fitplan's inventory ({same})",
        f"saved for backward, bytes per token per layer ({r.dtype} model, batch {r.batch}, "
        f"sequence {r.seq_len}, {r.traced_layers} layers traced):",
        f"  {'attention':9s} {'checkpoint':10s} {'block':8s} {'traced':>12s} {'fitplan':>12s} "
        f"{'error':>8s}",
    ]
    for m in r.modes:
        if not m.layer_bytes:
            lines.append(f"  {m.attention:9s} {m.checkpointing:10s} skipped: {m.note}")
            continue
        for block in m.layer_bytes:
            lines.append(
                f"  {m.attention:9s} {m.checkpointing:10s} {block:8s} "
                f"{m.layer_bytes[block]:12,.1f} {m.analytic_bytes[block]:12,.1f} "
                f"{m.error(block):+8.2%}"
            )
        for tensors in m.tensors.values():
            for t in tensors:
                lines.append(
                    f"      {t.nbytes / (r.batch * r.seq_len):10,.1f} B/token  {t.dtype:15s} "
                    f"{t.shape}"
                )
    first = next((m for m in r.modes if m.layer_bytes), None)
    if first is not None:
        lines.append(
            f"outside the layers: {first.model_level_bytes:,.0f} B/token (final norm, head input); "
            f"the loss saves {first.loss_bytes:,.0f} B/token "
            f"({first.loss_bytes / max(r.spec.vocab, 1):.2f} B per vocabulary entry)"
        )
    notes = {m.note for m in r.modes if m.note and m.layer_bytes}
    lines += [f"note: {n}" for n in sorted(notes)]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
