"""The Mamba-2 mixer (state space duality) of the hybrid decoders — Bamba, and the families
built on its mixer: its config fields, its parameters and what transformers' torch path saves.

Read from transformers 5.25 ``modeling_bamba.py``: ``BambaMixer`` (one ``in_proj`` to the gate
z, the convolved x·B·C and the per-head dt; a depthwise causal conv; the chunked scan
``mamba2_chunk_scan``; ``BambaRMSNormGated``; ``out_proj``). In training, transformers runs
mamba_ssm's fused ``mamba_split_conv1d_scan_combined`` where that package is installed and the
inputs are on a GPU (integrations/hub_kernels.py), else the torch path, which keeps the chunked
scan's fp32 intermediates (``C``-wide score matrices per head, a state per chunk):
:func:`mixer_saved` lists that path.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.limits import excerpt
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, _linear
from constraints.saved_tensors import DKind, Saved, linear_input


def read(
    cfg: dict[str, Any], hidden: int, where: str, defaults: dict[str, int] | None = None
) -> dict[str, Any]:
    """BambaConfig's mixer fields (configuration_bamba.py defaults where a key is absent, or
    the family's ``defaults``): ``mamba_n_heads`` heads of ``mamba_d_head`` ("auto": the width
    / heads), which must tile the width exactly (its ``validate_architecture``): ``mamba_expand
    · hidden``, or ``mamba_d_ssm`` where the config sets it (Falcon-H1)."""
    given = defaults or {}

    def field(key: str, default: int) -> int:
        return _positive(key, _int(cfg, key, where=where, default=given.get(key, default)), where)

    heads = field("mamba_n_heads", 128)
    expand = field("mamba_expand", 2)
    d_ssm = cfg.get("mamba_d_ssm", given.get("mamba_d_ssm"))
    width = expand * hidden if d_ssm is None else field("mamba_d_ssm", 0)
    what = "mamba_expand · hidden_size" if d_ssm is None else "mamba_d_ssm"
    head_dim = cfg.get("mamba_d_head", "auto")
    if head_dim in ("auto", None):
        if width % heads:
            raise FitplanError(f"{where}: mamba_n_heads {heads} does not divide {what} {width}")
        head_dim = width // heads
    else:
        head_dim = field("mamba_d_head", 0)
    if head_dim * heads != width:
        raise FitplanError(
            f"{where}: mamba_n_heads {heads} × mamba_d_head {head_dim} is not {what} {width}"
        )
    groups = field("mamba_n_groups", 1)
    if heads % groups:
        raise FitplanError(
            f"{where}: mamba_n_groups {groups} does not divide mamba_n_heads {heads}"
        )
    return {
        "ssm_heads": heads,
        "ssm_head_dim": head_dim,
        "ssm_groups": groups,
        "ssm_state": field("mamba_d_state", 256),
        "ssm_chunk": field("mamba_chunk_size", 256),
        "linear_conv_kernel": field("mamba_d_conv", 4),
        "ssm_conv_bias": bool(cfg.get("mamba_conv_bias", True)),
        "mixer_bias": bool(cfg.get("mamba_proj_bias", False)),
    }


#: transformers' layer_types names of a Mamba layer and of an attention layer, the legacy ones
#: too (configuration_utils.py ``_LEGACY_LAYER_TYPE_REMAP``: "mamba", "attention")
MAMBA_TYPES, ATTENTION_TYPES = ("linear_attention", "mamba"), ("full_attention", "attention")


def mixers(cfg: dict[str, Any], layers: int, where: str) -> str:
    """``layer_mixers`` from ``layer_types`` (Granite 4's ``layers_block_type`` too); without
    one, every layer is Mamba (GraniteMoeHybridConfig's default)."""
    kinds = cfg.get("layer_types", cfg.get("layers_block_type"))
    if kinds is None:
        return "m" * layers
    known = set(MAMBA_TYPES) | set(ATTENTION_TYPES)
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= known:
        raise FitplanError(
            f"{where}: layer_types must list 'mamba' / 'linear_attention' or 'attention' / "
            f"'full_attention' for each of the {layers} layers, got {excerpt(kinds)}"
        )
    return "".join("m" if k in MAMBA_TYPES else "a" for k in kinds)


def _widths(spec: ModelSpec) -> tuple[int, int, int]:
    """(the scan's width I = heads · head_dim, the convolution's channels I + 2·G·N, in_proj's
    output I + conv + heads), elements per token."""
    inner = spec.ssm_heads * spec.ssm_head_dim
    conv = inner + 2 * spec.ssm_groups * spec.ssm_state
    return inner, conv, inner + conv + spec.ssm_heads


def param_groups(spec: ModelSpec, block: str, prefix: str = "mamba") -> list[ParamGroup]:
    """The mixer's tensors in one layer of ``block``."""
    h, heads = spec.hidden, spec.ssm_heads
    inner, conv, proj = _widths(spec)
    p, bias = prefix, spec.mixer_bias
    g = _linear(f"{p}.in_proj", "in_proj", h, proj, block=block, role="attention", bias=bias)
    # depthwise nn.Conv1d: not an nn.Linear (PEFT's all-linear skips it)
    g.append(
        ParamGroup(
            f"{p}.conv1d.weight",
            "other",
            conv * spec.linear_conv_kernel,
            1,
            block,
            "conv1d",
            "attention",
        )
    )
    if spec.ssm_conv_bias:
        g.append(ParamGroup(f"{p}.conv1d.bias", "bias", conv, 1, block, "conv1d", "attention"))
    g += [
        ParamGroup(f"{p}.dt_bias", "other", heads, 1, block, "", "attention"),
        ParamGroup(f"{p}.A_log", "other", heads, 1, block, "", "attention"),
        ParamGroup(f"{p}.D", "other", heads, 1, block, "", "attention"),
    ]
    if spec.ssm_norm != "none":
        g.append(ParamGroup(f"{p}.norm.weight", "norm", inner, 1, block, "", "norm"))
    out_bias = bias if spec.ssm_out_bias is None else spec.ssm_out_bias
    g += _linear(
        f"{p}.out_proj", "out_proj", inner, h, block=block, role="attention", bias=out_bias
    )
    return g


def mixer_saved(
    spec: ModelSpec, prefix: str = "mamba", projection: DKind = "compute"
) -> list[Saved]:
    """What one Mamba-2 mixer saves for backward on transformers' torch path, per token.

    The scan runs in fp32 on every head (B and C repeated from their groups) over the sequence
    padded to a multiple of the chunk ``C``; each einsum keeps contiguous copies of its operands.
    Counted for a sequence that is a multiple of the chunk; what only the gradients of D, A_log
    and the norm weight need is kept only when they train (``norm_weight``; the depthwise conv
    keeps its input either way). ``projection``: the dtype kind of in_proj's output as the
    split reads it (Falcon-H1 multiplies it by a buffer of the weights' dtype: fp32 under
    autocast). Left out: per-call constants (the
    C × C masks, one value per head) and, per sequence, the zero initial state that the
    inter-chunk recurrence prepends (H · P · N fp32) and the conv's K − 1 pad columns.
    """
    h, heads, c = spec.hidden, spec.ssm_heads, spec.ssm_chunk
    inner, conv, proj = _widths(spec)
    hn = heads * spec.ssm_state  # B or C repeated to every head
    state = heads * spec.ssm_head_dim * spec.ssm_state / c  # one P × N state per head and chunk
    p = prefix
    return [
        linear_input("in_proj input (normed hidden)", h, f"{p}.in_proj"),
        # z, xBC and dt are views of in_proj's output: the conv keeps the whole of it
        Saved("in_proj output (the conv input is a view of it)", proj, projection),
        # conv1d is on autocast's 16-bit list: it saves autocast's copy of its channels. An fp32
        # projection is kept besides (Falcon-H1); a 16-bit one is then kept by nothing (the
        # reference conv first casts it to the fp32 weight's dtype, a transient)
        Saved(
            "conv input cast by autocast",
            conv if projection != "compute" else conv - proj,
            "autocast16",
        ),
        Saved("SiLU input (conv output)", conv, "compute"),
        Saved("softplus input and clamp input (dt + dt_bias)", 2 * heads, projection),
        Saved("x upcast to fp32 (x · dt)", inner, "fp32"),
        Saved("dt upcast to fp32 (x · dt)", heads, "fp32"),
        # kept for the gradients of D and A_log: only when they train (full fine-tuning)
        Saved("x padded, for the D skip's weight grad", inner, "fp32", norm_weight=True),
        Saved("dt upcast again, for A's grad (A · dt)", heads, "fp32", norm_weight=True),
        Saved("L = exp(segment sum of A), per chunk", heads * c, "fp32"),
        Saved("C and B as the C·Bᵀ einsum copies them", 2 * hn, "matmul32"),
        Saved("G = C·Bᵀ (M = G · L input)", heads * c, "matmul32"),
        Saved("M and x as the diagonal-block einsum copies them", heads * c + inner, "matmul32"),
        Saved("decay factors exp(ΔA cumulative) of states and outputs", 2 * heads, "fp32"),
        Saved("B repeated and chunked (B · decay input)", hn, "fp32"),
        Saved("B · decay as the states einsum copies it", hn, "matmul32"),
        Saved("x as the states einsum copies it", inner, "matmul32"),
        Saved(
            "chunk states as the recurrence and C·states einsums copy them", 2 * state, "matmul32"
        ),
        Saved("C as the C·states einsum copies it", hn, "matmul32"),
        Saved("C·states (Y_off = · decay input)", inner, "matmul32"),
        *GATED_OUTPUT[spec.ssm_norm](inner, spec.ssm_groups, projection),
        Saved(
            "out_proj input (cast to the compute dtype)",
            inner,
            "compute",
            inputs_of=(f"{p}.out_proj",),
        ),
    ]


def _gate_then_norm(inner: int, groups: int, z: DKind) -> list[Saved]:
    """BambaRMSNormGated: fp32 throughout (the scan's output is fp32), silu(z) gate first."""
    return [
        Saved("gated norm: scan output, z upcast, silu(z) (fp32)", 3 * inner, "fp32"),
        Saved("gated norm: gated output (variance input)", inner, "fp32"),
        Saved(
            "gated norm: normalised output, for the weight grad", inner, "fp32", norm_weight=True
        ),
        Saved("gated norm: rsqrt per group", groups, "fp32"),
    ]


def _norm_then_gate(inner: int, groups: int, z: DKind) -> list[Saved]:
    """Falcon-H1's ``FalconH1RMSNormGated(norm_before_gate=True)``: the fp32 scan output
    normalised per group, × the weight, then × silu(z upcast)."""
    return [
        Saved("gated norm: scan output (fp32, variance input)", inner, "fp32"),
        Saved("gated norm: rsqrt per group", groups, "fp32"),
        Saved(
            "gated norm: normalised output, for the weight grad", inner, "fp32", norm_weight=True
        ),
        Saved("gated norm: weighted output, z upcast, silu(z) (fp32)", 3 * inner, "fp32"),
    ]


def _gate_alone(inner: int, groups: int, z: DKind) -> list[Saved]:
    """Falcon-H1 without the norm (``mamba_rms_norm`` false): ``scan_output * silu(z)``, the
    fp32 scan output and the 16-bit silu(z) kept by the multiply."""
    return [
        Saved("scan output (fp32, the gate multiply keeps it)", inner, "fp32"),
        Saved("silu(z) (the gate multiply keeps it)", inner, z),
    ]


#: ModelSpec.ssm_norm -> what the mixer's output gating saves
GATED_OUTPUT = {"gate-first": _gate_then_norm, "norm-first": _norm_then_gate, "none": _gate_alone}
