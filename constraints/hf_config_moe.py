"""The MoE blocks of the Llama-like types' ``config.json``: the routed-expert count under its
names, DeepSeek-V3's block (GLM-4.5, EXAONE MoE), ERNIE 4.5's and Llama 4's.
"""

from __future__ import annotations

from typing import Any

from constraints.errors import FitplanError
from constraints.hf_config_fields import dense_prefix
from constraints.hf_config_fields import int_field as _int
from constraints.hf_config_fields import positive as _positive
from constraints.hf_config_traits import MLP_LAYER_TYPES
from constraints.limits import excerpt

#: the config.json keys each MoE family's routed-expert count is read from, the config class's own
#: field first, then the names its ``attribute_map`` aliases to it (transformers 5.24
#: configuration_<type>.py: Mixtral and Qwen3-MoE map num_experts -> num_local_experts, so
#: ``save_pretrained`` in 5.x writes num_local_experts where the Hub's Qwen3-MoE files say
#: num_experts; DeepSeek-V3 maps num_local_experts -> n_routed_experts; Qwen2-MoE has no alias)
EXPERT_KEYS = {
    "mixtral": ("num_local_experts", "num_experts"),
    "qwen3_moe": ("num_experts", "num_local_experts"),
    "qwen2_moe": ("num_experts",),
    "qwen3_next": ("num_experts",),
    "qwen3_5_moe_text": ("num_experts",),
    "deepseek_v3": ("n_routed_experts", "num_local_experts"),
    "deepseek_v2": ("n_routed_experts", "num_experts"),
    "glm4_moe": ("n_routed_experts", "num_local_experts"),
    "olmoe": ("num_experts", "num_local_experts"),
    "minimax_m2": ("num_local_experts", "num_experts"),
    "llama4_text": ("num_local_experts",),
    "gpt_oss": ("num_local_experts", "num_experts"),
    "ernie4_5_moe": ("moe_num_experts", "num_experts"),
    "flex_olmo": ("num_experts", "num_local_experts"),
    "granitemoe": ("num_local_experts",),
    "granitemoe_swa": ("num_local_experts",),
    "granitemoeshared": ("num_local_experts",),
    "exaone_moe": ("num_experts", "num_local_experts"),
    "phimoe": ("num_local_experts",),
}

#: the shared-expert count's key where it is not DeepSeek's ``n_shared_experts``
SHARED_EXPERT_KEY = {"exaone_moe": "num_shared_experts"}


def experts(cfg: dict[str, Any], model_type: str, where: str) -> int:
    """The routed-expert count under any of its family's names; two names that disagree are
    refused (transformers would keep whichever it set last)."""
    keys = EXPERT_KEYS[model_type]
    given = {k: cfg[k] for k in keys if cfg.get(k) is not None}
    values = list(given.values())
    if any(v != values[0] for v in values[1:]):
        shown = " and ".join(f"{k} {v}" for k, v in given.items())
        raise FitplanError(
            f"{where}: {shown} disagree", f"{model_type} reads them as one number: keep one"
        )
    return _int(cfg, *keys, where=where)


def deepseek_moe(
    cfg: dict[str, Any], kwargs: dict[str, Any], where: str, model_type: str, own_type: str = ""
) -> None:
    """DeepSeek-V3's MoE block (modeling_deepseek_v3.py ``DeepseekV3MoE``; GLM-4.5's
    ``Glm4MoeMoE`` is the same): routed experts beside ``n_shared_experts`` fused into one MLP,
    the first ``first_k_dense_replace`` layers dense, a router that is an fp32 Parameter fed
    the hidden states cast to fp32. DeepSeek-V2's router softmaxes where V3's sigmoids."""
    kwargs["router_linear"] = False
    kwargs["router_fp32_input"] = True
    kwargs["num_experts"] = experts(cfg, model_type, where)
    # DeepseekV2Config leaves num_experts_per_tok None (it cannot route); both published
    # DeepSeek-V2 configs (V2, V2-Lite) route to 6
    kwargs["experts_per_token"] = _int(
        cfg,
        "num_experts_per_tok",
        where=where,
        default=6 if model_type == "deepseek_v2" else None,
    )
    kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
    shared_key = SHARED_EXPERT_KEY.get(model_type, "n_shared_experts")
    kwargs["shared_experts"] = _int(cfg, shared_key, where=where, default=0)
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"] * kwargs["shared_experts"]
    # the config's own type: GLM-4.7-Flash is read as DeepSeek-V3 but lists its MLPs
    kinds = cfg.get("mlp_layer_types") if (own_type or model_type) in MLP_LAYER_TYPES else None
    kwargs["first_dense_layers"] = (
        _int(cfg, "first_k_dense_replace", where=where, default=0)
        if kinds is None
        else dense_prefix(kinds, cfg, where)
    )
    kwargs["moe_every"] = _int(cfg, "moe_layer_freq", where=where, default=1)


def ernie4_5_moe(cfg: dict[str, Any], kwargs: dict[str, Any], where: str) -> None:
    """ERNIE 4.5's MoE (modeling_ernie4_5_moe.py): routed experts moe_intermediate_size wide,
    ``moe_num_shared_experts`` fused into one MLP beside them, a router that is an fp32
    Parameter fed the hidden states cast to fp32 with a frozen per-expert score correction; MoE
    layers from ``moe_layer_start_index`` every ``moe_layer_interval`` to ``moe_layer_end_index``
    (-1: the last), dense MLPs elsewhere."""
    kwargs["num_experts"] = experts(cfg, "ernie4_5_moe", where)
    kwargs["experts_per_token"] = _int(cfg, "moe_k", "num_experts_per_tok", where=where)
    kwargs["moe_intermediate"] = _int(cfg, "moe_intermediate_size", where=where)
    kwargs["shared_experts"] = _int(cfg, "moe_num_shared_experts", where=where, default=0)
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"] * kwargs["shared_experts"]
    kwargs["first_dense_layers"] = _int(cfg, "moe_layer_start_index", where=where, default=0)
    kwargs["moe_every"] = _positive(
        "moe_layer_interval", _int(cfg, "moe_layer_interval", where=where, default=1), where
    )
    kwargs["router_linear"] = False
    kwargs["router_fp32_input"] = True
    kwargs["router_correction_param"] = True
    kwargs["attention_dropout"] = 0.0  # Ernie4_5_MoeAttention sets it to 0.0 whatever the config
    end = cfg.get("moe_layer_end_index")
    end = -1 if end is None else end
    if isinstance(end, bool) or not isinstance(end, int):
        raise FitplanError(f"{where}: moe_layer_end_index must be an integer, got {excerpt(end)}")
    if end != -1 and end < kwargs["layers"] - 1:
        raise FitplanError(
            f"{where}: moe_layer_end_index {end} leaves dense layers after the MoE ones",
            "fitplan models MoE layers through the last: pass raw numbers (--params …)",
        )


def llama4_text(cfg: dict[str, Any], kwargs: dict[str, Any], where: str) -> None:
    """Llama 4's text model (modeling_llama4.py): MoE layers every ``interleave_moe_layer_step``
    (routed experts intermediate_size wide, run on every token, a shared expert beside), the
    other layers a dense MLP intermediate_size_mlp wide; q/k norms without weights."""
    kwargs["intermediate"] = _int(cfg, "intermediate_size_mlp", where=where)
    kwargs["num_experts"] = experts(cfg, "llama4_text", where)
    kwargs["experts_per_token"] = _int(cfg, "num_experts_per_tok", where=where)
    kwargs["moe_intermediate"] = _int(cfg, "intermediate_size", where=where)
    kwargs["shared_experts"] = 1
    kwargs["shared_expert_intermediate"] = kwargs["moe_intermediate"]
    step = _int(cfg, "interleave_moe_layer_step", where=where, default=1)
    kwargs["moe_every"] = step
    kwargs["experts_see_all_tokens"] = True
    kwargs["peft_adapts_experts"] = False  # Llama4TextExperts' Parameters (PEFT 0.21.2, traced)
    kwargs["router_adaptable"] = False
    given = cfg.get("moe_layers")
    if given is not None and (
        not isinstance(given, list) or given != list(range(step - 1, kwargs["layers"], step))
    ):
        raise FitplanError(
            f"{where}: moe_layers {excerpt(given)} is not every {step}th layer",
            "fitplan models MoE layers at a fixed interleave: pass raw numbers (--params …)",
        )
