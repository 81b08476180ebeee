"""The memory model: peak bytes per GPU of a training configuration, term by term.

Model states come from :mod:`constraints.model_states`, activations from
:mod:`constraints.activations`, logits from :mod:`constraints.logits`.

A training step does not hold every term at once. With ``zero_grad(set_to_none=True)`` (the
default of torch, HF Trainer, torchtune) gradients exist from the backward pass until the
optimizer step, while activations are freed layer by layer as the backward runs. So the peak is
the largest of six moments, each reported with the terms alive at it:

    A  loss backward:    weights + states + (gradients if accumulating) + all activations + logits
    B  last layer bwd:   weights + states + (gradients if accumulating) + all activations + 1 layer recomputed
    C  end of backward:  weights + states + all gradients + the first layer's activations
    D  optimizer step:   weights + states + all gradients + the step's transient
    E  forward:          weights + states + (gradients if accumulating) + all activations + the
                         forward tensors of one checkpointed layer (constraints/attention_transients.py)
    F  first layer's attention backward: C, with the eager core's score gradients in place of
                         the tied embedding's second gradient (the embedding's backward runs after
                         layer 0's; the head's gradient waits in the engine's buffer throughout)

Every function here takes a :class:`ConfigBatch` and returns numpy arrays: one code path for one
configuration and for a million.
"""

from __future__ import annotations

import numpy as np

from constraints import constants as C
from constraints.activations import activation_arrays
from constraints.allocator import allocator_slack
from constraints.backend_memory import apply_backend
from constraints.config_batch import ConfigBatch
from constraints.cuda_context import context_bytes
from constraints.gpus import GpuSpec
from constraints.logits import logits_bytes
from constraints.model_spec import ModelSpec
from constraints.model_states import (
    Arrays,
    gradient_parts,
    model_facts,
    model_share,
    optimizer_parts,
    trainable_params,
    weight_parts,
)

__all__ = [
    "PARTS",
    "PART_DOC",
    "PHASES",
    "TERMS",
    "memory_arrays",
    "model_facts",
    "trainable_params",
]

#: The five terms of the breakdown, and the parts that make up each (in display order).
TERMS: dict[str, tuple[str, ...]] = {
    "weights": (
        "base_weights",
        "adapter_weights",
        "gathered_weights",
        "dequant_buffer",
        "autocast_weight_copies",
    ),
    "gradients": ("gradient_tensors", "grad_buckets", "tied_embedding_grad"),
    "optimizer": ("optimizer_states", "master_weights", "optimizer_step_transient"),
    "activations": (
        "saved_activations",
        "recompute_layer",
        "forward_layer",
        "attention_backward",
        "scan_backward",
        "logits_and_loss",
        "workspace",
    ),
    "overhead": ("cuda_context", "nccl_buffers", "allocator_slack"),
}
PARTS: tuple[str, ...] = tuple(p for parts in TERMS.values() for p in parts)
PHASES = (
    "loss backward",
    "backward (recompute)",
    "end of backward",
    "optimizer step",
    "forward",
    "backward (first layer's attention)",
)

PART_DOC = {
    "base_weights": "model weights resident on this GPU (quantised linears + 16-bit rest)",
    "adapter_weights": "LoRA adapter weights (A and B)",
    "gathered_weights": "ZeRO-3/FSDP all-gathered working set (live layers + root unit)",
    "dequant_buffer": "16-bit copy of one quantised weight during its matmul",
    "autocast_weight_copies": "16-bit copies of fp32 weights that autocast keeps for backward",
    "gradient_tensors": "gradients alive at this moment (per GPU, after sharding)",
    "tied_embedding_grad": "a tied embedding's second vocab × hidden gradient (its backward)",
    "grad_buckets": "DDP buckets / ZeRO reduce buckets / FSDP reduce-scatter / fp32 grad buffers",
    "optimizer_states": "optimizer states (Adam m and v, momentum, 8-bit blocks …)",
    "master_weights": "fp32 master copy of the trainable weights",
    "optimizer_step_transient": "temporaries of the optimizer step (fp32 grad partition …)",
    "saved_activations": "tensors saved for backward, all layers",
    "recompute_layer": "one layer recomputed during backward (checkpointing) ",
    "attention_backward": "one layer's eager score gradients beside its saved scores (backward)",
    "scan_backward": "one Mamba layer's selective-scan gradients beside its saved tensors",
    "forward_layer": "one checkpointed layer's forward tensors (eager scores, full checkpointing)",
    "logits_and_loss": "logits, their fp32 log-softmax and its gradient",
    "workspace": "cuBLAS workspace",
    "cuda_context": "CUDA context, kernels, library handles (outside the PyTorch allocator)",
    "nccl_buffers": "NCCL communicator buffers (outside the PyTorch allocator; multi-GPU only)",
    "allocator_slack": "caching-allocator slack (reserved − allocated)",
}


#: The parts that are allocated and freed during the step (the allocator's fragmentation scales
#: with them).
DYNAMIC_PARTS = (
    "dequant_buffer",
    "autocast_weight_copies",
    "gradient_tensors",
    "grad_buckets",
    "tied_embedding_grad",
    "optimizer_step_transient",
    "saved_activations",
    "recompute_layer",
    "forward_layer",
    "attention_backward",
    "scan_backward",
    "logits_and_loss",
)


def workspace_bytes(gpu: GpuSpec, n: int) -> np.ndarray:
    """cuBLAS workspace through the caching allocator: larger on sm90+."""
    sm = gpu.sm or 0.0
    return np.full(n, float(C.CUBLAS_WORKSPACE_HOPPER if sm >= 9.0 else C.CUBLAS_WORKSPACE_OLDER))


def overhead_parts(
    batch: ConfigBatch,
    dynamic: np.ndarray | float,
    other_stream: np.ndarray | float,
    context: float,
) -> Arrays:
    """Outside the allocated tensors: the CUDA context (``context`` bytes: the GPU's,
    constraints/cuda_context.py), NCCL buffers and the allocator's slack
    (constraints/allocator.py: fragmentation by segment mode, other streams' cached blocks)."""
    return {
        "cuda_context": np.full(len(batch), float(context)),
        "nccl_buffers": np.where(batch.gpus > 1, float(C.NCCL_BUFFER_BYTES), 0.0),
        "allocator_slack": np.asarray(allocator_slack(dynamic, batch, other_stream)),
    }


def phase_parts(
    batch: ConfigBatch,
    weights: Arrays,
    grads: Arrays,
    opt: Arrays,
    act: Arrays,
    logits: np.ndarray,
    workspace: np.ndarray,
    context: float,
) -> list[Arrays]:
    """The parts alive at each of the six moments of a step (see the module docstring)."""
    accumulating = (batch.grad_accum > 1) & ~batch.opt_in_bwd
    grads_held = np.where(accumulating, grads["gradient_tensors"], 0.0)
    zeros = np.zeros(len(batch))
    # no_sync micro-batches (constraints/backend_memory.py unsynced_gradients): every unsharded
    # gradient from the second micro-batch's forward to the last one's backward, with no
    # reduce-scatter running; the last micro-batch's reduce-scatters shard them before the step
    unsynced = grads.get("unsynced_gradients", zeros)
    syncing = unsynced <= 0
    out = []
    for phase in range(len(PHASES)):
        before_end = phase < 2 or phase == 4
        end = phase in (2, 5)  # layer 0's backward: every gradient but the embedding's
        parts = {
            "base_weights": weights["base_weights"],
            "adapter_weights": weights["adapter_weights"],
            "gathered_weights": weights["gathered_weights"]
            + (weights["gathered_at_ends"] if phase in (0, 2, 5) else zeros),
            "dequant_buffer": weights["dequant_buffer"] if phase < 3 or end else zeros,
            "autocast_weight_copies": weights["autocast_weight_copies"]
            + (weights["autocast_layer_copies"] if phase == 1 else zeros)
            if before_end
            else zeros,
            "gradient_tensors": np.where(
                syncing | (phase == 3),
                grads_held
                if before_end
                else np.where(
                    (phase == 3) & opt["frees_16bit_grads"], 0.0, grads["gradient_tensors"]
                ),
                unsynced,
            ),
            "grad_buckets": grads["grad_buckets"]
            + (
                np.where(syncing, grads.get("backward_buckets", zeros), 0.0)
                if phase == 1 or end
                else zeros
            ),
            "tied_embedding_grad": grads["tied_embedding_grad"] if phase == 2 else zeros,
            "optimizer_states": opt["optimizer_states"],
            "master_weights": opt["master_weights"],
            "optimizer_step_transient": opt["optimizer_step_transient"] if phase == 3 else zeros,
            "saved_activations": act["saved"] if before_end else (act["end"] if end else zeros),
            "recompute_layer": act["recompute"] if phase == 1 or end else zeros,
            "forward_layer": act["forward"] if phase == 4 else zeros,
            "attention_backward": act["attention_backward"] if phase in (1, 5) else zeros,
            "scan_backward": act["scan_backward"] if phase == 1 else zeros,
            "logits_and_loss": logits if phase == 0 else zeros,
            "workspace": workspace,
        }
        dynamic = sum(parts[k] for k in DYNAMIC_PARTS)
        other_stream = weights.get("other_stream_cached", zeros)
        parts.update(overhead_parts(batch, dynamic, other_stream, context))
        out.append(parts)
    return out


def peak_of(phases: list[Arrays]) -> Arrays:
    """The largest of the moments, per configuration: its parts, terms, total and index."""
    totals = np.stack([sum(p.values()) for p in phases])
    phase = np.argmax(totals, axis=0)
    out: Arrays = {}
    for name in PARTS:
        out[name] = np.choose(phase, [p[name] for p in phases])
    for term, parts_of in TERMS.items():
        out[term] = np.sum([out[p] for p in parts_of], axis=0)
    out["total"] = np.sum([out[t] for t in TERMS], axis=0)
    out["phase"] = phase
    return out


def memory_arrays(spec: ModelSpec, batch: ConfigBatch, gpu: GpuSpec) -> dict[str, np.ndarray]:
    """Peak memory per GPU of every configuration in ``batch``: parts, terms, phase, extras.

    Returns arrays keyed by the names in ``PARTS`` and ``TERMS``, plus ``total``, ``phase``
    (index into ``PHASES``), ``static`` (weights + gradients + optimizer states + master, per GPU,
    the source documents' "static"), ``paged_optimizer`` (bitsandbytes paged states: on the GPU
    and in the total, in CUDA unified memory that the allocator does not count), ``cpu_bytes`` (host RAM per GPU rank for offload), ``trainable``.
    """
    n = len(batch)
    p_train = trainable_params(spec, batch)
    frac = model_share(spec, batch)
    weights = weight_parts(spec, batch, p_train, frac)
    grads = gradient_parts(spec, batch, p_train, frac)
    opt = optimizer_parts(spec, batch, p_train, frac)
    facts = model_facts(spec)
    apply_backend(
        spec,
        batch,
        p_train,
        frac,
        facts.largest_layer,
        facts.layers,
        facts.non_layer,
        max(facts.lm_head_params, facts.embedding),
        weights,
        grads,
        opt,
    )
    act = activation_arrays(spec, batch)
    logits = logits_bytes(spec, batch, ~batch.is_lora)
    if spec.arch == "raw" and spec.raw_params is not None and spec.hidden <= 1:
        act = {k: np.zeros(n) for k in act}
        logits = np.zeros(n)
    workspace = workspace_bytes(gpu, n)
    out = peak_of(
        phase_parts(batch, weights, grads, opt, act, logits, workspace, context_bytes(gpu))
    )
    # the source documents' "static" memory: model states per GPU, whatever the moment
    out["static_weights"] = weights["base_weights"] + weights["adapter_weights"]
    out["static_gradients"] = grads["static"]
    out["static_optimizer"] = opt["optimizer_states"] + opt["master_weights"]
    out["static"] = out["static_weights"] + out["static_gradients"] + out["static_optimizer"]
    out["paged_optimizer"] = opt["paged"]
    out["activations_saved_all_layers"] = act["saved"]
    out["activations_written"] = act["written"]
    out["activations_recompute"] = act["recompute"]
    out["logits_peak"] = logits
    out["cpu_bytes"] = opt["host"] + weights["host"]
    out["trainable"] = p_train
    return out
