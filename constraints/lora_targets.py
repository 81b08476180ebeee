"""LoRA targets: which linear weights a target list matches, as PEFT matches them."""

from __future__ import annotations

import dataclasses

from constraints.errors import FitplanError
from constraints.model_spec import ModelSpec
from constraints.param_families import inventory
from constraints.param_groups import ParamGroup

#: PEFT 0.21.2's default target_modules per model_type (peft/utils/constants.py
#: TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), for the types fitplan reads; a type it
#: lacks has none: ``LoraConfig()`` without target_modules raises "Please specify
#: `target_modules`" (tuners/lora/model.py ``_prepare_adapter_config``)
PEFT_DEFAULT_TARGETS = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "gemma",
            "gemma2",
            "gemma3_text",
            "qwen2",
            "qwen3",
            "opt",
            "stablelm",
        ),
        ("q_proj", "v_proj"),
    ),
    "gpt2": ("c_attn",),
    "gpt_bigcode": ("c_attn",),
    "gptj": ("q_proj", "v_proj"),
    "gpt_neo": ("q_proj", "v_proj"),
    "bloom": ("query_key_value",),
    "mpt": ("Wqkv",),
    "codegen": ("qkv_proj",),
    "falcon": ("query_key_value",),
    "gpt_neox": ("query_key_value",),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    "t5": ("q", "v"),
    "mt5": ("q", "v"),
    "bert": ("query", "value"),
}


#: transformers 5 keeps an MoE layer's experts as 3-D Parameters and its router as a module
#: holding a Parameter (no nn.Linear: modeling_<type>.py ``…Experts``, ``…TopKRouter``), so
#: all-linear reaches neither. For the types of transformers 5.25's ``_MODEL_TO_CONVERSION_PATTERN``
#: whose pattern has a ``_MOE_TARGET_MODULE_MAPPING`` (PEFT 0.21.2
#: utils/transformers_weight_conversion.py ``_convert_peft_config_moe``, which adds mixtral), PEFT
#: turns the transformers-4 names into parameter targets: all-linear becomes every Linear's leaf
#: name plus those names, and each of them then targets the expert stacks (``gate_up_proj``,
#: ``down_proj``) and the router (``gate.weight``) instead of any Linear so named — the dense
#: layers' and shared experts' MLPs go unadapted (traced: DeepSeek-V3, GLM-4.5, Qwen3-MoE,
#: Mixtral). Types outside it (Qwen2-MoE, gpt-oss, Llama 4) adapt no expert and no router.
PEFT_MOE_NAMES = {
    "mixtral": {"gate": "router", "w1": "gate_up", "w3": "gate_up", "w2": "down"},
    "qwen2_moe": {
        "gate": "router",
        "gate_proj": "gate_up",
        "up_proj": "gate_up",
        "down_proj": "down",
    },
}
PEFT_MOE_CONVERTED = {
    **dict.fromkeys(("mixtral", "minimax", "minimax_m2"), "mixtral"),
    **dict.fromkeys(
        (
            "afmoe",
            "beam",
            "cohere2_moe",
            "deepseek_v2",
            "deepseek_v3",
            "deepseek_v32",
            "dots1",
            "ernie4_5_moe",
            "exaone_moe",
            "flex_olmo",
            "glm4_moe",
            "glm4_moe_lite",
            "glm4v_moe",
            "glm_moe_dsa",
            "hunyuan_v1_moe",
            "longcat_flash",
            "mellum",
            "olmoe",
            "qwen3_moe",
            "qwen3_next",
            "qwen3_omni_moe",
            "qwen3_omni_moe_text",
            "qwen3_omni_moe_thinker",
            "sarvam_mla",
            "solar_open",
        ),
        "qwen2_moe",
    ),
}


def _moe_conversion(spec: ModelSpec) -> dict[str, str] | None:
    """The transformers-4 names PEFT moves to a fused-MoE model's parameters, by what they reach."""
    pattern = PEFT_MOE_CONVERTED.get(spec.config_type or spec.family)
    return PEFT_MOE_NAMES[pattern] if pattern and spec.num_experts else None


def _expert_part(g: ParamGroup) -> str:
    leaf = g.name.split(".")[-2]
    return "gate_up" if leaf in _EXPERT_GATE_UP else "down"


def _converted(
    spec: ModelSpec, names: tuple[str, ...], mapping: dict[str, str]
) -> list[ParamGroup]:
    """What PEFT adapts for target ``names`` on a converted fused-MoE type (:data:`PEFT_MOE_NAMES`)."""
    reached = {mapping[n] for n in names if n in mapping}
    # the Linears named other than the transformers-4 expert and router names
    out = [
        g
        for n, groups in _targetable(spec).items()
        if n in names and n not in mapping
        for g in groups
    ]
    for g in inventory(spec).groups:
        if g.role == "expert" and g.is_linear and _expert_part(g) in reached:
            out.append(g)
        elif g.role == "router" and g.module == "gate" and "router" in reached:
            # the router's weight as PEFT's ParamWrapper adapts it: (experts, hidden)
            out.append(dataclasses.replace(g, d_in=spec.hidden, d_out=spec.num_experts))
    return out


def lora_target_groups(spec: ModelSpec, targets: str) -> list[ParamGroup]:
    """The linear weights a LoRA target spec matches.

    ``all-linear`` is PEFT's: every Linear/Conv1D except the output head. ``attention`` is every
    attention projection. ``default`` is PEFT's per-family default. Otherwise a comma list of module
    leaf names, matched as PEFT matches them (``c_proj`` hits both GPT-2 projections).
    """
    modules = _targetable(spec)
    key = targets.strip().lower()
    if spec.arch == "raw":
        raise FitplanError(
            "LoRA targets need an architecture; with --params give --trainable-params instead"
        )
    mapping = _moe_conversion(spec)
    if key == "all-linear" and mapping:
        return _converted(spec, (*modules, *mapping), mapping)
    if key == "all-linear":
        return [g for groups in modules.values() for g in groups]
    if key == "attention":
        return [g for groups in modules.values() for g in groups if g.role == "attention"]
    if key == "default":
        peft_type = spec.config_type or spec.family  # PEFT reads the config's own model_type
        if peft_type not in PEFT_DEFAULT_TARGETS:
            raise FitplanError(
                f"PEFT has no default LoRA targets for model_type {peft_type} (its LoraConfig "
                "without target_modules raises)",
                "name them: --lora-targets all-linear, attention, or module names such as "
                f"{','.join(sorted(modules)[:2])}",
            )
        names = PEFT_DEFAULT_TARGETS[peft_type]
    else:
        names = tuple(n.strip() for n in targets.split(",") if n.strip())
    if not names:
        raise FitplanError(
            "--lora-targets is empty", "use all-linear, attention, or e.g. q_proj,v_proj"
        )
    if mapping and any(n in mapping for n in names):
        return _converted(spec, names, mapping)
    refused = sorted(set(names) & PEFT_MAMBA_REFUSED) if _peft_mamba(spec) else []
    if refused:
        raise FitplanError(
            f"PEFT refuses LoRA on {', '.join(refused)} of a {spec.config_type or spec.family} "
            "model (Mamba-based: _check_lora_target_modules_mamba)",
            "leave them out: e.g. --lora-targets all-linear, which fitplan writes without them",
        )
    found = [n for n in names if n in modules]
    if not found:
        # PEFT raises only when no target matches; names that match nothing are ignored
        # (e.g. gate_proj on Mixtral, whose experts are w1/w2/w3)
        raise FitplanError(
            f"LoRA target(s) {', '.join(names)} match no module of {spec.name}",
            f"its linear modules are {', '.join(sorted(modules))}",
        )
    return [g for n in found for g in modules[n]]


#: model types on which PEFT refuses LoRA on the Mamba mixer's out_proj and conv1d (peft 0.21.2
#: tuners/tuners_utils.py ``_check_lora_target_modules_mamba``: ValueError, all-linear included)
PEFT_MAMBA_TYPES = frozenset({"falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"})
PEFT_MAMBA_REFUSED = frozenset({"out_proj", "conv1d"})


def _peft_mamba(spec: ModelSpec) -> bool:
    return (spec.config_type or spec.family) in PEFT_MAMBA_TYPES


def _targetable(spec: ModelSpec) -> dict[str, list[ParamGroup]]:
    """The linears PEFT can wrap, by leaf name: not the expert stacks nor the routers of an MoE
    layer (transformers 5's are Parameters, not nn.Linear: :data:`PEFT_MOE_NAMES`), save a
    router that is an nn.Linear (Qwen2-MoE's ``shared_expert_gate``, Gemma 4's
    ``router.proj``); not what PEFT
    refuses on a Mamba-based type (:data:`PEFT_MAMBA_REFUSED`)."""
    out: dict[str, list[ParamGroup]] = {}
    for name, groups in inventory(spec).linear_modules().items():
        if name in PEFT_MAMBA_REFUSED and _peft_mamba(spec):
            continue
        kept = [
            g for g in groups if g.role != "expert" and (g.role != "router" or g.kind == "linear")
        ]
        if kept:
            out[name] = kept
    return out


def peft_target_modules(spec: ModelSpec, targets: str) -> str | list[str]:
    """PEFT ``target_modules`` for the linears fitplan counts: "all-linear" as is; the named sets
    (``attention``, ``default``) as the module names of :func:`lora_target_groups` (a leaf name,
    or the dotted suffix where the leaf alone would also match another layer, e.g. GPT-2's
    attn.c_proj vs mlp.c_proj); a user's list verbatim (PEFT matches it). What the emitted
    scripts and the step tracer hand to PEFT, so that both run the adapters counted."""
    key = targets.strip().lower()
    if key == "all-linear" and spec.router_adaptable and not _peft_mamba(spec):
        return "all-linear"
    if key not in ("all-linear", "attention", "default"):
        return [n.strip() for n in targets.split(",") if n.strip()]
    chosen = [g.name.removesuffix(".weight") for g in lora_target_groups(spec, key)]
    every = [
        g.name.removesuffix(".weight") for groups in _targetable(spec).values() for g in groups
    ]
    out: list[str] = []
    for path in dict.fromkeys(chosen):
        leaf = path.rsplit(".", 1)[-1]
        clash = any(p.rsplit(".", 1)[-1] == leaf and p not in chosen for p in every)
        out.append(path if clash else leaf)
    return list(dict.fromkeys(out))


def lora_params(spec: ModelSpec, rank: int, targets: str) -> int:
    """Trainable LoRA parameters: Σ over targeted linears of r·(d_in + d_out) (A: r×d_in, B: d_out×r)."""
    inv = inventory(spec)
    dims = sum((g.d_in + g.d_out) * inv.count(g) for g in lora_target_groups(spec, targets))
    return rank * (dims + fused_expert_lora_extra(spec, targets))


#: Expert gate / up projections: transformers ≥ 5 stores them fused, one (experts, 2·I, H)
#: ``gate_up_proj`` parameter per MoE layer (modeling_mixtral.py: MixtralExperts)
_EXPERT_GATE_UP = ("w1", "w3", "gate_proj", "up_proj")


def fused_expert_lora_extra(spec: ModelSpec, targets: str) -> int:
    """LoRA parameters per unit rank that PEFT's ``ParamWrapper`` adds on a fused expert stack
    beyond two separate gate / up adapters: transformers ≥ 5 keeps an MoE layer's experts as 3-D
    ``nn.Parameter`` stacks (``gate_up_proj`` (E, 2·I, H), ``down_proj`` (E, H, I)), which PEFT's
    all-linear targets as parameters; on ``gate_up_proj`` it builds lora_A (E·2r, H) and lora_B
    (2·I, E·2r) (traced, Mixtral-8x7B r = 64: lora_A (1024, 4096), lora_B (28672, 1024)), so each
    expert's B is 2·I × 2r where two adapters hold 2 × (I × r): 2·I more per unit rank per expert.
    """
    inv = inventory(spec)
    return sum(
        g.d_out * inv.count(g)
        for g in lora_target_groups(spec, targets)
        if g.role == "expert" and g.name.split(".")[-2] in _EXPERT_GATE_UP
    )
