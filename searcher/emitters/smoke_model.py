"""A shrunken copy of the plan's model for the CPU smoke test: the same type, layers and
sharding code, two layers and narrow widths, so that one step of the plan's micro-batch and
sequence runs in seconds on a CPU (a 7B model's step would take minutes and more memory than a
CPU box has). The GPU path never reads it: ``train.py`` builds from it only with
``--random-init`` and no CUDA, and says so in one line.

Every key is the config class's own name for the shape (transformers ``configuration_<type>.py``);
keys a config does not have are left alone, so a type this does not know keeps its full shape.
"""

from __future__ import annotations

from typing import Any

from constraints.gated_deltanet import DEFAULTS, FUSED_PROJECTIONS

#: the emitted file beside config.json
SMOKE_CONFIG_FILE = "config.smoke.json"
#: a model with fewer parameters is smoke-tested as it is
SHRINK_ABOVE_PARAMS = 20_000_000
LAYERS = 2
HEAD_DIM = 16
VOCAB = 2048
EXPERTS = 4

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads")
INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "intermediate_size_mlp")
PER_EXPERT_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "moe_k")
#: multi-head latent attention widths (DeepSeek-V2 / V3 and the types built like them)
MLA_KEYS = {
    "q_lora_rank": 32,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": HEAD_DIM,
    "qk_rope_head_dim": HEAD_DIM,
    "v_head_dim": HEAD_DIM,
}
#: gated DeltaNet widths (Qwen 3.5, Qwen3-Next): heads and head dims of its linear attention
LINEAR_HEAD_KEYS = ("linear_num_key_heads", "linear_num_value_heads")
LINEAR_DIM_KEYS = ("linear_key_head_dim", "linear_value_head_dim")
#: lists with one entry per layer: the copy keeps the first and the last layer's
PER_LAYER_LISTS = (
    "layer_types",
    "mlp_layer_types",
    "intermediate_size",
    "activation_sparsity_pattern",
)
#: Gemma 4 / 3n widths besides the heads': the global layers' head width, the per-layer
#: inputs, LAuReL's rank; and the per-layer inputs' vocabulary
NARROW_TO_HEAD_DIM = (
    "global_head_dim",
    "hidden_size_per_layer_input",
    "laurel_rank",
    # Jamba's time-step rank, Mamba's state
    "mamba_dt_rank",
    "state_size",
)
#: token ids a config names, which must stay inside the shrunken vocabulary
TOKEN_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


def _first(cfg: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if isinstance(cfg.get(k), int) and cfg[k] > 0), None)


def shrunken_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The small copy and what was changed, one phrase per substitution."""
    out = dict(cfg)
    said: list[str] = []

    def put(key: str, value: Any, what: str) -> None:
        if out.get(key) != value:
            said.append(f"{what} {out.get(key)} -> {value}")
            out[key] = value

    layers_key = _first(cfg, LAYER_KEYS)
    if layers_key and cfg[layers_key] > LAYERS:
        put(layers_key, LAYERS, "layers")
        for key in PER_LAYER_LISTS:
            kinds = cfg.get(key)
            if isinstance(kinds, list) and len(kinds) >= LAYERS:
                out[key] = [kinds[0], kinds[-1]]  # a layer of each kind the ends hold
        overrides = cfg.get("per_layer_config")  # Gemma 4: the kept layers' own shapes
        if isinstance(overrides, dict):
            kept = {"0": 0, str(cfg[layers_key] - 1): 1}  # old index -> new
            out["per_layer_config"] = {
                str(kept[str(int(k))]): {**v, **({"head_dim": HEAD_DIM} if "head_dim" in v else {})}
                for k, v in overrides.items()
                if str(k).isdigit() and str(int(k)) in kept and isinstance(v, dict)
            }
        if isinstance(cfg.get("num_kv_shared_layers"), int):  # two layers compute their own K/V
            out["num_kv_shared_layers"] = 0
        if isinstance(cfg.get("num_decoder_layers"), int):  # T5's decoder stack
            out["num_decoder_layers"] = min(cfg["num_decoder_layers"], LAYERS)
        for key in ("first_k_dense_replace", "num_dense_layers"):  # DeepSeek's, LFM2-MoE's
            if isinstance(cfg.get(key), int):
                out[key] = min(cfg[key], 1)
        if isinstance(cfg.get("moe_layer_start_index"), int):
            out["moe_layer_start_index"] = min(cfg["moe_layer_start_index"], 1)
        if isinstance(cfg.get("max_window_layers"), int):
            out["max_window_layers"] = min(cfg["max_window_layers"], 1)
        if isinstance(cfg.get("moe_layer_end_index"), int) and cfg["moe_layer_end_index"] >= 0:
            out["moe_layer_end_index"] = LAYERS - 1
        if isinstance(cfg.get("attn_layer_period"), int):  # Jamba: a Mamba and an attention layer
            out["attn_layer_period"], out["attn_layer_offset"] = LAYERS, LAYERS - 1
        idxs = cfg.get("full_attn_idxs")  # LFM2: the attention layers' indices
        if isinstance(idxs, list):
            ends = (0, cfg[layers_key] - 1)
            out["full_attn_idxs"] = [i for i, layer in enumerate(ends) if layer in idxs]
    heads_key, hidden_key = _first(cfg, HEAD_KEYS), _first(cfg, HIDDEN_KEYS)
    if heads_key and hidden_key:
        hidden = min(cfg[hidden_key], cfg[heads_key] * HEAD_DIM)
        put(hidden_key, hidden, "hidden")
        if isinstance(cfg.get("head_dim"), int):
            put("head_dim", HEAD_DIM, "head_dim")
        for key in INTERMEDIATE_KEYS:
            width = out.get(key)
            if isinstance(width, int) and width > 2 * hidden:
                put(key, 2 * hidden, key)
            elif isinstance(width, list):  # one per layer (Gemma 3n)
                put(key, [min(w, 2 * hidden) if isinstance(w, int) else w for w in width], key)
        for key in PER_EXPERT_KEYS:
            if isinstance(cfg.get(key), int) and cfg[key] > hidden:
                put(key, hidden, key)
        for key, value in MLA_KEYS.items():
            if isinstance(cfg.get(key), int) and cfg[key] > value:
                put(key, value, key)
        if isinstance(cfg.get("rotary_dim"), int):
            put("rotary_dim", min(cfg["rotary_dim"], HEAD_DIM), "rotary_dim")
        if str(cfg.get("model_type")) in FUSED_PROJECTIONS:
            # a width the config leaves out is its class's default: written out, then narrowed
            for key, value in DEFAULTS.items():
                if cfg.get(key) is None:
                    out[key] = value
        _narrow_linear_attention(out, put)
        _narrow_ssm_heads(out, put)
    _narrow_selective_scan(out, put)
    for key in NARROW_TO_HEAD_DIM:
        if isinstance(cfg.get(key), int) and cfg[key] > HEAD_DIM:
            put(key, HEAD_DIM, key)
    for key in EXPERT_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > EXPERTS:
            put(key, EXPERTS, "experts")
    for key in TOP_K_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > EXPERTS // 2:
            out[key] = EXPERTS // 2
    for key in ("n_group", "topk_group"):
        if isinstance(cfg.get(key), int):
            out[key] = 1
    if isinstance(cfg.get("vocab_size_per_layer_input"), int):
        out["vocab_size_per_layer_input"] = min(cfg["vocab_size_per_layer_input"], VOCAB)
    if isinstance(cfg.get("vocab_size"), int) and cfg["vocab_size"] > VOCAB:
        put("vocab_size", VOCAB, "vocabulary")
        for key in TOKEN_ID_KEYS:
            ids = cfg.get(key)
            if isinstance(ids, int) and ids >= VOCAB:
                out[key] = VOCAB - 1
            elif isinstance(ids, list):
                out[key] = [i if not isinstance(i, int) or i < VOCAB else VOCAB - 1 for i in ids]
    return out, said


def _narrow_linear_attention(cfg: dict[str, Any], put: Any) -> None:
    """A gated DeltaNet's heads and head dims narrowed (its torch path keeps fp32 chunk matrices
    per value head: a full-width copy takes minutes a step on a CPU), the value heads still a
    multiple of the key heads."""
    keys, values = (cfg.get(k) for k in LINEAR_HEAD_KEYS)
    if not (isinstance(keys, int) and isinstance(values, int) and keys > 0 and values > 0):
        return
    narrow_keys = min(keys, 2)
    narrow_values = min(values, 2 * narrow_keys)
    if narrow_values % narrow_keys:
        narrow_values = narrow_keys
    put("linear_num_key_heads", narrow_keys, "linear_num_key_heads")
    put("linear_num_value_heads", narrow_values, "linear_num_value_heads")
    for key in LINEAR_DIM_KEYS:
        if isinstance(cfg.get(key), int) and cfg[key] > HEAD_DIM:
            put(key, HEAD_DIM, key)


def _narrow_ssm_heads(cfg: dict[str, Any], put: Any) -> None:
    """Mamba-2's heads tile ``expand · hidden_size`` exactly (Mamba2Config
    ``validate_architecture``): a few heads of HEAD_DIM, the width they make, the groups
    dividing them."""
    heads, expand = cfg.get("num_heads"), cfg.get("expand")
    if cfg.get("model_type") != "mamba2" or not isinstance(heads, int) or heads <= 0:
        return
    if not isinstance(expand, int) or expand <= 0:
        return
    narrow = min(heads, 8 * expand)
    narrow -= narrow % expand
    put("num_heads", narrow, "num_heads")
    put("head_dim", HEAD_DIM, "head_dim")
    put("hidden_size", narrow * HEAD_DIM // expand, "hidden")
    groups = cfg.get("n_groups")
    if isinstance(groups, int) and groups > 0 and narrow % groups:
        put("n_groups", 1, "n_groups")


def _narrow_selective_scan(cfg: dict[str, Any], put: Any) -> None:
    """A Mamba-1 model (no heads to narrow by): the width of eight heads, the scan twice that
    (the saved ``intermediate_size`` overrides ``expand``), a small time-step rank."""
    hidden = cfg.get("hidden_size")
    if cfg.get("model_type") not in ("mamba", "falcon_mamba") or not isinstance(hidden, int):
        return
    narrow = min(hidden, 8 * HEAD_DIM)
    put("hidden_size", narrow, "hidden")
    if isinstance(cfg.get("intermediate_size"), int):
        put("intermediate_size", 2 * narrow, "intermediate_size")
    if isinstance(cfg.get("time_step_rank"), int) and cfg["time_step_rank"] > HEAD_DIM:
        put("time_step_rank", HEAD_DIM, "time_step_rank")


def smoke_config(cfg: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The shrunken config and its one-line note, where the model is large enough to need it and
    fitplan reads the copy as the same family; None otherwise (the smoke test builds the model
    itself)."""
    from constraints.errors import FitplanError
    from constraints.models import spec_from_hf_config
    from constraints.params import total_params

    try:
        spec = spec_from_hf_config(cfg, id="smoke")
        if total_params(spec) <= SHRINK_ABOVE_PARAMS:
            return None
        small, said = shrunken_config(cfg)
        shrunk = spec_from_hf_config(small, id="smoke")
    except (FitplanError, ValueError, TypeError):
        return None
    if shrunk.family != spec.family or not said:
        return None
    return (
        small,
        f"{', '.join(said)} ({total_params(shrunk):,} of {total_params(spec):,} parameters)",
    )
