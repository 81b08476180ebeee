"""The early stop of non-reentrant checkpointing, traced on Hugging Face layers (random weights,
tiny configs, CPU): the matmuls each backward runs, counted at the aten level, against the count
constraints/recompute.py implies. An independent check of which projection the replay skips."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.heavy


def _backward_matmuls(model, reentrant: bool | None) -> int:
    """aten mm / addmm calls of one backward (linears; eager attention's bmm left out)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
                Count.n += 1
            return func(*args, **(kwargs or {}))

    model.train()
    if reentrant is not None:
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": reentrant}
        )
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    loss = model(input_ids=ids, labels=ids).loss
    with Count():
        loss.backward()
    return Count.n


def _tiny(model_type: str, **extra):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        model_type,
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        **extra,
    )
    cfg._attn_implementation = "eager"
    return lambda: AutoModelForCausalLM.from_config(cfg)


def test_llama_replay_skips_down_proj() -> None:
    """7 linears per layer + the head, each dgrad + wgrad: 30 backward matmuls; the replay adds
    6 per layer (not down_proj) non-reentrant, 7 reentrant; never the head."""
    build = _tiny("llama")
    assert _backward_matmuls(build(), None) == 2 * (7 * 2 + 1)
    assert _backward_matmuls(build(), False) == 30 + 6 * 2
    assert _backward_matmuls(build(), True) == 30 + 7 * 2


def test_gpt2_dropout_keeps_c_proj_in_the_replay() -> None:
    """GPT-2 with resid_pdrop 0.1: the dropout after c_proj saves its mask, so the replay runs
    all 4 linears of each layer (Conv1D: addmm)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    def build():
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=32)
        cfg._attn_implementation = "eager"
        return GPT2LMHeadModel(cfg)

    unchecked = _backward_matmuls(build(), None)
    assert unchecked == 2 * (4 * 2 + 1)
    assert _backward_matmuls(build(), False) == unchecked + 4 * 2
