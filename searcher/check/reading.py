"""What a config file said, key by key: read into a fitplan knob, ignored (and why), or not mapped.

A :class:`Reading` is the result of one format's reader: the TrainConfig fields it found, the
model and GPU count the files name, and a :class:`KeyUse` for every key of every file. Keys a
reader does not know are classified by name (``IGNORED_PATTERNS``: training hyper-parameters,
data, logging, output — none changes the memory of a step) or, failing that, listed as ignored
with "not memory-relevant to fitplan" so nothing is silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from constraints.frozen import frozen
from searcher.check.doc import Document, flat_keys

READ, IGNORED, UNMAPPED = "read", "ignored", "unmapped"
#: why an unclaimed key is ignored: it holds nothing (the framework's default applies), or its
#: name matches no pattern below
EMPTY = "empty: the framework's default applies"
UNKNOWN = "not memory-relevant to fitplan (unknown key)"

#: key-name patterns that never change the memory of a training step, with the reason
IGNORED_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        r"(^|_)(lr|learning_rate|warmup|scheduler|weight_decay|beta|eps|epsilon|momentum)",
        "optimizer hyper-parameter",
    ),
    (r"(^|\.)(lr_scheduler|scheduler)(\.|$)", "learning-rate schedule"),
    (
        r"(dataset|datasets|data_|template|cutoff|max_samples|shuffle|seed|preprocessing|val_set|val_size|split|chat_template|special_tokens|tokenizer|packing|train_on_inputs|eval_sample)",
        "data and tokenization",
    ),
    (
        r"(output|save|checkpoint_dir|checkpointer|resume|hub_|push_to_hub|overwrite)",
        "checkpoints and output",
    ),
    (r"(log|wandb|report_to|metric|mlflow|comet|tensorboard|plot_loss|profiler)", "logging"),
    (r"(eval|predict|do_train|do_eval|evals_per|saves_per)", "evaluation schedule"),
    (
        r"(epoch|max_steps|num_train|steps_per|max_steps_per_epoch)",
        "training length (not memory per step)",
    ),
    (
        r"(trust_remote_code|strict|ddp_timeout|timeout|dataloader|num_workers|compute_environment|machine_rank|main_process|rdzv|same_network|tpu_|debug|main_training_function|use_cpu|downcast_bf16|gpu_ids|dynamo|enable_cpu_affinity)",
        "process and launcher settings",
    ),
    (
        r"(grad_norm|gradient_clipping|clip|loss_watchdog|label_smoothing|neftune)",
        "numerics that do not change memory",
    ),
    (
        r"(lora_alpha|alpha_pattern|init_lora_weights|task_type|inference_mode|fan_in_fan_out|peft_type|peft_version|revision|auto_mapping|bias$|lora_model_dir|rank_pattern)",
        "LoRA settings that do not change memory",
    ),
    (r"(stage$|finetuning_type_default|^device$|^env)", "not memory-relevant"),
)


@frozen
class KeyUse:
    file: str
    key: str
    value: Any
    status: str
    field: str | None
    why: str

    def json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "key": self.key,
            "value": self.value,
            "status": self.status,
            "field": self.field,
            "why": self.why,
        }


@frozen
class Edit:
    """Set (or with ``doc.DELETE`` remove) the key ``key`` of the file ``path``."""

    path: Path
    key: str
    value: Any


@dataclass
class Reading:
    format: str
    docs: list[Document]
    fields: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    gpus: int | None = None
    gpu: str | None = None
    #: why the files name no model the catalog knows (shown when --model is not given)
    no_model: str | None = None
    uses: list[KeyUse] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: (reading, old config, new config) → the edits to the user's files, or None if it cannot
    writer: Callable[[Reading, Any, Any], list[Edit] | None] | None = None

    # ---- bookkeeping while reading --------------------------------------------------------
    def _seen(self, doc: Document, key: str) -> bool:
        return any(u.file == str(doc.path) and u.key == key for u in self.uses)

    def use(self, doc: Document, key: str, status: str, fld: str | None, why: str) -> None:
        if self._seen(doc, key):
            return
        from searcher.check.doc import get

        self.uses.append(KeyUse(str(doc.path), key, get(doc.data, key), status, fld, why))

    def read(self, doc: Document, key: str, fld: str, why: str = "") -> None:
        self.use(doc, key, READ, fld, why)

    def ignore(self, doc: Document, key: str, why: str) -> None:
        self.use(doc, key, IGNORED, None, why)

    def unmapped(self, doc: Document, key: str, why: str) -> None:
        self.use(doc, key, UNMAPPED, None, why)

    def finish(self) -> Reading:
        """Classify every key no reader claimed."""
        for doc in self.docs:
            if not isinstance(doc.data, dict):
                continue
            for key, value in flat_keys(doc.data).items():
                if any(
                    key == u.key or key.startswith(u.key + ".")
                    for u in self.uses
                    if u.file == str(doc.path)
                ):
                    continue
                why = next(
                    (w for pat, w in IGNORED_PATTERNS if re.search(pat, key.lower())),
                    EMPTY if value is None or value == "" else UNKNOWN,
                )
                self.ignore(doc, key, why)
        return self

    def doc(self, kind: str) -> Document | None:
        return next((d for d in self.docs if getattr(d, "role", None) == kind), None)

    def counts(self) -> dict[str, int]:
        out = {READ: 0, IGNORED: 0, UNMAPPED: 0}
        for u in self.uses:
            out[u.status] += 1
        return out
