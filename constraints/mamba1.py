"""The Mamba-1 mixer (selective scan) of Mamba, Falcon-Mamba and Jamba: its config fields, its
parameters and what transformers' torch path saves.

Read from transformers 5.25 ``modeling_mamba.py`` ``MambaMixer``: ``in_proj`` to x and the gate
z (2 · I, I = ``expand · hidden``), a depthwise causal conv on x, SiLU, ``x_proj`` to the time
step's rank R and the state's B and C (N each), the time step ``dt_proj.weight @ dt`` (the
module is not called: its bias is the scan's ``delta_bias``), the selective scan, the gate
``· silu(z)``, ``out_proj``. Falcon-Mamba normalises dt, B and C first (weightless RMSNorms).

In training transformers runs mamba_ssm's fused ``mamba_inner_fn`` where that package is
installed and the inputs are on a GPU (integrations/hub_kernels.py), else the torch path:
``mamba_selective_scan`` materialises exp(A·dt) and dt·B·x for every token (I × N fp32 each)
and steps through the sequence, each step's fp32 state kept by the next step's multiply and its
16-bit copy by the matmul with C (the associative scan it also has runs only under
torch.compile). :func:`mixer_saved` lists that path.
"""

from __future__ import annotations

import math
from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, _linear
from constraints.saved_tensors import Saved, linear_input


def read(
    cfg: dict[str, Any],
    hidden: int,
    where: str,
    keys: dict[str, str],
    inner_key: str | None = "intermediate_size",
) -> dict[str, Any]:
    """The mixer's ModelSpec fields from ``cfg`` (MambaConfig's defaults where a key is
    absent); ``keys`` maps MambaConfig's names to the family's (Jamba's ``mamba_d_state`` …).
    The width is ``expand · hidden``, or ``inner_key`` where the config gives it (MambaConfig
    sets ``intermediate_size`` from expand, then a saved value overrides it)."""

    def key(name: str) -> str:
        return keys.get(name, name)

    def field(name: str, default: int) -> int:
        return _positive(key(name), _int(cfg, key(name), where=where, default=default), where)

    width = field("expand", 2) * hidden
    if inner_key and cfg.get(inner_key) is not None:
        width = _positive(inner_key, _int(cfg, inner_key, where=where), where)
    # "auto": MambaConfig.__post_init__'s ceil(hidden / 16)
    auto = cfg.get(key("time_step_rank"), "auto") in ("auto", None)
    rank = math.ceil(hidden / 16) if auto else field("time_step_rank", 0)
    act = str(cfg.get(key("hidden_act"), "silu"))
    if act not in ("silu", "swish"):
        raise FitplanError(
            f"{where}: hidden_act {act!r}: fitplan models the Mamba mixer's SiLU convolution",
            "pass raw numbers (--params …)",
        )
    return {
        "ssm_inner": width,
        "ssm_dt_rank": int(rank),
        "ssm_state": field("state_size", 16),
        "linear_conv_kernel": field("conv_kernel", 4),
        "ssm_conv_bias": bool(cfg.get(key("use_conv_bias"), True)),
        "mixer_bias": bool(cfg.get(key("use_bias"), False)),
    }


def param_groups(spec: ModelSpec, block: str, prefix: str = "mixer") -> list[ParamGroup]:
    """The mixer's tensors in one layer of ``block``."""
    h, inner, n, rank = spec.hidden, spec.ssm_inner, spec.ssm_state, spec.ssm_dt_rank
    p, bias = prefix, spec.mixer_bias
    g = _linear(f"{p}.in_proj", "in_proj", h, 2 * inner, block=block, role="attention", bias=bias)
    # depthwise nn.Conv1d: not an nn.Linear (PEFT's all-linear skips it)
    conv = inner * spec.linear_conv_kernel
    g.append(ParamGroup(f"{p}.conv1d.weight", "other", conv, 1, block, "conv1d", "attention"))
    if spec.ssm_conv_bias:
        g.append(ParamGroup(f"{p}.conv1d.bias", "bias", inner, 1, block, "conv1d", "attention"))
    g += _linear(f"{p}.x_proj", "x_proj", inner, rank + 2 * n, block=block, role="attention")
    g += _linear(f"{p}.dt_proj", "dt_proj", rank, inner, block=block, role="attention", bias=True)
    if spec.ssm_bcdt_norm == "rmsnorm":  # Jamba: dt_layernorm, b_layernorm, c_layernorm
        g.append(
            ParamGroup(f"{p}.dt/b/c_layernorm.weight", "norm", rank + 2 * n, 1, block, "", "norm")
        )
    g += [
        ParamGroup(f"{p}.A_log", "other", inner * n, 1, block, "", "attention"),
        ParamGroup(f"{p}.D", "other", inner, 1, block, "", "attention"),
    ]
    g += _linear(f"{p}.out_proj", "out_proj", inner, h, block=block, role="attention", bias=bias)
    return g


def mixer_saved(spec: ModelSpec, prefix: str = "mixer") -> list[Saved]:
    """What one Mamba-1 mixer saves for backward on transformers' torch path, per token.

    Left out: per-call constants (A = −exp(A_log) and D as [I, N] / [I] fp32), per sequence the
    zero initial state and the conv's K − 1 pad columns (its output is sliced from an s + K − 1
    long one), and the last step's fp32 state (no next step keeps it)."""
    h, inner, n, rank = spec.hidden, spec.ssm_inner, spec.ssm_state, spec.ssm_dt_rank
    p = prefix
    s = [
        linear_input("in_proj input (normed hidden)", h, f"{p}.in_proj"),
        # x and z are views of in_proj's output: the conv and silu(z) keep the whole of it
        Saved(
            "in_proj output (the conv's x and the gate's z are views of it)", 2 * inner, "compute"
        ),
        # conv1d is on autocast's 16-bit list: the reference conv first casts x to the fp32
        # weight's dtype, and autocast keeps a 16-bit copy of that
        Saved("conv input cast by autocast", inner, "autocast16"),
        Saved("SiLU input (conv output)", inner, "compute"),
        # the SiLU output: x_proj's input, and what D's gradient reads (full fine-tuning only)
        linear_input("x_proj input (conv output after SiLU)", inner, f"{p}.x_proj"),
    ]
    if spec.ssm_bcdt_norm:
        s += [
            Saved("dt, B, C norms: fp32 upcasts (pow, mul)", rank + 2 * n, "fp32"),
            Saved("dt, B, C norms: rsqrt per row (fp32)", 3, "fp32"),
            *(
                # Jamba's JambaRMSNorm: weight · x̂.to(dtype), x̂ kept for the weight's gradient
                [
                    Saved(
                        "dt, B, C normed, for the weights' grad",
                        rank + 2 * n,
                        "compute",
                        norm_weight=True,
                    )
                ]
                if spec.ssm_bcdt_norm == "rmsnorm"
                else []
            ),
            Saved("C normed (the scan's matmuls keep it)", n, "compute"),
            Saved(
                "dt normed, for dt_proj's weight grad", rank, "compute", inputs_of=(f"{p}.dt_proj",)
            ),
        ]
    else:
        # the time step and C are views of it: the scan's matmuls keep C, dt_proj's weight
        # gradient the time step
        s.append(Saved("x_proj output (dt, B and C are views of it)", rank + 2 * n, "compute"))
    return [
        *s,
        Saved("softplus input (dt_proj.weight · dt + bias)", inner, "compute"),
        Saved("dt = softplus(…) (A · dt and dt · B keep it)", inner, "compute"),
        Saved("discrete A = exp(A · dt), every token (I × N)", inner * n, "fp32"),
        Saved("B upcast to fp32 (dt · B)", n, "fp32"),
        Saved("discrete B = dt · B (· x keeps it)", inner * n, "fp32"),
        Saved("x upcast to fp32 (discrete B · x)", inner, "fp32"),
        Saved("each step's state (the next step's multiply keeps it)", inner * n, "fp32"),
        Saved("each step's state cast for its matmul with C", inner * n, "cast16", core_end=True),
        Saved("scan output + D · x (fp32, the gate multiply keeps it)", inner, "fp32"),
        Saved("silu(z) (the gate multiply keeps it)", inner, "compute"),
        linear_input("out_proj input (cast to the compute dtype)", inner, f"{p}.out_proj"),
    ]


#: full-size [b, I, s, N] fp32 gradients alive at once in the stepped scan's backward: each
#: step's ``discrete_A[:, :, i]`` and ``deltaB_u[:, :, i]`` select backward writes a zero tensor
#: of the whole input with one slice filled, added into the buffer of the gradient so far (one
#: buffer and one new tensor each: traced, four [2, 1376, 256, 16] fp32 temporaries at the peak)
SCAN_BACKWARD_FULL_TENSORS = 4


def scan_backward_bytes_per_token(spec: ModelSpec) -> float:
    """Bytes per token that one Mamba-1 layer's backward holds beyond its saved tensors (the
    torch path's select gradients), fp32 whatever the compute dtype; 0 without a Mamba-1 layer."""
    if not spec.mamba1_layers:
        return 0.0
    return SCAN_BACKWARD_FULL_TENSORS * spec.ssm_inner * spec.ssm_state * 4.0
