"""Each family's parameter inventory, tensor by tensor, as its Hugging Face class builds it."""

from __future__ import annotations

import dataclasses
from functools import cache

from constraints import gated_deltanet, mamba2
from constraints.family_modules import family_module
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.param_mlp import fused_shared_mlp, gated_mlp, up_down_mlp


def _dsa_indexer(spec: ModelSpec, block: str) -> list[ParamGroup]:
    """DeepSeek Sparse Attention's indexer (``self_attn.indexer``): wq_b from the q latent, wk
    and weights_proj from the layer input (nn.Linears, which PEFT's all-linear adapts though the
    indexer runs under no_grad), k_norm a LayerNorm with a bias."""
    if not spec.index_heads:
        return []
    h, heads, d, p = spec.hidden, spec.index_heads, spec.index_head_dim, "self_attn.indexer"
    linears = [
        *_linear(f"{p}.wq_b", "wq_b", spec.q_lora_rank, heads * d, block=block, role="attention"),
        *_linear(f"{p}.wk", "wk", h, d, block=block, role="attention"),
        *_linear(f"{p}.weights_proj", "weights_proj", h, heads, block=block, role="attention"),
    ]
    return [
        *(dataclasses.replace(g, recorded=False) for g in linears),
        ParamGroup(f"{p}.k_norm", "norm", 2 * d, 1, block, "", "norm"),
    ]


def _llama_attention(spec: ModelSpec, block: str) -> list[ParamGroup]:
    h = spec.hidden
    g: list[ParamGroup] = []
    if spec.is_mla:
        q_out = spec.heads * (spec.qk_nope_head_dim + spec.qk_rope_head_dim)
        if spec.q_lora_rank:
            g += _linear(
                "self_attn.q_a_proj",
                "q_a_proj",
                h,
                spec.q_lora_rank,
                block=block,
                role="attention",
                bias=spec.qkv_bias,
            )
            g += [
                ParamGroup(
                    "self_attn.q_a_layernorm", "norm", spec.q_lora_rank, 1, block, "", "norm"
                )
            ]
            g += _linear(
                "self_attn.q_b_proj",
                "q_b_proj",
                spec.q_lora_rank,
                q_out,
                block=block,
                role="attention",
            )
        else:
            g += _linear("self_attn.q_proj", "q_proj", h, q_out, block=block, role="attention")
        g += _linear(
            "self_attn.kv_a_proj_with_mqa",
            "kv_a_proj_with_mqa",
            h,
            spec.kv_lora_rank + spec.qk_rope_head_dim,
            block=block,
            role="attention",
            bias=spec.qkv_bias,
        )
        g += [
            ParamGroup("self_attn.kv_a_layernorm", "norm", spec.kv_lora_rank, 1, block, "", "norm")
        ]
        g += _linear(
            "self_attn.kv_b_proj",
            "kv_b_proj",
            spec.kv_lora_rank,
            spec.heads * (spec.qk_nope_head_dim + spec.v_head_dim),
            block=block,
            role="attention",
        )
        g += _linear(
            "self_attn.o_proj",
            "o_proj",
            spec.heads * spec.v_head_dim,
            h,
            block=block,
            role="attention",
            bias=spec.o_bias,
        )
        return g + _dsa_indexer(spec, block)
    q, kv = spec.q_width, spec.kv_width
    if spec.fused_qkv:
        g += _linear(
            "self_attn.qkv_proj",
            "qkv_proj",
            h,
            q + 2 * kv,
            block=block,
            role="attention",
            bias=spec.qkv_bias,
        )
    else:
        q_out = 2 * q if spec.attn_output_gate else q
        g += _linear(
            "self_attn.q_proj",
            "q_proj",
            h,
            q_out,
            block=block,
            role="attention",
            bias=spec.qkv_bias,
        )
        g += _linear(
            "self_attn.k_proj", "k_proj", h, kv, block=block, role="attention", bias=spec.qkv_bias
        )
        g += _linear(
            "self_attn.v_proj", "v_proj", h, kv, block=block, role="attention", bias=spec.qkv_bias
        )
    g += _linear(
        "self_attn.o_proj", "o_proj", q, h, block=block, role="attention", bias=spec.o_bias
    )
    if spec.attn_sinks:
        g.append(ParamGroup("self_attn.sinks", "other", spec.heads, 1, block, "", "attention"))
    if spec.qk_norm == "head":
        g += [
            ParamGroup("self_attn.q_norm", "norm", spec.head_dim, 1, block, "", "norm"),
            ParamGroup("self_attn.k_norm", "norm", spec.head_dim, 1, block, "", "norm"),
        ]
    elif spec.qk_norm == "full":
        g += [
            ParamGroup("self_attn.q_norm", "norm", q, 1, block, "", "norm"),
            ParamGroup("self_attn.k_norm", "norm", kv, 1, block, "", "norm"),
        ]
    return g


def _llama_like(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    blocks: dict[str, int] = {}
    groups: list[ParamGroup] = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * h, role="embedding")
    ]
    kinds = [spec.layer_block(i) for i in range(spec.layers)]
    for block in ("dense", "moe", "linear-dense", "linear-moe", "mamba-dense", "mamba-moe"):
        n = kinds.count(block)
        if not n:
            continue
        blocks[block] = n
        if block.startswith("linear"):
            groups += gated_deltanet.param_groups(spec, block)
        elif block.startswith("mamba"):
            groups += mamba2.param_groups(spec, block)
        else:
            groups += _llama_attention(spec, block)
        groups += _norm("layer_norms", spec, h, block, per_block=spec.norms_per_layer)
        if not block.endswith("moe"):
            groups += (
                gated_mlp(spec, "mlp", spec.intermediate, block, "mlp")
                if spec.gated_mlp
                else up_down_mlp(spec, block)
            )
            continue
        e, inter = spec.num_experts, spec.moe_intermediate
        if not spec.router_linear:
            # DeepseekV3TopkRouter / GptOssTopKRouter: the weight is a Parameter, not an
            # nn.Linear (DeepSeek's e_score_correction_bias is a buffer: not counted)
            groups.append(
                ParamGroup("mlp.gate.weight", "router", e * h, 1, block, "gate", "router")
            )
        else:
            groups.append(
                ParamGroup("mlp.gate.weight", "router", e * h, 1, block, "gate", "router", h, e)
            )
        if spec.router_bias_param:
            groups.append(ParamGroup("mlp.router.bias", "bias", e, 1, block, "gate", "router"))
        if spec.router_correction_param:
            groups.append(
                ParamGroup(
                    "mlp.gate.moe_statics.e_score_correction_bias",
                    "other",
                    e,
                    1,
                    block,
                    "moe_statics",
                    "other",
                )
            )
        names = (
            ("w1", "w3", "w2")
            if spec.family == "mixtral"
            else ("gate_proj", "up_proj", "down_proj")
        )
        groups += gated_mlp(spec, "mlp.experts", inter, block, "expert", per_block=e, names=names)
        if spec.shared_experts and spec.shared_expert_fused:
            groups += fused_shared_mlp(spec, block)
        elif spec.shared_experts:
            groups += gated_mlp(
                spec, "mlp.shared_experts", spec.shared_expert_intermediate, block, "shared_expert"
            )
        if spec.shared_expert_gate:
            groups += _linear(
                "mlp.shared_expert_gate", "shared_expert_gate", h, 1, block=block, role="router"
            )
        if spec.moe_post_norm:
            groups += _norm("mlp.post_mlp_layernorm", spec, h, block)
    if spec.final_norm:
        groups += _norm("norm", spec, h, "")
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), blocks)


def _gpt2(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("wte", "embedding", spec.vocab * h, role="embedding"),
        ParamGroup("wpe", "position", spec.learned_positions * h, role="embedding"),
        *_norm("ln_1/ln_2", spec, h, b, per_block=2),
        # one fused q/k/v projection: q hidden wide, k and v one head wide under GPT-BigCode's
        # multi-query attention
        *_linear(
            "attn.c_attn", "c_attn", h, h + 2 * spec.kv_width, block=b, role="attention", bias=True
        ),
        *_linear("attn.c_proj", "c_proj", h, h, block=b, role="attention", bias=True),
        *_linear("mlp.c_fc", "c_fc", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.c_proj", "c_proj", i, h, block=b, role="mlp", bias=True),
        *_norm("ln_f", spec, h, ""),
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def _opt(spec: ModelSpec) -> ParamInventory:
    h, i, b, bias = spec.hidden, spec.intermediate, "dense", spec.qkv_bias
    emb_dim = spec.embed_proj_dim or h
    groups = [
        ParamGroup("embed_tokens", "embedding", spec.vocab * emb_dim, role="embedding"),
        ParamGroup("embed_positions", "position", spec.learned_positions * h, role="embedding"),
    ]
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        groups += _linear(f"self_attn.{name}", name, h, h, block=b, role="attention", bias=bias)
    groups += _linear("fc1", "fc1", h, i, block=b, role="mlp", bias=spec.mlp_bias)
    groups += _linear("fc2", "fc2", i, h, block=b, role="mlp", bias=spec.mlp_bias)
    groups += _norm("self_attn_layer_norm/final_layer_norm", spec, h, b, per_block=2)
    if spec.final_norm:
        groups += _norm("decoder.final_layer_norm", spec, h, "")
    if spec.embed_proj_dim:
        groups += _linear("project_in", "project_in", emb_dim, h, block="", role="other")
        groups += _linear("project_out", "project_out", h, emb_dim, block="", role="other")
    if not spec.tie_embeddings:
        groups.append(
            ParamGroup(
                "lm_head",
                "lm_head",
                spec.vocab * emb_dim,
                role="head",
                d_in=emb_dim,
                d_out=spec.vocab,
            )
        )
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def _falcon(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    qkv_out = (spec.heads + 2 * spec.kv_heads) * spec.head_dim
    norms = spec.norms_per_layer if spec.parallel_attn else 2
    groups = [
        ParamGroup("word_embeddings", "embedding", spec.vocab * h, role="embedding"),
        *_linear(
            "self_attention.query_key_value",
            "query_key_value",
            h,
            qkv_out,
            block=b,
            role="attention",
            bias=spec.qkv_bias,
        ),
        *_linear(
            "self_attention.dense", "dense", h, h, block=b, role="attention", bias=spec.o_bias
        ),
        *_linear(
            "mlp.dense_h_to_4h", "dense_h_to_4h", h, i, block=b, role="mlp", bias=spec.mlp_bias
        ),
        *_linear(
            "mlp.dense_4h_to_h", "dense_4h_to_h", i, h, block=b, role="mlp", bias=spec.mlp_bias
        ),
        *_norm("input_layernorm", spec, h, b, per_block=norms),
        *_norm("ln_f", spec, h, ""),
    ]
    groups += untied_head(spec)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def _t5_ff(spec: ModelSpec, block: str) -> list[ParamGroup]:
    h, f = spec.hidden, spec.intermediate
    if spec.gated_mlp:
        return (
            _linear("DenseReluDense.wi_0", "wi_0", h, f, block=block, role="mlp")
            + _linear("DenseReluDense.wi_1", "wi_1", h, f, block=block, role="mlp")
            + _linear("DenseReluDense.wo", "wo", f, h, block=block, role="mlp")
        )
    return _linear("DenseReluDense.wi", "wi", h, f, block=block, role="mlp") + _linear(
        "DenseReluDense.wo", "wo", f, h, block=block, role="mlp"
    )


def _t5_attention(spec: ModelSpec, prefix: str, block: str) -> list[ParamGroup]:
    h, inner = spec.hidden, spec.heads * spec.head_dim
    g: list[ParamGroup] = []
    for name in ("q", "k", "v"):
        g += _linear(f"{prefix}.{name}", name, h, inner, block=block, role="attention")
    g += _linear(f"{prefix}.o", "o", inner, h, block=block, role="attention")
    return g


def _t5(spec: ModelSpec) -> ParamInventory:
    h = spec.hidden
    rel = spec.relative_attention_buckets * spec.heads
    groups = [
        ParamGroup("shared", "embedding", spec.vocab * h, role="embedding"),
        ParamGroup("encoder.relative_attention_bias", "position", rel, role="embedding"),
        ParamGroup("decoder.relative_attention_bias", "position", rel, role="embedding"),
        *_t5_attention(spec, "SelfAttention", "encoder"),
        *_t5_ff(spec, "encoder"),
        *_norm("encoder layer_norms", spec, h, "encoder", per_block=2),
        *_t5_attention(spec, "SelfAttention", "decoder"),
        *_t5_attention(spec, "EncDecAttention", "decoder"),
        *_t5_ff(spec, "decoder"),
        *_norm("decoder layer_norms", spec, h, "decoder", per_block=3),
        *_norm("final_layer_norm (encoder, decoder)", spec, h, "", per_block=2),
    ]
    groups += untied_head(spec)
    return ParamInventory(
        spec.id, tuple(groups), {"encoder": spec.encoder_layers, "decoder": spec.layers}
    )


def _bert(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("word_embeddings", "embedding", spec.vocab * h, role="embedding"),
        ParamGroup("position_embeddings", "position", spec.learned_positions * h, role="embedding"),
        ParamGroup("token_type_embeddings", "position", spec.token_types * h, role="embedding"),
        *_norm("embeddings.LayerNorm", spec, h, ""),
        *_linear("attention.self.query", "query", h, h, block=b, role="attention", bias=True),
        *_linear("attention.self.key", "key", h, h, block=b, role="attention", bias=True),
        *_linear("attention.self.value", "value", h, h, block=b, role="attention", bias=True),
        *_linear("attention.output.dense", "dense", h, h, block=b, role="attention", bias=True),
        *_linear("intermediate.dense", "dense", h, i, block=b, role="mlp", bias=True),
        *_linear("output.dense", "dense", i, h, block=b, role="mlp", bias=True),
        *_norm("attention.output.LayerNorm/output.LayerNorm", spec, h, b, per_block=2),
    ]
    if spec.pooler:
        groups += _linear("pooler.dense", "dense", h, h, block="", role="other", bias=True)
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def _raw(spec: ModelSpec) -> ParamInventory:
    assert spec.raw_params is not None
    group = ParamGroup("all parameters (raw)", "linear", spec.raw_params, 1, "", "all", "other")
    return ParamInventory(spec.id, (group,), {})


@cache
def inventory(spec: ModelSpec) -> ParamInventory:
    """Every parameter tensor of ``spec``. Cached: specs are frozen and hashable."""
    if spec.arch == "raw":
        return _raw(spec)
    if spec.family == "gpt2":
        return _gpt2(spec)
    if spec.family == "opt":
        return _opt(spec)
    if spec.family == "falcon":
        return _falcon(spec)
    module = family_module(spec.family)
    if module is not None:
        return module.inventory(spec)
    if spec.family in ("t5", "mt5"):
        return _t5(spec)
    if spec.family == "bert":
        return _bert(spec)
    return _llama_like(spec)


def total_params(spec: ModelSpec) -> int:
    if spec.raw_params is not None:
        return spec.raw_params
    return inventory(spec).total
