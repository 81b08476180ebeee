"""Activation memory: the tensors autograd saves for backward, per layer, per token.

Each family's layer is written out as the list of tensors its Hugging Face implementation saves
(one :class:`Saved` per line, with its width in elements per token and its dtype), following
Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer Models": for a
GPT layer with plain GeLU and dropout this list sums to s·b·h·(34 + 5·a·s/h) bytes in 16-bit, and a
unit test holds it to that. What a tensor costs depends on the run:

- ``compute``: matmul inputs/outputs in the compute dtype (bf16/fp16, or fp32 for fp32 training);
- ``residual``: the residual stream, in the dtype of the weights (fp32 under AMP autocast);
- ``fp32``: RMSNorm's upcast copy, softmax in fp32, log-sum-exp, LayerNorm mean/rstd;
- ``softmax``: attention probabilities of eager attention, fp32 under autocast else compute;
- ``mask``: dropout masks, 1 byte per element.

Which tensors are saved depends on what trains: a linear saves its input only if its weight
trains (full fine-tuning) or if a LoRA adapter on it reads that input (with ``lora_dropout`` > 0
the adapter saves a dropped copy plus its mask instead); a norm saves its normalised input only if
its weight trains. Flash / memory-efficient attention saves q, k, v, the output and the fp32
log-sum-exp; eager attention adds the s² scores. Selective recomputation (Korthikanti) drops the
s² terms; full checkpointing keeps each layer's input and recomputes one layer at a time.

:func:`activation_coefficients` turns a layer list into a handful of numbers per model so that
the memory model is plain numpy arithmetic over millions of candidate configurations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from constraints.models import LLAMA_LIKE, ModelSpec
from constraints.params import ParamGroup, inventory, lora_target_groups

DKind = Literal["compute", "residual", "fp32", "softmax", "mask"]
DKINDS: tuple[DKind, ...] = ("compute", "residual", "fp32", "softmax", "mask")


@dataclass(frozen=True)
class Saved:
    """One tensor saved for backward: ``width`` elements per token (× heads·s when ``s2``)."""

    what: str
    width: float
    dtype: DKind
    #: saved only if one of these linears saves its input (weight trains or a LoRA adapter reads it)
    inputs_of: tuple[str, ...] = ()
    #: saved only if this norm's weight trains
    norm_weight: bool = False
    #: attention-score term (× s): eager attention only; dropped by selective recomputation
    s2: bool = False
    #: only when the attention implementation is eager
    eager_only: bool = False
    #: only when the implementation is flash / memory-efficient SDPA
    flash_only: bool = False
    #: split across tensor-parallel ranks (inside the attention / MLP TP region)
    tp_split: bool = True
    #: inside the attention core that selective recomputation recomputes (eager attention only)
    recomputed_by_selective: bool = False
    #: saved by the flash kernel, or kept as an input of a checkpointed (selective) attention core
    flash_or_selective: bool = False


def _norm(spec: ModelSpec, name: str, width: int, rows: int = 1) -> list[Saved]:
    """What a norm layer saves, by implementation (HF Llama/Gemma/OLMo-2 RMSNorm, T5, LayerNorm).

    ``rows``: normalised rows per token (1; the heads for a per-head q/k norm): an RMSNorm saves
    one fp32 rsqrt per row.
    """
    if spec.norm == "layernorm" or spec.family == "olmo":
        # F.layer_norm saves its input and per-token mean and rstd (2 fp32 values);
        # OLMo's non-parametric LayerNorm upcasts to fp32 first.
        kind: DKind = "fp32" if spec.family == "olmo" else "residual"
        return [
            Saved(f"{name}: input", width, kind, tp_split=False),
            Saved(f"{name}: mean and rstd", 2, "fp32", tp_split=False),
        ]
    rsqrt = Saved(f"{name}: rsqrt per row (fp32)", rows, "fp32", tp_split=False)
    if spec.family in ("gemma", "gemma2", "olmo2"):
        # the weight multiplies the fp32 normalised value, then casts: (x̂ · w).to(dtype)
        return [
            Saved(f"{name}: fp32 upcast of the input", width, "fp32", tp_split=False),
            rsqrt,
            Saved(
                f"{name}: normalised (fp32), for the weight grad",
                width,
                "fp32",
                norm_weight=True,
                tp_split=False,
            ),
        ]
    if spec.family in ("t5", "mt5"):
        return [
            Saved(f"{name}: fp32 copy for the variance", width, "fp32", tp_split=False),
            Saved(
                f"{name}: input (the x · rsqrt multiply saves it)",
                width,
                "residual",
                tp_split=False,
            ),
            rsqrt,
            Saved(
                f"{name}: normalised, for the weight grad",
                width,
                "residual",
                norm_weight=True,
                tp_split=False,
            ),
        ]
    return [
        Saved(f"{name}: fp32 upcast of the input (pow, mul)", width, "fp32", tp_split=False),
        rsqrt,
        Saved(
            f"{name}: normalised, for the weight grad",
            width,
            "residual",
            norm_weight=True,
            tp_split=False,
        ),
    ]


#: families whose HF eager attention runs ``softmax(scores, dtype=torch.float32)``
HF_FP32_SOFTMAX = frozenset(LLAMA_LIKE | {"opt"})  # every Llama-style family, and OPT


def _attention_core(
    spec: ModelSpec,
    q: int,
    k: int,
    v: int,
    out_to: str,
    qkv_storage: int | None = None,
    v_view_of: int | None = None,
) -> list[Saved]:
    """SDPA (flash / memory-efficient) or eager attention, from q/k/v to the output projection.

    ``v_view_of``: v is a view of a fused projection output of that width (Phi-3's qkv_proj). The
    flash kernel (and a checkpointed attention core) saves v as it is, which keeps the whole fused
    storage alive; eager attention's PV matmul saves a contiguous copy of v instead (traced).
    """
    heads = spec.heads
    dropout = spec.attention_dropout > 0
    saved: list[Saved] = []
    if qkv_storage is not None:
        saved.append(Saved("q/k/v (views of one fused projection output)", qkv_storage, "compute"))
    elif v_view_of is not None:
        saved += [
            Saved("q (after rotary)", q, "compute"),
            Saved("k (after rotary)", k, "compute"),
            Saved(
                "v: its fused q/k/v projection output (v is a view of it)",
                v_view_of,
                "compute",
                flash_or_selective=True,
            ),
            Saved(
                "v made contiguous by the PV matmul",
                v,
                "compute",
                eager_only=True,
                recomputed_by_selective=True,
            ),
        ]
    else:
        saved += [
            Saved("q (after rotary)", q, "compute"),
            Saved("k (after rotary)", k, "compute"),
            Saved("v", v, "compute"),
        ]
    saved += [
        Saved(
            "attention output (SDPA saves it; the out projection reads the same storage)",
            q if spec.is_mla is False else heads * spec.v_head_dim,
            "compute",
            flash_only=True,
        ),
        Saved("log-sum-exp per head", heads, "fp32", flash_only=True),
    ]
    expand = spec.heads // spec.kv_heads
    if expand > 1 and qkv_storage is None:
        saved.append(
            Saved(
                "k, v expanded to all heads (repeat_kv)",
                2 * (q - k),
                "compute",
                eager_only=True,
                recomputed_by_selective=True,
            )
        )
    if spec.family in HF_FP32_SOFTMAX:
        # HF eager: softmax(dtype=float32).to(query.dtype): softmax saves its fp32 output (traced:
        # 4 bytes per score whatever the model dtype) and the 16-bit copy feeds the PV matmul
        saved += [
            Saved(
                "attention probabilities (fp32 softmax output)",
                heads,
                "fp32",
                s2=True,
                eager_only=True,
            ),
            Saved(
                "attention probabilities cast to compute dtype (PV matmul input)",
                heads,
                "compute",
                s2=True,
                eager_only=True,
            ),
        ]
    else:
        saved.append(
            Saved(
                "attention probabilities (softmax output)",
                heads,
                "softmax",
                s2=True,
                eager_only=True,
            )
        )
    if spec.family == "gemma2":
        saved.append(
            Saved(
                "attention logit soft-cap tanh output", heads, "compute", s2=True, eager_only=True
            )
        )
    if dropout:
        saved += [
            Saved("attention dropout mask", heads, "mask", s2=True, eager_only=True),
            Saved(
                "dropped probabilities (PV matmul input)",
                heads,
                "compute",
                s2=True,
                eager_only=True,
            ),
        ]
    saved.append(
        Saved(
            "attention output made contiguous (out projection input)",
            q if not spec.is_mla else heads * spec.v_head_dim,
            "compute",
            inputs_of=(out_to,),
            eager_only=True,
        )
    )
    return saved


def _gated_mlp(spec: ModelSpec, prefix: str, inter: int, per_token: float = 1.0) -> list[Saved]:
    """SwiGLU / GeGLU: act(gate(x)) * up(x), then down. ``per_token`` = experts a token visits."""
    down = (
        "mlp.experts.w2"
        if spec.family == "mixtral" and prefix == "mlp.experts"
        else f"{prefix}.down_proj"
    )
    w = inter * per_token
    return [
        Saved(f"{prefix}: gate projection output (activation input)", w, "compute"),
        Saved(f"{prefix}: activation output", w, "compute"),
        Saved(f"{prefix}: up projection output", w, "compute"),
        Saved(f"{prefix}: gate × up (down projection input)", w, "compute", inputs_of=(down,)),
    ]


def _plain_mlp(spec: ModelSpec, fc_in: str, fc_out: str, inter: int) -> list[Saved]:
    act = spec.activation
    saved = [Saved(f"{fc_in} output (activation input)", inter, "compute")]
    if act == "gelu_new":
        # transformers' NewGELUActivation is written in python ops: pow, tanh, 0.5·x, 1 + tanh
        saved += [
            Saved("gelu_new: tanh output", inter, "compute"),
            Saved("gelu_new: 0.5·x", inter, "compute"),
            Saved("gelu_new: 1 + tanh", inter, "compute"),
        ]
    if act == "relu":
        # relu saves its output, which is also the next linear's input: one storage
        saved = [Saved(f"{fc_in} output after relu (relu and {fc_out} share it)", inter, "compute")]
        return saved
    saved.append(
        Saved(f"activation output ({fc_out} input)", inter, "compute", inputs_of=(fc_out,))
    )
    return saved


def _llama_layer(spec: ModelSpec, moe: bool) -> list[Saved]:
    h, q, kv = spec.hidden, spec.q_width, spec.kv_width
    s: list[Saved] = []
    if not spec.post_norm:
        s += _norm(spec, "input_layernorm", h)
    if spec.is_mla:
        q_in = ("self_attn.q_a_proj",) if spec.q_lora_rank else ("self_attn.q_proj",)
        s.append(
            Saved(
                "q_a/kv_a projection input",
                h,
                "compute",
                inputs_of=(*q_in, "self_attn.kv_a_proj_with_mqa"),
                tp_split=False,
            )
        )
        if spec.q_lora_rank:
            s += _norm(spec, "q_a_layernorm", spec.q_lora_rank)
            s.append(
                Saved(
                    "q_b_proj input",
                    spec.q_lora_rank,
                    "compute",
                    inputs_of=("self_attn.q_b_proj",),
                    tp_split=False,
                )
            )
        s += _norm(spec, "kv_a_layernorm", spec.kv_lora_rank)
        s.append(
            Saved(
                "kv_b_proj input",
                spec.kv_lora_rank,
                "compute",
                inputs_of=("self_attn.kv_b_proj",),
                tp_split=False,
            )
        )
        s += _attention_core(
            spec,
            q,
            q,
            spec.heads * spec.v_head_dim,
            "self_attn.o_proj",
            v_view_of=spec.heads * (spec.qk_nope_head_dim + spec.v_head_dim),
        )
    else:
        qkv = (
            ("self_attn.qkv_proj",)
            if spec.fused_qkv
            else ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
        )
        s.append(
            Saved(
                "q/k/v projection input (normed hidden)",
                h,
                "compute",
                inputs_of=qkv,
                tp_split=False,
            )
        )
        if spec.qk_norm != "none":
            head_rows = spec.qk_norm == "head"
            s += _norm(spec, "q_norm", q, spec.heads if head_rows else 1)
            s += _norm(spec, "k_norm", kv, spec.kv_heads if head_rows else 1)
        s += _attention_core(
            spec,
            q,
            kv,
            kv,
            "self_attn.o_proj",
            v_view_of=q + 2 * kv if spec.fused_qkv else None,
        )
    if spec.post_norm:
        s += _norm(spec, "post_attention_layernorm", h)
    if spec.family == "gemma2":
        s += _norm(spec, "post_attention_layernorm", h) + _norm(
            spec, "pre_feedforward_layernorm", h
        )
    elif not spec.post_norm:
        s += _norm(spec, "post_attention_layernorm", h)
    if not moe:
        up = ("mlp.gate_up_proj",) if spec.fused_gate_up else ("mlp.gate_proj", "mlp.up_proj")
        s.append(
            Saved(
                "gate/up projection input (normed hidden)",
                h,
                "compute",
                inputs_of=up,
                tp_split=False,
            )
        )
        s += _gated_mlp(spec, "mlp", spec.intermediate)
    else:
        k, e = spec.experts_per_token, spec.num_experts
        s.append(
            Saved(
                "router / shared-expert input (normed hidden)",
                h,
                "compute",
                inputs_of=(
                    "mlp.gate",
                    "mlp.shared_experts.gate_proj",
                    "mlp.shared_experts.up_proj",
                ),
                tp_split=False,
            )
        )
        if spec.family == "deepseek_v3":
            # DeepseekV3TopkRouter: F.linear(hidden.type(torch.float32), weight.type(float32))
            s.append(Saved("router input upcast to fp32", h, "fp32", tp_split=False))
        s.append(Saved("router probabilities (fp32 softmax / sigmoid)", e, "fp32", tp_split=False))
        experts_in = (
            ("mlp.experts.w1", "mlp.experts.w3")
            if spec.family == "mixtral"
            else ("mlp.experts.gate_proj", "mlp.experts.up_proj")
        )
        s.append(
            Saved(
                "tokens gathered for their experts (× top-k)",
                h * k,
                "compute",
                inputs_of=experts_in,
                tp_split=False,
            )
        )
        s += _gated_mlp(spec, "mlp.experts", spec.moe_intermediate, per_token=k)
        s.append(
            Saved(
                "expert outputs before routing-weight multiply (× top-k)",
                h * k,
                "compute",
                tp_split=False,
            )
        )
        if spec.shared_experts:
            s += _gated_mlp(spec, "mlp.shared_experts", spec.shared_expert_intermediate)
    if spec.post_norm or spec.family == "gemma2":
        s += _norm(spec, "post_feedforward_layernorm", h)
    return s


def _gpt2_layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    drop = spec.hidden_dropout > 0
    s = _norm(spec, "ln_1", h)
    s.append(
        Saved(
            "c_attn input (ln_1 output)", h, "compute", inputs_of=("attn.c_attn",), tp_split=False
        )
    )
    s += _attention_core(spec, h, h, h, "attn.c_proj", qkv_storage=3 * h)
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += _norm(spec, "ln_2", h)
    s.append(
        Saved("c_fc input (ln_2 output)", h, "compute", inputs_of=("mlp.c_fc",), tp_split=False)
    )
    s += _plain_mlp(spec, "mlp.c_fc", "mlp.c_proj", i)
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s


def _opt_layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    s = _norm(spec, "self_attn_layer_norm", h)
    s.append(
        Saved(
            "q/k/v projection input",
            h,
            "compute",
            inputs_of=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            tp_split=False,
        )
    )
    s += _attention_core(spec, h, h, h, "self_attn.out_proj")
    if spec.hidden_dropout > 0:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += _norm(spec, "final_layer_norm", h)
    s.append(Saved("fc1 input", h, "compute", inputs_of=("fc1",), tp_split=False))
    s += _plain_mlp(spec, "fc1", "fc2", i)
    if spec.hidden_dropout > 0:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s


def _falcon_layer(spec: ModelSpec) -> list[Saved]:
    h, i, q, kv = spec.hidden, spec.intermediate, spec.q_width, spec.kv_width
    s = _norm(spec, "input_layernorm", h)
    s.append(
        Saved(
            "query_key_value / dense_h_to_4h input (shared)",
            h,
            "compute",
            inputs_of=("self_attention.query_key_value", "mlp.dense_h_to_4h"),
            tp_split=False,
        )
    )
    # transformers splits the fused projection with copies: q and k rotated, v its own tensor.
    # The eager matmuls broadcast k and v (MQA / GQA) to every head and save those copies.
    s += [
        Saved("q after rotary", q, "compute"),
        Saved("k after rotary", kv, "compute", flash_or_selective=True),
        Saved("v", kv, "compute", flash_or_selective=True),
        Saved(
            "k and v broadcast to all heads (eager matmul inputs)",
            2 * q,
            "compute",
            eager_only=True,
            recomputed_by_selective=True,
        ),
        Saved(
            "attention output (SDPA saves it; the dense projection reads the same storage)",
            q,
            "compute",
            flash_only=True,
        ),
        Saved("log-sum-exp per head", spec.heads, "fp32", flash_only=True),
        Saved(
            "attention probabilities (softmax output, model dtype)",
            spec.heads,
            "softmax",
            s2=True,
            eager_only=True,
        ),
        Saved(
            "attention output made contiguous (dense input)",
            q,
            "compute",
            inputs_of=("self_attention.dense",),
            eager_only=True,
        ),
    ]
    s += _plain_mlp(spec, "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", i)
    return s


def _bert_layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    s = [
        Saved(
            "query/key/value input",
            h,
            "compute",
            inputs_of=("attention.self.query", "attention.self.key", "attention.self.value"),
            tp_split=False,
        )
    ]
    s += _attention_core(spec, h, h, h, "attention.output.dense")
    s.append(Saved("hidden dropout mask (attention)", h, "mask", tp_split=False))
    s += _norm(spec, "attention.output.LayerNorm", h)
    s.append(
        Saved(
            "intermediate.dense input",
            h,
            "compute",
            inputs_of=("intermediate.dense",),
            tp_split=False,
        )
    )
    s += _plain_mlp(spec, "intermediate.dense", "output.dense", i)
    s.append(Saved("hidden dropout mask (MLP)", h, "mask", tp_split=False))
    s += _norm(spec, "output.LayerNorm", h)
    return s


def _t5_ff(spec: ModelSpec, stack: str) -> list[Saved]:
    h, f = spec.hidden, spec.intermediate
    s = _norm(spec, f"{stack} FF layer_norm", h)
    if spec.gated_mlp:
        s.append(
            Saved(
                "wi_0/wi_1 input",
                h,
                "compute",
                inputs_of=(f"{stack}:DenseReluDense.wi_0", f"{stack}:DenseReluDense.wi_1"),
                tp_split=False,
            )
        )
        s += [
            Saved("wi_0 output (gelu input)", f, "compute"),
            Saved("gelu_new: tanh output", f, "compute"),
            Saved("gelu_new: 0.5·x", f, "compute"),
            Saved("gelu_new: 1 + tanh", f, "compute"),
            Saved("gelu output", f, "compute"),
            Saved("wi_1 output", f, "compute"),
        ]
    else:
        s.append(
            Saved(
                "wi input", h, "compute", inputs_of=(f"{stack}:DenseReluDense.wi",), tp_split=False
            )
        )
        s.append(Saved("relu output", f, "compute"))
    s += [
        Saved("FF dropout mask", f, "mask"),
        Saved(
            "dropped activations (wo input)",
            f,
            "compute",
            inputs_of=(f"{stack}:DenseReluDense.wo",),
        ),
        Saved("FF residual dropout mask", h, "mask", tp_split=False),
    ]
    return s


def _t5_attention(spec: ModelSpec, stack: str, prefix: str) -> list[Saved]:
    h, inner = spec.hidden, spec.heads * spec.head_dim
    s = _norm(spec, f"{stack} {prefix} layer_norm", h)
    if prefix == "EncDecAttention":
        s.append(
            Saved(
                "cross-attention q input",
                h,
                "compute",
                inputs_of=(f"{stack}:{prefix}.q",),
                tp_split=False,
            )
        )
        s.append(Saved("cross-attention k, v (of the encoder output)", 2 * inner, "compute"))
        s.append(Saved("cross-attention q", inner, "compute"))
    else:
        s.append(
            Saved(
                "q/k/v input",
                h,
                "compute",
                inputs_of=(f"{stack}:{prefix}.q", f"{stack}:{prefix}.k", f"{stack}:{prefix}.v"),
                tp_split=False,
            )
        )
        s.append(Saved("q, k, v", 3 * inner, "compute"))
    heads = spec.heads
    s += [
        Saved("attention probabilities (softmax output, model dtype)", heads, "softmax", s2=True),
        Saved("attention dropout mask", heads, "mask", s2=True),
        Saved("dropped probabilities (PV matmul input)", heads, "compute", s2=True),
        Saved(
            "attention output made contiguous (o input)",
            inner,
            "compute",
            inputs_of=(f"{stack}:{prefix}.o",),
        ),
        Saved("attention residual dropout mask", h, "mask", tp_split=False),
    ]
    return s


def layer_saved(spec: ModelSpec, block: str) -> list[Saved]:
    """The saved-tensor list of one layer of ``block`` ('dense', 'moe', 'encoder', 'decoder')."""
    if spec.family == "gpt2":
        return _gpt2_layer(spec)
    if spec.family == "opt":
        return _opt_layer(spec)
    if spec.family == "falcon":
        return _falcon_layer(spec)
    if spec.family == "bert":
        return _bert_layer(spec)
    if spec.family in ("t5", "mt5"):
        stack = block
        s = _t5_attention(spec, stack, "SelfAttention")
        if stack == "decoder":
            s += _t5_attention(spec, stack, "EncDecAttention")
        return s + _t5_ff(spec, stack)
    if spec.arch == "raw":
        return _raw_layer(spec)
    return _llama_layer(spec, moe=block == "moe")


def _raw_layer(spec: ModelSpec) -> list[Saved]:
    """Korthikanti's GPT layer in 16-bit with flash attention: 34·h bytes per token (17 tensors of h)."""
    return [
        Saved(
            "Korthikanti GPT layer (34·s·b·h bytes in 16-bit, flash attention)",
            17 * spec.hidden,
            "compute",
        )
    ]


def model_level_saved(spec: ModelSpec) -> list[Saved]:
    """Tensors saved once per forward outside the layers: final norm, head input, embedding dropout."""
    h = spec.hidden
    if spec.arch == "raw":
        return []
    s: list[Saved] = []
    if spec.family in ("gpt2", "bert") and spec.hidden_dropout > 0:
        s.append(Saved("embedding dropout mask", h, "mask", tp_split=False))
    if spec.family == "bert":
        s += _norm(spec, "embeddings.LayerNorm", h)
        return s
    if spec.final_norm:
        s += _norm(spec, "final norm", h)
    s.append(
        Saved(
            "lm_head input (final hidden state)",
            h,
            "compute",
            inputs_of=("lm_head",),
            tp_split=False,
        )
    )
    return s


# --------------------------------------------------------------------------------------------
# Coefficients: the layer lists reduced to numbers for vectorised evaluation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActivationCoefficients:
    """Saved elements per token of the whole model for one (trainability, attention) setting.

    ``per_token[kind]`` multiplies bytes-per-element of that dtype kind; ``s2[kind]`` further
    multiplies the sequence length (eager attention scores). ``layer_*`` are the same for the
    largest single layer (full checkpointing recomputes one layer) and ``layer_input`` is what
    full checkpointing keeps per layer. ``lora_rank_elems`` is elements per token per unit of LoRA
    rank (the A outputs the B matmul saves); ``lora_copy_elems`` elements per token of private adapter
    input copies (used when the adapters need them). ``tp_*`` give the part that tensor parallelism splits.
    """

    per_token: dict[DKind, float]
    s2: dict[DKind, float]
    tp_per_token: dict[DKind, float]
    tp_s2: dict[DKind, float]
    layer_per_token: dict[DKind, float]
    layer_s2: dict[DKind, float]
    layers: int
    lora_rank_elems: float = 0.0
    lora_copy_elems: float = 0.0
    lines: tuple[tuple[str, float, str, bool], ...] = field(default=())


def _trainable_keys(spec: ModelSpec, method: str, lora_targets: str) -> tuple[bool, frozenset[str]]:
    """(all base weights train?, LoRA-targeted linear group keys)."""
    if method == "full":
        return True, frozenset()
    if spec.arch == "raw":
        return False, frozenset()  # raw numbers: no modules to target; the generic layer applies
    groups = lora_target_groups(spec, lora_targets)
    return False, frozenset(_group_key(spec, g) for g in groups)


def _group_key(spec: ModelSpec, g: ParamGroup) -> str:
    name = g.name.removesuffix(".weight")
    if spec.family in ("t5", "mt5"):
        return f"{g.block}:{name}"
    return name


def _linear_widths(spec: ModelSpec) -> dict[str, tuple[int, float]]:
    """Group key -> (d_in, applications per token per layer of its block)."""
    inv = inventory(spec)
    out: dict[str, tuple[int, float]] = {}
    for g in inv.groups:
        if not g.is_linear:
            continue
        per_token = float(g.per_block)
        if g.role == "expert":
            per_token = float(spec.experts_per_token)
        out[_group_key(spec, g)] = (g.d_in, per_token)
    return out


@cache
def activation_coefficients(
    spec: ModelSpec,
    method: str,
    lora_targets: str,
    attention: str,
    selective: bool,
    lora_input_copies: bool,
    tp: int = 1,
) -> ActivationCoefficients:
    """Reduce the layer lists of ``spec`` to per-dtype element counts (see the class docstring).

    ``attention`` is 'flash' (flash or memory-efficient SDPA) or 'eager'. ``lora_input_copies``:
    each adapter keeps a private copy of its input (lora_dropout > 0 makes a dropped copy; an
    adapter dtype other than the compute dtype makes PEFT cast the input per adapter).
    """
    full_ft, targets = _trainable_keys(spec, method, lora_targets)
    widths = _linear_widths(spec)
    eager = attention == "eager"

    def keeps(x: Saved, block: str) -> bool:
        return _keeps(spec, x, block, full_ft, targets, widths, eager, selective, lora_input_copies)

    per_token = dict.fromkeys(DKINDS, 0.0)
    s2 = dict.fromkeys(DKINDS, 0.0)
    tp_pt = dict.fromkeys(DKINDS, 0.0)
    tp_s2 = dict.fromkeys(DKINDS, 0.0)
    layer_pt: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    layer_s2: dict[DKind, float] = dict.fromkeys(DKINDS, 0.0)
    lines: list[tuple[str, float, str, bool]] = []
    inv = inventory(spec)
    blocks = inv.blocks or {"dense": spec.layers}
    largest_bytes = -1.0
    rank_elems = 0.0
    copy_elems = 0.0
    for block, n_layers in blocks.items():
        pt = dict.fromkeys(DKINDS, 0.0)
        ps = dict.fromkeys(DKINDS, 0.0)
        for x in layer_saved(spec, block):
            if not keeps(x, block):
                continue
            target = ps if x.s2 else pt
            target[x.dtype] += x.width
            if x.tp_split and tp > 1:
                (tp_s2 if x.s2 else tp_pt)[x.dtype] += x.width * n_layers
            lines.append((x.what, x.width * n_layers, x.dtype, x.s2))
        # LoRA: each targeted linear saves its A output (r elements per application) and, when it
        # needs a private copy of its input, that copy (d_in elements per application)
        for key in targets:
            if _block_of(spec, key, block) and key in widths:
                d_in, apps = widths[key]
                rank_elems += apps * n_layers
                copy_elems += d_in * apps * n_layers
        for kind in DKINDS:
            per_token[kind] += pt[kind] * n_layers
            s2[kind] += ps[kind] * n_layers
        size = sum(pt.values()) + sum(ps.values()) * 1024
        if size > largest_bytes:
            largest_bytes = size
            layer_pt, layer_s2 = dict(pt), dict(ps)
    for x in model_level_saved(spec):
        if keeps(x, ""):
            per_token[x.dtype] += x.width
            lines.append((x.what, x.width, x.dtype, False))
    return ActivationCoefficients(
        per_token=per_token,
        s2=s2,
        tp_per_token=tp_pt,
        tp_s2=tp_s2,
        layer_per_token=layer_pt,
        layer_s2=layer_s2,
        layers=spec.total_layers,
        lora_rank_elems=rank_elems,
        lora_copy_elems=copy_elems,
        lines=tuple(lines),
    )


def _keeps(
    spec: ModelSpec,
    x: Saved,
    block: str,
    full_ft: bool,
    targets: frozenset[str],
    widths: dict[str, tuple[int, float]],
    eager: bool,
    selective: bool,
    lora_input_copies: bool,
) -> bool:
    """Whether tensor ``x`` of a ``block`` layer is saved in this setting."""
    if x.eager_only and not eager:
        return False
    if x.flash_only and eager:
        return False
    if x.s2 and selective:
        return False
    if x.recomputed_by_selective and selective and eager:
        return False
    if x.flash_or_selective and eager and not selective:
        return False
    if x.norm_weight and not full_ft:
        return False
    if x.inputs_of:
        readers = [r for r in (_qualify(spec, m, block) for m in x.inputs_of) if r in widths]
        if full_ft and "lm_head" in x.inputs_of:
            return True  # a tied head trains with the embedding
        if full_ft:
            return bool(readers)
        # a LoRA adapter reads the shared input itself only when it needs no private copy
        return any(r in targets for r in readers) and not lora_input_copies
    return True


def checkpoint_bias_elements(spec: ModelSpec, block: str, seq_len: int) -> float:
    """Elements a checkpointed layer keeps besides its input, per layer (not per token).

    T5 passes its relative position bias, a (1, heads, s, s) tensor, from layer to layer; a
    checkpointed layer keeps it as an input (traced: one per self-attention, and the decoder's
    cross-attention bias too). Other families keep only the hidden state.
    """
    if spec.family not in ("t5", "mt5"):
        return 0.0
    per_attention = float(spec.heads) * seq_len * seq_len
    return per_attention * (2 if block == "decoder" else 1)


def layer_bytes_per_token(
    spec: ModelSpec,
    block: str,
    *,
    attention: str,
    checkpointing: str,
    kind_bytes: dict[str, float],
    seq_len: int,
    batch: int = 1,
    method: str = "full",
    lora_targets: str = "",
) -> float:
    """Bytes one ``block`` layer saves per token (what ``fitplan trace`` measures).

    ``checkpointing`` 'full' keeps the layer's input (the residual stream) and, for T5, the
    position bias; 'selective' drops the attention-score tensors; ``kind_bytes`` gives bytes per
    element of each dtype kind.
    """
    if checkpointing == "full":
        bias = checkpoint_bias_elements(spec, block, seq_len) * kind_bytes["residual"]
        return float(spec.hidden) * kind_bytes["residual"] + bias / (batch * seq_len)
    full_ft, targets = _trainable_keys(spec, method, lora_targets)
    widths = _linear_widths(spec)
    eager = attention == "eager"
    selective = checkpointing == "selective"
    total = 0.0
    for x in layer_saved(spec, block):
        if _keeps(spec, x, block, full_ft, targets, widths, eager, selective, False):
            total += x.width * (seq_len if x.s2 else 1) * kind_bytes[x.dtype]
    return total


def _qualify(spec: ModelSpec, module: str, block: str) -> str:
    if spec.family in ("t5", "mt5") and ":" not in module:
        return f"{block}:{module}"
    return module


def _block_of(spec: ModelSpec, key: str, block: str) -> bool:
    """Whether linear group ``key`` lives in ``block`` (T5 keys carry their stack)."""
    inv = inventory(spec)
    for g in inv.groups:
        if g.is_linear and _group_key(spec, g) == key:
            return g.block == block or (not g.block and block == next(iter(inv.blocks), ""))
    return False
