"""What a Gemma 3n layer saves for backward (constraints/gemma3n.py reads the config and counts
the parameters): AltUp's prediction and correction around Gemma's attention and GeGLU MLP on
the active stream, the LAuReL side path, the per-layer input's gated projection; and outside the
layers, the streams made from the embedding and merged at the end.
"""

from __future__ import annotations

from constraints.gemma4_layers import attention_saved, norm_saved, owns_kv
from constraints.model_spec import ModelSpec
from constraints.saved_tensors import Saved, _gated_mlp, linear_input

__all__ = ["block_layer", "model_saved", "norm_saved"]


def _router(spec: ModelSpec, step: str) -> list[Saved]:
    """``compute_router_modalities``: the weighted router norm, × a scale buffer, the
    ``modality_router`` Linear, tanh over its fp32 copy."""
    h, n = spec.hidden, spec.altup_streams
    return [
        *norm_saved(spec, f"altup router norm ({step})", h),
        linear_input(f"modality_router input ({step})", h, "altup.modality_router"),
        Saved(f"router tanh output, fp32 ({step})", n, "fp32", tp_split=False),
    ]


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    h, n, attn = spec.hidden, spec.altup_streams, "self_attn."
    projections = ("q_proj", "k_proj", "v_proj") if owns_kv(block) else ("q_proj",)
    s = [
        *_router(spec, "predict"),
        # the predict router norm's .float() on the active stream: a fresh fp32 copy in 16-bit
        # training; the stream itself in fp32 training (the layer's input, which the prediction
        # matmul keeps); under autocast all the fp32 streams (the matmul keeps 16-bit copies)
        Saved(
            "router norm upcast: none where the streams are fp32", -h, "stream32", tp_split=False
        ),
        Saved(
            "the fp32 streams the router norm keeps under autocast",
            n * h,
            "autocast32",
            tp_split=False,
        ),
        linear_input("prediction_coefs input (modalities)", n, "altup.prediction_coefs"),
        Saved(
            "the streams and their coefficients (the prediction matmul)",
            n * h + n * n,
            "compute",
            tp_split=False,
        ),
        *norm_saved(spec, "input_layernorm", h),
        # where the streams are fp32 the norm's .float() is a no-op on the active stream, a
        # view of the predictions: it keeps all of them
        Saved(
            "the other predicted streams (fp32 streams only)",
            (n - 1) * h,
            "stream32",
            tp_split=False,
        ),
        linear_input(
            "q/k/v and laurel input (normed active stream)",
            h,
            *(attn + p for p in projections),
            "laurel.linear_left",
        ),
        linear_input("laurel.linear_right input", spec.laurel_rank, "laurel.linear_right"),
        *norm_saved(spec, "post_laurel_norm", h),
        *attention_saved(spec, block),
    ]
    s += norm_saved(spec, "post_attention_layernorm", h)
    s += norm_saved(spec, "pre_feedforward_layernorm", h)
    s.append(linear_input("gate/up projection input (normed)", h, "mlp.gate_proj", "mlp.up_proj"))
    if block.startswith("sparse"):
        s += [
            Saved("gate output (the Gaussian top-k's std reads it)", spec.intermediate, "compute"),
            Saved("std and mean per token", 2, "compute", tp_split=False),
        ]
    s += _gated_mlp(spec, "mlp", spec.intermediate)
    s += norm_saved(spec, "post_feedforward_layernorm", h)
    s += [
        *_router(spec, "correct"),
        linear_input("correction_coefs input (modalities)", n, "altup.correction_coefs"),
        # the activated stream minus the prediction: fp32 where the streams are (autocast)
        Saved("innovation repeated to every stream", n * h, "residual", tp_split=False),
        Saved("the correction coefficients", n, "compute", tp_split=False),
        Saved(
            "corrected active stream cloned (× correct_output_scale)",
            h,
            "residual",
            norm_weight=True,
            tp_split=False,
        ),
        linear_input("per_layer_input_gate input", h, "per_layer_input_gate"),
        Saved(
            "per-layer gate output (activation input)",
            spec.per_layer_input,
            "compute",
            tp_split=False,
        ),
        Saved(
            "per-layer activation output (× the per-layer input)",
            spec.per_layer_input,
            "compute",
            grad_through=("per_layer_model_projection",),
            tp_split=False,
        ),
        linear_input("per_layer_projection input", spec.per_layer_input, "per_layer_projection"),
        *norm_saved(spec, "post_per_layer_input_norm", h),
    ]
    return s


def model_saved(spec: ModelSpec) -> list[Saved]:
    """Outside the layers: the per-layer inputs (Gemma 4's); each extra stream projected from the
    embedding, cast to the embedding's dtype and rescaled to its magnitude (the pow keeps the
    cast, the divide the product: only where ``altup_projections`` trains or carries an
    adapter); at the end the active stream's magnitude and each stream projected back and
    rescaled the same way, then averaged. In the embedding's dtype: fp32 under autocast."""
    from constraints.gemma4_layers import model_saved as per_layer_inputs

    h, extra = spec.hidden, spec.altup_streams - 1
    return [
        *per_layer_inputs(spec),
        Saved(
            "each extra stream projected from the embedding and rescaled",
            2 * extra * h,
            "residual",
            grad_through=("altup_projections",),
            tp_split=False,
        ),
        Saved("the last layer's active stream (its magnitude)", h, "residual", tp_split=False),
        Saved("each stream projected back and rescaled", 2 * extra * h, "residual", tp_split=False),
    ]
