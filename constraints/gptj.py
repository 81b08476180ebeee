"""GPT-J (``model_type`` gptj: GPT-J-6B, its fine-tunes) and CodeGen (``codegen``: CodeGen
350M–16B) as transformers 5.25 builds them (modeling_gptj.py, modeling_codegen.py): the config
read, the parameters tensor by tensor, the tensors a layer saves. CodeGen is GPT-J's layer with
one fused ``attn.qkv_proj`` (its q, k and v are reshaped copies of strided views of it: the same
saved tensors as GPT-J's separate projections).

A layer: one ``ln_1`` (LayerNorm with bias) whose output feeds both the attention
(``attn.q_proj`` / ``k_proj`` / ``v_proj`` without bias, rotary on the first ``rotary_dim`` of
each head, SDPA, ``attn.out_proj`` without bias, dropout) and the MLP (``mlp.fc_in`` → GELU (tanh,
in python ops) → ``mlp.fc_out``, both with bias, dropout); both added to the layer's input. The
head is untied with a bias. Eager attention computes its scores in fp32 from fp32 copies of q and
k (``query.to(torch.float32)``), which its matmul keeps.
"""

from __future__ import annotations

from typing import Any

from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import per_head as _per_head
from constraints.hf_config_fields import positive as _positive
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamGroup, ParamInventory, _linear, _norm, untied_head
from constraints.saved_tensors import (
    Saved,
    _attention_core,
    _plain_mlp,
    fp32_scores_qk,
    in_parallel_branch,
)
from constraints.saved_tensors import _norm as _saved_norm

ATTENTION = ("attn.q_proj", "attn.k_proj", "attn.v_proj")
FUSED = ("attn.qkv_proj",)


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """GPTJConfig's fields (configuration_gptj.py defaults, GPT-J-6B's shapes, where absent)."""
    hidden = _positive(
        "n_embd", _int(cfg, "n_embd", "hidden_size", where=where, default=4096), where
    )
    heads = _positive(
        "n_head", _int(cfg, "n_head", "num_attention_heads", where=where, default=16), where
    )
    inner = cfg.get("n_inner")
    return ModelSpec(
        **common,
        family=model_type,
        hidden=hidden,
        layers=_positive(
            "n_layer", _int(cfg, "n_layer", "num_hidden_layers", where=where, default=28), where
        ),
        heads=heads,
        kv_heads=heads,
        head_dim=_per_head(hidden, heads, where),
        intermediate=_int(cfg, "n_inner", where=where) if inner else 4 * hidden,
        vocab=_positive("vocab_size", _int(cfg, "vocab_size", where=where, default=50400), where),
        max_position=_int(cfg, "n_positions", "max_position_embeddings", where=where, default=2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        mlp_bias=True,
        norm="layernorm",
        norms_per_layer=1,
        gated_mlp=False,
        activation=str(cfg.get("activation_function", "gelu_new")),
        parallel_attn=True,
        fused_qkv=model_type == "codegen",
        hidden_dropout=float(cfg.get("resid_pdrop", 0.0) or 0.0),
        embedding_dropout=float(cfg.get("embd_pdrop", 0.0) or 0.0),
        attention_dropout=float(cfg.get("attn_pdrop", 0.0) or 0.0),
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    h, i, b = spec.hidden, spec.intermediate, "dense"
    groups = [
        ParamGroup("wte", "embedding", spec.vocab * h, role="embedding"),
        *_norm("ln_1", spec, h, b),
        *(
            _linear("attn.qkv_proj", "qkv_proj", h, 3 * h, block=b, role="attention")
            if spec.fused_qkv
            else [
                *_linear("attn.q_proj", "q_proj", h, h, block=b, role="attention"),
                *_linear("attn.k_proj", "k_proj", h, h, block=b, role="attention"),
                *_linear("attn.v_proj", "v_proj", h, h, block=b, role="attention"),
            ]
        ),
        *_linear("attn.out_proj", "out_proj", h, h, block=b, role="attention"),
        *_linear("mlp.fc_in", "fc_in", h, i, block=b, role="mlp", bias=True),
        *_linear("mlp.fc_out", "fc_out", i, h, block=b, role="mlp", bias=True),
        *_norm("ln_f", spec, h, ""),
    ]
    groups += untied_head(spec)
    groups.append(ParamGroup("lm_head.bias", "bias", spec.vocab, 1, "", "lm_head", "head"))
    return ParamInventory(spec.id, tuple(groups), {b: spec.layers})


def layer(spec: ModelSpec) -> list[Saved]:
    h, i = spec.hidden, spec.intermediate
    drop = spec.hidden_dropout > 0
    s = _saved_norm(spec, "ln_1", h)
    s.append(
        Saved(
            "q/k/v and fc_in input (ln_1 output, shared)",
            h,
            "compute",
            inputs_of=(*(FUSED if spec.fused_qkv else ATTENTION), "mlp.fc_in"),
            tp_split=False,
        )
    )
    s += _attention_core(spec, h, h, h, "attn.out_proj")
    s.append(fp32_scores_qk(h, h))
    if drop:
        s.append(Saved("residual dropout mask (attention)", h, "mask", tp_split=False))
    s += in_parallel_branch(_plain_mlp(spec, "mlp.fc_in", "mlp.fc_out", i), "mlp.fc_in")
    if drop:
        s.append(Saved("residual dropout mask (MLP)", h, "mask", tp_split=False))
    return s
