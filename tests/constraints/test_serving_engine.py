"""The KV arithmetic against a real engine's cache: transformers' DynamicCache and StaticCache
filled by a forward pass of a small model built from a config with random weights (vLLM does not
install on a CPU-only machine; its page size is the same 2 × heads × head_dim × bytes formula)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.heavy

CONFIGS = {
    "gqa": dict(num_key_value_heads=2, num_attention_heads=8, hidden_size=256, head_dim=32),
    "mha": dict(num_key_value_heads=4, num_attention_heads=4, hidden_size=256, head_dim=64),
}


def _model(kind: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        num_hidden_layers=3,
        intermediate_size=512,
        vocab_size=500,
        max_position_embeddings=256,
        **CONFIGS[kind],
    )
    torch.manual_seed(0)
    return cfg, LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def _cache_bytes(cache) -> int:
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


def _spec(cfg):
    from constraints.models import spec_from_hf_config

    return spec_from_hf_config(cfg.to_dict(), id="tiny")


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_dynamic_cache_bytes_match_the_kv_arithmetic(kind):
    import torch

    from constraints.serving import kv_bytes_per_token

    cfg, model = _model(kind)
    batch, tokens = 3, 40
    ids = torch.randint(0, cfg.vocab_size, (batch, tokens))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    got = _cache_bytes(out.past_key_values)
    assert got == kv_bytes_per_token(_spec(cfg), 2.0) * batch * tokens


def test_static_cache_holds_max_cache_len_per_sequence():
    import torch
    from transformers import StaticCache

    from constraints.serving import kv_bytes_per_token

    cfg, model = _model("gqa")
    batch, tokens, max_len = 2, 10, 96
    cache = StaticCache(config=cfg, max_cache_len=max_len)
    ids = torch.randint(0, cfg.vocab_size, (batch, tokens))
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, use_cache=True)
    # a static cache is preallocated: max_cache_len positions per sequence, used or not
    assert _cache_bytes(cache) == kv_bytes_per_token(_spec(cfg), 2.0) * batch * max_len
