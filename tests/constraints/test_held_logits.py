"""The loss chain of torchtune's recipes of March-August 2024, counted from the source.

recipes/lora_finetune_single_device.py at fef3ed10d: the decoder returns ``self.output(h).float()``
(torchtune/modules/transformer.py), the loop runs ``logits = logits[..., :-1, :].contiguous()``,
``logits = logits.transpose(1, 2)``, ``loss = self._loss_fn(logits, labels)`` (nn.CrossEntropyLoss)
and ``loss.backward()`` with ``logits`` still referenced. At log_softmax's backward four fp32
tensors of tokens × vocabulary entries are alive: the loop's shifted logits, log_softmax's saved
output, nll_loss's gradient and log_softmax's own gradient: 16 bytes per entry. Without the loop's
reference (transformers' loss, torchtune from PR #1390) the first one is gone: 12 bytes.
"""

from __future__ import annotations

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.logits import logits_bytes
from constraints.models import resolve_model

TOKENS = 2 * 512
VOCAB = 32000  # Llama-2's vocabulary


def _bytes(loss: str) -> float:
    spec = resolve_model("llama-2-7b")
    cfg = TrainConfig(method="lora", lora_targets="q_proj,v_proj", micro_batch=2, seq_len=512)
    batch = ConfigBatch.from_configs([cfg.model_copy(update={"loss": loss})])
    return float(logits_bytes(spec, batch, ~batch.is_lora)[0])


def test_held_logits_chain_is_four_fp32_tensors() -> None:
    assert _bytes("standard-held") == TOKENS * VOCAB * 4 * 4


def test_without_the_loops_reference_three() -> None:
    assert _bytes("standard") == TOKENS * VOCAB * 4 * 3


def test_the_search_never_proposes_it() -> None:
    from searcher.search.space import DEFAULT_LOSSES

    assert "standard-held" not in DEFAULT_LOSSES
