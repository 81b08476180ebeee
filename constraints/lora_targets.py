"""LoRA targets: which linear weights a target list matches, as PEFT matches them."""

from __future__ import annotations

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
        ("llama", "mistral", "mixtral", "gemma", "gemma2", "gemma3_text", "qwen2", "qwen3", "opt"),
        ("q_proj", "v_proj"),
    ),
    "gpt2": ("c_attn",),
    "falcon": ("query_key_value",),
    "gpt_neox": ("query_key_value",),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
    "t5": ("q", "v"),
    "mt5": ("q", "v"),
    "bert": ("query", "value"),
}


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
    found = [n for n in names if n in modules]
    if not found:
        # PEFT raises only when no target matches; names that match nothing are ignored
        # (e.g. gate_proj on Mixtral, whose experts are w1/w2/w3)
        raise FitplanError(
            f"LoRA target(s) {', '.join(names)} match no module of {spec.name}",
            f"its linear modules are {', '.join(sorted(modules))}",
        )
    return [g for n in found for g in modules[n]]


def _targetable(spec: ModelSpec) -> dict[str, list[ParamGroup]]:
    """The linears PEFT can wrap, by leaf name: not the expert stacks it leaves alone
    (``peft_adapts_experts``) nor a router whose forward it cannot take (``router_adaptable``)."""
    out: dict[str, list[ParamGroup]] = {}
    for name, groups in inventory(spec).linear_modules().items():
        kept = [
            g
            for g in groups
            if (spec.peft_adapts_experts or g.role != "expert")
            and (spec.router_adaptable or g.role != "router")
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
    if key == "all-linear" and spec.router_adaptable:
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
