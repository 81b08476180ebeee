"""PEFT ``target_modules`` given as one string is a regular expression, fully matched against
each module's qualified name (peft ``tuners/tuners_utils.py`` ``check_target_module_exists``:
``re.fullmatch(target_modules, key)``; LoraConfig's docstring: "When passing a string, a regex
match will be performed"). axolotl (``lora_target_modules``), TRL and a saved
adapter_config.json pass it through. fitplan names targets by their last component, so the
regex is resolved here against the linear layers' names in the usual HF module paths."""

from __future__ import annotations

import re

#: the last component of the linear layers in HF decoder models (Llama/Mistral/Qwen/Gemma
#: q_proj…down_proj; GPT-2 c_attn/c_proj/c_fc; Falcon/GPT-NeoX query_key_value/dense…; Phi fc1/fc2)
LINEAR_NAMES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "c_attn",
    "c_proj",
    "c_fc",
    "query_key_value",
    "dense",
    "dense_h_to_4h",
    "dense_4h_to_h",
    "fc1",
    "fc2",
    "out_proj",
    "Wqkv",
)
#: module paths a linear layer sits under: text models (model.layers.N.self_attn.q_proj), the
#: language model of a multimodal one (model.language_model.layers.N…), GPT-2/Falcon
#: (transformer.h.N.attn.c_attn); the parent is the attention or MLP block
PREFIXES = (
    "model.layers.0",
    "model.language_model.layers.0",
    "language_model.model.layers.0",
    "transformer.h.0",
    "gpt_neox.layers.0",
    "model.decoder.layers.0",
)
BLOCKS = ("self_attn", "mlp", "cross_attn", "attn", "attention", "self_attention", "feed_forward")
#: characters that make a target string a pattern rather than a module name
REGEX_CHARS = set("[]()|*+?\\^$")


def is_regex(text: str) -> bool:
    return any(c in REGEX_CHARS for c in text)


def regex_targets(pattern: str) -> list[str] | None:
    """The linear-layer names ``pattern`` fully matches under some usual path (None: the pattern
    does not compile)."""
    try:
        rx = re.compile(pattern)
    except re.error:
        return None
    found = []
    for name in LINEAR_NAMES:
        paths = [f"{p}.{b}.{name}" for p in PREFIXES for b in BLOCKS]
        if any(rx.fullmatch(path) for path in paths) or rx.fullmatch(name):
            found.append(name)
    return found
