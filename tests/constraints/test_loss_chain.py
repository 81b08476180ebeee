"""The standard causal-LM loss by transformers release (constraints/logits.py loss_forward_bytes):
each release's loss code traced with fitplan's allocation tracker, bytes per token per vocabulary
entry at the forward's peak and over the whole step.

The installed transformers' own ``ForCausalLMLoss`` is traced as it is; the two older chains are
the released code, copied below with its source (Apache-2.0), because a test environment has one
transformers installed."""

from __future__ import annotations

import numpy as np
import pytest

from constraints import constants as C
from constraints.config import CODE
from constraints.logits import loss_forward_bytes
from searcher.search.stack_profile import HF, StackProfile, release

torch = pytest.importorskip("torch")

# a narrow head: the CPU matmul may copy the weight (HIDDEN × VOCAB), which cuBLAS does not
TOKENS_B, TOKENS_L, HIDDEN, VOCAB = 2, 128, 4, 32_000


def _loss_4_46_3(logits, labels, vocab_size):
    """transformers v4.46.3 src/transformers/loss/loss_utils.py ``ForCausalLMLoss`` (with
    ``fixed_cross_entropy``'s mean reduction)."""
    logits = logits.float()
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    shift_logits = shift_logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    shift_labels = shift_labels.to(shift_logits.device)
    return torch.nn.functional.cross_entropy(shift_logits, shift_labels, ignore_index=-100)


def _loss_4_45_2(logits, labels, vocab_size):
    """transformers v4.45.2 src/transformers/models/llama/modeling_llama.py
    ``LlamaForCausalLM.forward``: the model replaces its logits by their fp32 upcast, then the
    loss on the shifted copy."""
    logits = logits.float()
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    loss_fct = torch.nn.CrossEntropyLoss()
    shift_logits = shift_logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    shift_labels = shift_labels.to(shift_logits.device)
    return loss_fct(shift_logits, shift_labels)


def _installed_loss(logits, labels, vocab_size):
    from transformers.loss.loss_utils import ForCausalLMLoss

    return ForCausalLMLoss(logits, labels, vocab_size)


def _traced(loss_fn, dtype, model_upcasts: bool) -> tuple[float, float]:
    """(forward peak, step peak) of the logits and the loss, bytes per token per vocab entry."""
    from searcher.truth.alloc_tracker import make_tracker

    torch.manual_seed(0)
    head = torch.randn(VOCAB, HIDDEN, dtype=dtype)
    hidden = torch.randn(TOKENS_B, TOKENS_L, HIDDEN, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, VOCAB, (TOKENS_B, TOKENS_L))
    tracker = make_tracker()
    with tracker:
        logits = torch.nn.functional.linear(hidden, head)
        if model_upcasts:  # <= 4.45: the model's own ``logits = logits.float()``
            logits = logits.float()
        loss = loss_fn(logits, labels, VOCAB)
        forward = tracker.peak.bytes
        del logits  # the Trainer drops the model's outputs before the backward
        loss.backward()
    entries = TOKENS_B * TOKENS_L * VOCAB
    return forward / entries, tracker.peak.bytes / entries


CHAINS = [
    ("shifted-upcast", _loss_4_46_3, False),
    ("shifted-fp32-logits", _loss_4_45_2, True),
]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize(("chain", "loss_fn", "model_upcasts"), CHAINS)
def test_released_loss_chain_matches_the_model(chain, loss_fn, model_upcasts, dtype):
    torch_dtype = getattr(torch, dtype)
    forward, step = _traced(loss_fn, torch_dtype, model_upcasts)
    logits_bytes = np.array([torch_dtype.itemsize], dtype=np.float64)
    predicted = loss_forward_bytes(np.array([CODE["loss_chain"][chain]]), logits_bytes)[0]
    assert forward == pytest.approx(predicted, abs=0.25)
    assert step == pytest.approx(max(predicted, C.LOSS_BYTES_PER_VOCAB["standard"]), abs=0.25)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_installed_transformers_loss_matches_its_chain(dtype):
    pytest.importorskip("transformers")
    profile = StackProfile.resolve(HF)
    if "transformers" not in profile.installed:
        pytest.skip("transformers is not installed")
    torch_dtype = getattr(torch, dtype)
    forward, step = _traced(_installed_loss, torch_dtype, False)
    chain = np.array([CODE["loss_chain"][profile.loss_chain()]])
    predicted = loss_forward_bytes(chain, np.array([float(torch_dtype.itemsize)]))[0]
    assert forward == pytest.approx(predicted, abs=0.25)
    assert step == pytest.approx(max(predicted, C.LOSS_BYTES_PER_VOCAB["standard"]), abs=0.25)


@pytest.mark.parametrize(
    ("version", "chain"),
    [
        ("5.25.0", "padded-labels"),
        ("4.49.0", "padded-labels"),
        ("4.48.3", "shifted-upcast"),
        ("4.46.0.dev0", "shifted-upcast"),
        ("4.45.2", "shifted-fp32-logits"),
        ("4.36", "shifted-fp32-logits"),
    ],
)
def test_a_named_release_takes_its_loss_chain(version, chain):
    profile = StackProfile.resolve(HF, {"transformers": version})
    assert profile.loss_chain() == chain
    assert "named" in profile.describe()


def test_release_reads_major_and_minor():
    assert release("4.46.0.dev0") == (4, 46)
    assert release("5") == (5, 0)
    assert release("4.50rc1") == (4, 50)
