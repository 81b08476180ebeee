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
    per_vocab = np.select(
        [batch.loss == CODE["loss"][x] for x in ("standard", "chunked", "fused")],
        [C.LOSS_BYTES_PER_VOCAB[x] for x in ("standard", "chunked", "fused")],
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
    head_out_bytes = np.where(
        batch.kbit_prepared & ~batch.autocast, C.FP32_BYTES, batch.compute_bytes
    )
    softcap = logits * head_out_bytes if spec.family == "gemma2" else np.zeros(len(batch))
    standard = (
        np.maximum(logits * per_vocab, logits * C.LOSS_GRAD_BYTES_PER_VOCAB + head_grad)
        + logits * held
    )
    chunked = logits * per_vocab + head_grad
    is_chunked = batch.loss == CODE["loss"]["chunked"]
    return np.where(
        fused, fused_bytes + head_grad, np.where(is_chunked, chunked, standard) + softcap
    )
