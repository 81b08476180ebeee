"""When an HF-Trainer family run reduces its gradients under accumulation (``grad_sync``).

The Trainer runs every micro-batch but the last under ``accelerator.no_sync`` unless accelerate's
``GradientAccumulationPlugin.sync_each_batch`` (transformers trainer.py: "We sync the gradients in
the following cases: 1. sync_each_batch set to True 2. Using deepspeed 3. when we are at the last
batch"); TrainingArguments passes ``accelerator_config.gradient_accumulation_kwargs`` to it, and
axolotl (0.19 ``schemas/config.py``) and LLaMA-Factory hand their ``accelerator_config`` to
TrainingArguments. Under FSDP (accelerate ``no_sync``: FSDP1 ``no_sync()``, FSDP2
``set_requires_gradient_sync(False)``) that holds every gradient unsharded until the last
micro-batch (constraints/backend_memory.py ``unsynced_gradients``), so a config that shards with
FSDP, accumulates and does not set ``sync_each_batch`` runs ``grad_sync`` last-micro-batch.
"""

from __future__ import annotations

from typing import Any

from constraints.config import TrainConfig
from searcher.check.doc import Document
from searcher.check.reading import Reading

#: the key, as the Trainer's accelerator_config spells it
SYNC_KEY = "accelerator_config.gradient_accumulation_kwargs.sync_each_batch"
#: the formats whose training loop is the HF Trainer's (TrainingArguments, axolotl,
#: LLaMA-Factory 0.x, fitplan's own train.py, and an accelerate config beside one of them)
TRAINER_LOOPS = ("hf-trainer", "axolotl", "llamafactory", "fitplan-script", "accelerate")


def read_sync_each_batch(r: Reading, doc: Document) -> None:
    """``accelerator_config.gradient_accumulation_kwargs.sync_each_batch`` of ``doc`` (a mapping;
    a path to a JSON file is not followed), kept as the private field ``_sync_each_batch``."""
    d: dict[str, Any] = doc.data if isinstance(doc.data, dict) else {}
    acc = d.get("accelerator_config")
    kwargs = acc.get("gradient_accumulation_kwargs") if isinstance(acc, dict) else None
    if isinstance(kwargs, dict) and isinstance(kwargs.get("sync_each_batch"), bool):
        r.fields["_sync_each_batch"] = kwargs["sync_each_batch"]
        r.read(doc, SYNC_KEY, "grad_sync")


def resolve_grad_sync(r: Reading, cfg: TrainConfig, overrides: dict[str, Any]) -> TrainConfig:
    """``cfg`` with the grad_sync the framework runs: last-micro-batch where a Trainer loop
    shards gradients with FSDP, accumulates and was not told ``sync_each_batch`` (with a note).
    Elsewhere the Trainer's no_sync changes no memory and the reading keeps the default (a
    suggested change that would start sharding or accumulating is costed with it)."""
    if "grad_sync" in overrides or r.format not in TRAINER_LOOPS:
        return cfg
    sharded = cfg.backend in ("fsdp1", "fsdp2") and cfg.zero >= 2 and cfg.dp > 1
    if not sharded or cfg.grad_accum <= 1 or r.fields.get("_sync_each_batch") is True:
        return cfg
    if r.fields.get("_sync_each_batch") is None:
        r.notes.append(
            f"gradients reduced on the last of the {cfg.grad_accum} micro-batches only: the HF "
            "Trainer runs the others under FSDP no_sync, which holds every gradient unsharded "
            f"on each GPU (grad_sync last-micro-batch); set {SYNC_KEY}: true to reduce each one"
        )
    return cfg.model_copy(update={"grad_sync": "last-micro-batch"})
