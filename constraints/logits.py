"""Logits and loss: the vocabulary-sized tensors alive at the loss backward, bytes per GPU."""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.model_spec import ModelSpec
from constraints.model_states import model_facts


def logits_bytes(spec: ModelSpec, batch: ConfigBatch, full_ft: np.ndarray) -> np.ndarray:
    """Logits, their fp32 log-softmax and gradients at the loss peak, bytes per GPU (the chosen
    loss: standard, chunked or fused; plus the head's weight gradient under full fine-tuning)."""
    if spec.arch == "encoder" or spec.vocab <= 1:
        return np.zeros(len(batch))  # encoders are costed as classifiers: no vocabulary logits
    tokens = (batch.micro_batch * batch.seq_len).astype(np.float64)
    vocab = spec.vocab / batch.tp
    head_out_bytes = np.where(
        batch.kbit_prepared & ~batch.autocast, C.FP32_BYTES, batch.compute_bytes
    )
    standard_bytes = np.maximum(
        C.LOSS_BYTES_PER_VOCAB["standard"], loss_forward_bytes(batch.loss_chain, head_out_bytes)
    )
    per_vocab = np.select(
        [batch.loss == CODE["loss"][x] for x in ("standard", "chunked", "fused")],
        [standard_bytes, C.LOSS_BYTES_PER_VOCAB["chunked"], C.LOSS_BYTES_PER_VOCAB["fused"]],
        C.LOSS_BYTES_PER_VOCAB["standard"],
    )
    # "standard-held": the loop's own fp32 logits, alive from the loss forward to the end of the
    # head's backward (constants.LOSS_HELD_LOGITS_BYTES_PER_VOCAB)
    held = np.where(
        batch.loss == CODE["loss"]["standard-held"], C.LOSS_HELD_LOGITS_BYTES_PER_VOCAB, 0.0
    )
    fused = batch.loss == CODE["loss"]["fused"]
    fused_bytes = (
        tokens
        * spec.hidden
        * (batch.compute_bytes + C.FP32_BYTES * C.FUSED_CE_CHUNK_FP32_PER_HIDDEN)
    )
    # full fine-tuning: the output head's weight gradient is the first gradient of the backward
    # and is allocated while the logits' gradient (16-bit, 2 B per entry) still feeds it
    head_grad = np.where(
        full_ft, model_facts(spec).head_matmul_params * batch.grad_bytes / batch.tp, 0.0
    )
    logits = tokens * vocab
    # Gemma-2's final logit soft-cap (transformers modeling_gemma2: ``logits / cap``, ``tanh``,
    # ``* cap``, cap 30 in every Gemma-2 config): tanh saves its output for backward, one more
    # logits-sized tensor in the head's output dtype (fp32 after prepare_model_for_kbit_training)
    # through the loss and its backward. Traced: 16 B per entry in fp32 and QLoRA, 14 with fp16
    # logits, where the standard chain holds 12
    softcap = logits * head_out_bytes if spec.final_softcap else np.zeros(len(batch))
    standard = (
        np.maximum(logits * per_vocab, logits * C.LOSS_GRAD_BYTES_PER_VOCAB + head_grad)
        + logits * held
    )
    chunked = logits * per_vocab + head_grad
    is_chunked = batch.loss == CODE["loss"]["chunked"]
    return np.where(
        fused, fused_bytes + head_grad, np.where(is_chunked, chunked, standard) + softcap
    )


def loss_forward_bytes(chain: np.ndarray, logits_bytes: np.ndarray) -> np.ndarray:
    """Bytes per token per vocabulary entry alive when the standard loss's log-softmax is
    written, by transformers' loss code (``chain`` = ConfigBatch.loss_chain; ``logits_bytes``:
    the output head's dtype). Traced on each release's LlamaForCausalLM (tests/constraints/
    test_loss_chain.py); the backward's 12 B (LOSS_BYTES_PER_VOCAB) is the same in all three.

    - padded-labels, >= 4.49 (loss/loss_utils.py ``ForCausalLMLoss`` pads the labels, PR #35646):
      the returned logits, their fp32 upcast, the log-softmax.
    - shifted-upcast, 4.46-4.48 (``ForCausalLMLoss``: ``logits.float()``, then
      ``logits[..., :-1, :].contiguous()``): the returned logits, the upcast, the shifted copy,
      the log-softmax: 14 B with 16-bit logits.
    - shifted-fp32-logits, <= 4.45 (``LlamaForCausalLM.forward``: ``logits = logits.float()``
      replaces the head's output, then the shifted copy): 4 + 4 + 4.
    """
    code = CODE["loss_chain"]
    model_upcasts = chain == code["shifted-fp32-logits"]
    returned = np.where(model_upcasts, C.FP32_BYTES, logits_bytes)  # what the model returns
    upcast = np.where(returned < C.FP32_BYTES, C.FP32_BYTES, 0.0)  # .float() of fp32: no copy
    shifted_copy = np.where(chain == code["padded-labels"], 0.0, C.FP32_BYTES)
    log_softmax = C.FP32_BYTES
    return returned + upcast + shifted_copy + log_softmax
