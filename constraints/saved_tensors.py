"""Saved tensors: the record of one tensor autograd saves (:class:`Saved`) and the building blocks
every family shares (norms, the attention core, gated and plain MLPs).

What a tensor costs depends on the run (its ``dtype`` kind):

- ``compute``: matmul inputs/outputs in the compute dtype (bf16/fp16, or fp32 for fp32 training);
- ``residual``: the residual stream, in the dtype of the weights (fp32 under AMP autocast);
- ``fp32``: RMSNorm's upcast copy, softmax in fp32, log-sum-exp, LayerNorm mean/rstd;
- ``softmax``: attention probabilities of eager attention, fp32 under autocast else compute;
- ``cast16``: a 16-bit cast of an fp32 tensor (``.to(query.dtype)``): the compute dtype's bytes,
  none when the computation runs in fp32 (the cast is a no-op and shares the fp32 storage; traced:
  OPT-1.3B LoRA fp32 eager 8 × 8192 held one fp32 probability tensor per layer, not two);
- ``mask``: dropout masks, 1 byte per element;
- ``autocast16``: the 16-bit copy autocast makes of an fp32 input to a matmul (the compute dtype's
  bytes under autocast, none otherwise);
- ``matmul32``: a matmul's operand copy or output in code that computes in fp32 (the Mamba-2
  scan's einsums): fp32, but the compute dtype under autocast, which casts the operands first.
"""

from __future__ import annotations

from typing import Literal, get_args

from constraints.frozen import frozen
from constraints.model_spec import LLAMA_LIKE, ModelSpec

DKind = Literal[
    "compute",
    "residual",
    "fp32",
    "softmax",
    "mask",
    "cast16",
    "autocast16",
    "matmul32",
    "stream32",
    "autocast32",
]
#: ``stream32``: fp32, but only where the residual stream is fp32 (fp32 training, or autocast
#: over fp32 weights): a ``.float()`` that is a no-op there keeps its input's whole storage
#: (Gemma 3n's input norm reading one of the AltUp streams); nothing in 16-bit training.
#: ``autocast32``: fp32 under autocast only (an fp32 tensor that autocast's 16-bit copy would
#: have replaced in fp32 training, and that is a fresh copy's place in 16-bit training)
DKINDS: tuple[DKind, ...] = get_args(DKind)


@frozen
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
    #: in the MLP branch of a parallel layer (Phi, GPT-NeoX, Falcon), produced from this linear's
    #: output: in the first layer, whose input (the frozen embedding's output) does not require
    #: grad, nothing in the branch is recorded unless this linear trains (its output is a leaf of
    #: no graph): not saved there
    parallel_branch: str = ""
    #: saved only where one of these linears trains or carries an adapter (its output needs a
    #: gradient: Gemma 4's per-layer inputs), whatever the adapter keeps of its own input
    grad_through: tuple[str, ...] = ()
    #: the last tensor of a mixer core whose backward holds transients beyond what it saved (the
    #: Mamba-1 scan's select gradients): what the layer saves after it is freed before that
    #: backward starts, as what follows eager attention's scores is (``s2``)
    core_end: bool = False
    #: the first tensor of an attention core: what the layer saved before it exists when the
    #: core starts (DeepSeek Sparse Attention's indexer runs there)
    core_start: bool = False


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
    if spec.norm_weight_fp32:
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
#: every Llama-style family, OPT, and Falcon (modeling_falcon.py uses Llama's eager attention)
HF_FP32_SOFTMAX = frozenset(
    LLAMA_LIKE
    | {"opt", "falcon", "gpt_neox", "phi", "cohere", "cohere2", "gpt_bigcode", "gptj"}
    | {"gpt_neo", "codegen", "bloom", "mpt", "persimmon", "lfm2", "lfm2_moe", "bamba", "nemotron_h"}
    | {"gemma4_text", "falcon_h1", "lfm3", "gemma3n_text", "nanochat", "jamba", "bitnet"}
    | {"cohere2_moe"}
)


#: types read as one of those families whose own eager attention softmaxes in the compute dtype
#: (modeling_biogpt.py ``eager_attention_forward``: ``softmax(attn_weights, dim=-1)``)
COMPUTE_DTYPE_SOFTMAX = frozenset({"biogpt"})


def fp32_eager_softmax(spec: ModelSpec) -> bool:
    """Whether the type's eager attention runs ``softmax(dtype=torch.float32)``."""
    return spec.family in HF_FP32_SOFTMAX and spec.config_type not in COMPUTE_DTYPE_SOFTMAX


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
        saved.append(
            Saved(
                "q/k/v (views of one fused projection output)",
                qkv_storage,
                "compute",
                core_start=True,
            )
        )
    elif v_view_of is not None:
        saved += [
            Saved("q (after rotary)", q, "compute", core_start=True),
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
            Saved("q (after rotary)", q, "compute", core_start=True),
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
    if expand > 1:
        saved.append(
            Saved(
                "k, v expanded to all heads (repeat_kv)",
                2 * (q - k),
                "compute",
                eager_only=True,
                recomputed_by_selective=True,
            )
        )
    if fp32_eager_softmax(spec):
        # HF eager: softmax(dtype=float32).to(query.dtype): softmax saves its fp32 output (traced:
        # 4 bytes per score whatever the model dtype) and the 16-bit copy feeds the PV matmul;
        # under attention dropout the dropped copy feeds it instead (dropout keeps only its mask)
        saved.append(
            Saved(
                "attention probabilities (fp32 softmax output)",
                heads,
                "fp32",
                s2=True,
                eager_only=True,
            )
        )
        if not dropout:
            saved.append(
                Saved(
                    "attention probabilities cast to compute dtype (PV matmul input)",
                    heads,
                    "cast16",
                    s2=True,
                    eager_only=True,
                )
            )
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
    if spec.attn_softcap:
        saved.append(
            Saved(
                "attention logit soft-cap tanh output", heads, "compute", s2=True, eager_only=True
            )
        )
    if spec.sink_scaling:
        saved += _sink_scaling(heads, q)
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


def _sink_scaling(heads: int, q: int) -> list[Saved]:
    """Granite SWA's eager sink (modeling_granite_swa.py ``eager_attention_forward``):
    ``lse = logsumexp(scores)`` keeps the masked scores and its output (logsumexp is on
    autocast's fp32 list: both fp32 there), ``sigmoid(lse − sink)`` its fp32 output, and
    ``PV · scale`` the PV output and the scale cast to it."""
    return [
        Saved(
            "masked scores (logsumexp keeps its input)", heads, "softmax", s2=True, eager_only=True
        ),
        Saved("logsumexp per head", heads, "softmax", eager_only=True),
        Saved("sink scale sigmoid(lse − sink) (fp32)", heads, "fp32", eager_only=True),
        Saved("sink scale cast to the output's dtype", heads, "cast16", eager_only=True),
        Saved("PV output (the sink-scale multiply keeps it)", q, "compute", eager_only=True),
    ]


def fp32_scores_qk(q: int, k: int) -> Saved:
    """Eager attention whose scores come from fp32 copies of q and k (GPT-J, CodeGen, GPT-Neo:
    ``matmul(query.to(torch.float32), key.to(torch.float32)...)``): the matmul keeps the copies in
    place of the 16-bit q and k, 4 B where SDPA keeps 2 — counted as the 16-bit bytes once more
    (nothing when computing in fp32)."""
    return Saved(
        "q and k cast to fp32 for the scores (beyond their 16-bit bytes)",
        q + k,
        "cast16",
        eager_only=True,
        recomputed_by_selective=True,
    )


def _gated_mlp(
    spec: ModelSpec, prefix: str, inter: int, per_token: float = 1.0, down_name: str = "down_proj"
) -> list[Saved]:
    """SwiGLU / GeGLU: act(gate(x)) * up(x), then down. ``per_token`` = experts a token visits."""
    down = (
        "mlp.experts.w2"
        if spec.family == "mixtral" and prefix == "mlp.experts"
        else f"{prefix}.{down_name}"
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
    if act == "xielu":
        # transformers' XIELUActivation (the Python path, without the xielu CUDA wheel):
        # where(x > 0, αp·x·x + β·x, (expm1(min(x, ε)) − x)·αn + β·x) keeps x, αp·x, the expm1
        # output and the condition; the (expm1 − x) factor too when αn trains. expm1 is on
        # autocast's fp32 list (ATen autocast_mode.cpp): under autocast it keeps an fp32 output
        # and the negative branch is fp32 (the "softmax" kind: fp32 under autocast)
        return [
            *saved,
            Saved("xielu: αp·x", inter, "compute"),
            Saved("xielu: expm1(min(x, ε))", inter, "softmax"),
            Saved("xielu: x > 0", inter, "mask"),
            Saved("xielu: expm1(…) − x (αn's gradient)", inter, "softmax", norm_weight=True),
            Saved(f"activation output ({fc_out} input)", inter, "compute", inputs_of=(fc_out,)),
        ]
    if act == "relu2":
        # transformers' ReLUSquaredActivation: relu saves its output, square saves its input (the
        # same storage); the square's output is the next linear's input
        return [
            Saved(f"{fc_in} output after relu (relu and square share it)", inter, "compute"),
            Saved(f"relu² output ({fc_out} input)", inter, "compute", inputs_of=(fc_out,)),
        ]
    saved.append(
        Saved(f"activation output ({fc_out} input)", inter, "compute", inputs_of=(fc_out,))
    )
    return saved


def in_parallel_branch(saved: list[Saved], fc_in: str) -> list[Saved]:
    """``saved`` marked as the MLP branch of a parallel layer, starting at linear ``fc_in``."""
    import dataclasses

    return [dataclasses.replace(x, parallel_branch=fc_in) for x in saved]


def linear_input(what: str, width: int, *linears: str) -> Saved:
    """The input the ``linears`` read, kept once when one of them saves it (its weight trains
    or an adapter reads it)."""
    return Saved(what, width, "compute", inputs_of=linears, tp_split=False)


def norm_output_read_by(linear: str, norm: str, width: int) -> Saved:
    """A norm's output, which the linear reading it keeps as its input (when its weight trains or
    an adapter reads it)."""
    leaf = linear.rsplit(".", 1)[-1]
    return linear_input(f"{leaf} input ({norm} output)", width, linear)


def projected_attention(
    spec: ModelSpec, prefix: str, out: str = "o_proj", qk_norms: tuple[str, str] | None = None
) -> list[Saved]:
    """A plain attention after a norm: the normed input ``prefix``.q/k/v_proj read, the per-head
    ``qk_norms`` where it has them, the core up to ``out``."""
    q, kv = spec.q_width, spec.kv_width
    qkv = tuple(f"{prefix}.{p}" for p in ("q_proj", "k_proj", "v_proj"))
    s = [linear_input("q/k/v projection input (normed hidden)", spec.hidden, *qkv)]
    if qk_norms:
        s += _norm(spec, qk_norms[0], q, spec.heads) + _norm(spec, qk_norms[1], kv, spec.kv_heads)
    return s + _attention_core(spec, q, kv, kv, f"{prefix}.{out}")


def pre_norm_block(
    spec: ModelSpec,
    norms: tuple[str, str],
    linears: tuple[str, str, str],
    attention: list[Saved],
    attention_dropout_residual: bool = True,
) -> list[Saved]:
    """A sequential pre-norm layer (BLOOM, MPT, Persimmon): ``norms[0]`` → ``linears[0]`` (the
    q/k/v projection) → ``attention`` (what it saves up to the residual add), an optional dropout
    on that branch; ``norms[1]`` → ``linears[1]`` → the plain MLP → ``linears[2]``, dropout."""
    h = spec.hidden
    drop = spec.hidden_dropout > 0
    qkv, up, down = linears
    s = [*_norm(spec, norms[0], h), norm_output_read_by(qkv, norms[0], h), *attention]
    if drop and attention_dropout_residual:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += [*_norm(spec, norms[1], h), norm_output_read_by(up, norms[1], h)]
    s += _plain_mlp(spec, up, down, spec.intermediate)
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s
