"""Each family's layer as the list of tensors its Hugging Face implementation saves for backward.

One :class:`~constraints.saved_tensors.Saved` per line, with its width in elements per token and its
dtype kind, following Korthikanti et al. (2022); :func:`layer_saved` picks a family's list.
"""

from __future__ import annotations

from constraints import gated_deltanet, mamba2
from constraints.family_modules import family_module
from constraints.model_spec import ModelSpec
from constraints.saved_moe import routed_experts
from constraints.saved_tensors import (
    Saved,
    _attention_core,
    _gated_mlp,
    _norm,
    _plain_mlp,
    in_parallel_branch,
    norm_output_read_by,
)


def _llama_layer(spec: ModelSpec, moe: bool, mixer: str = "") -> list[Saved]:
    h, q, kv = spec.hidden, spec.q_width, spec.kv_width
    s: list[Saved] = []
    if not spec.post_norm:
        s += _norm(spec, "input_layernorm", h)
    if mixer == "linear":
        s += gated_deltanet.mixer_saved(spec)
    elif mixer == "mamba":
        s += mamba2.mixer_saved(spec)
    elif spec.is_mla:
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
        if spec.attn_output_gate:
            # Qwen3_5Attention: o_proj(attn · sigmoid(gate)), the gate the q_proj's other half
            s += _output_gate(q)
    if spec.hidden_dropout > 0:  # Starcoder2: dropout(o_proj(...), residual_dropout)
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    if spec.post_norm:
        s += _norm(spec, "post_attention_layernorm", h)
    if spec.norms_per_layer == 4:  # Gemma 2 / 3: norms after attention and around the MLP
        s += _norm(spec, "post_attention_layernorm", h) + _norm(
            spec, "pre_feedforward_layernorm", h
        )
    elif not spec.post_norm:
        s += _norm(spec, "post_attention_layernorm", h)
    if not moe and not spec.gated_mlp:
        fc_in, fc_out = f"mlp.{spec.mlp_up}", f"mlp.{spec.mlp_down}"
        s.append(
            Saved(
                "up projection input (normed hidden)",
                h,
                "compute",
                inputs_of=(fc_in,),
                tp_split=False,
            )
        )
        s += _plain_mlp(spec, fc_in, fc_out, spec.intermediate)
    elif not moe:
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
        k, e = spec.experts_run_per_token, spec.num_experts
        s.append(
            Saved(
                "router / shared-expert input (normed hidden)",
                h,
                "compute",
                inputs_of=(
                    "mlp.gate",
                    "mlp.shared_experts.gate_proj",
                    "mlp.shared_experts.up_proj",
                    "mlp.shared_experts.gate_up_proj",
                ),
                tp_split=False,
            )
        )
        if spec.router_fp32_input:
            # DeepseekV3TopkRouter: F.linear(hidden.type(torch.float32), weight.type(float32)),
            # which keeps its fp32 input only for the weight's gradient (the router trains: full
            # fine-tuning, or PEFT's adapter folded into it)
            s.append(
                Saved(
                    "router input upcast to fp32",
                    h,
                    "fp32",
                    inputs_of=("mlp.gate",),
                    tp_split=False,
                )
            )
        s.append(Saved("router probabilities (fp32 softmax / sigmoid)", e, "fp32", tp_split=False))
        experts_in = (
            ("mlp.experts.w1", "mlp.experts.w3")
            if spec.family == "mixtral"
            else ("mlp.experts.gate_proj", "mlp.experts.up_proj")
        )
        s += routed_experts(spec, "mlp.experts", spec.moe_intermediate, k, experts_in)
        if spec.shared_experts:
            s += _gated_mlp(spec, "mlp.shared_experts", spec.shared_expert_intermediate)
        if spec.moe_post_norm:
            s += _norm(spec, "mlp.post_mlp_layernorm", h)
    if spec.hidden_dropout > 0:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    if spec.post_norm or spec.norms_per_layer == 4:
        s += _norm(spec, "post_feedforward_layernorm", h)
    return s


def _gpt2_layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    drop = spec.hidden_dropout > 0
    s = _norm(spec, "ln_1", h)
    s.append(norm_output_read_by("attn.c_attn", "ln_1", h))
    kv = spec.kv_width  # GPT-BigCode's multi-query k and v: one head wide
    s += _attention_core(spec, h, kv, kv, "attn.c_proj", qkv_storage=h + 2 * kv)
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += _norm(spec, "ln_2", h)
    s.append(norm_output_read_by("mlp.c_fc", "ln_2", h))
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
    # transformers (modeling_falcon.py, 5.25) splits the fused projection into views (split /
    # unbind): q and k are rotated into new tensors, v stays a view of the fused output; the
    # eager path is Llama's eager_attention_forward (repeat_kv, fp32 softmax cast back)
    s += _attention_core(spec, q, kv, kv, "self_attention.dense", v_view_of=q + 2 * kv)
    mlp = _plain_mlp(spec, "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", i)
    return s + (in_parallel_branch(mlp, "mlp.dense_h_to_4h") if spec.parallel_attn else mlp)


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
    module = family_module(spec.family)
    if module is not None:
        block_layer = getattr(module, "block_layer", None)
        return block_layer(spec, block) if block_layer else module.layer(spec)
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
    mixer = block.rsplit("-", 1)[0] if "-" in block else ""
    return _llama_layer(spec, moe=block.endswith("moe"), mixer=mixer)


def _output_gate(q: int) -> list[Saved]:
    """``attn_output * torch.sigmoid(gate)`` before o_proj: sigmoid keeps its output, the
    multiply both of its inputs (the attention output made contiguous, and that output)."""
    return [
        Saved("output gate: sigmoid output", q, "compute"),
        Saved("output gate: attention output (gate multiply input)", q, "compute"),
    ]


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
    if (spec.family in ("gpt2", "bert") and spec.hidden_dropout > 0) or spec.embedding_dropout > 0:
        s.append(Saved("embedding dropout mask", h, "mask", tp_split=False))
    if spec.family == "bert":
        s += _norm(spec, "embeddings.LayerNorm", h)
        return s
    module = family_module(spec.family)
    s += getattr(module, "model_saved", lambda spec: [])(spec)
    if spec.final_norm:
        # a family whose norm keeps other tensors than the shared kinds names them (Cohere)
        saved_norm = getattr(module, "norm_saved", _norm)
        s += saved_norm(spec, "final norm", h)
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
