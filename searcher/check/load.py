"""Which format each file is, one Reading for all of them, and the TrainConfig it means.

Files are told apart by their keys, not their names: a DeepSpeed JSON has ``zero_optimization``
or ``train_micro_batch_size_per_gpu``; a PEFT adapter config ``peft_type``; an accelerate config
``distributed_type``; a torchtune config ``model._component_``; LLaMA-Factory ``finetuning_type``
or ``cutoff_len``; axolotl ``base_model`` / ``micro_batch_size`` / ``adapter``; TrainingArguments
``per_device_train_batch_size``; fitplan's plan.json ``config`` + ``model``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from searcher.check.common import _is_ds
from searcher.check.doc import Document, get, read_document, set_key
from searcher.check.launchers import is_accelerate, is_plan, read_accelerate, read_plan
from searcher.check.reading import Edit, Reading
from searcher.check.torchtune import is_torchtune, read_torchtune, sharding
from searcher.check.trainer import read_trainer
from searcher.check.values import check_values
from searcher.emitters.smoke_model import SMOKE_CONFIG_FILE

FORMATS = (
    "axolotl",
    "torchtune",
    "hf-trainer",
    "llamafactory",
    "llamafactory-v1",
    "accelerate",
    "deepspeed",
    "peft",
    "fitplan",
)


def detect(doc: Document) -> str | None:
    if doc.kind == "python":
        from searcher.check.script import is_script

        return "fitplan-script" if is_script(doc) else None
    if doc.kind == "shell":
        from searcher.check.torchtune_sh import is_tune_run

        return "torchtune-command" if is_tune_run(doc) else None
    d = doc.data
    if not isinstance(d, dict):
        return None
    if is_plan(d):
        return "fitplan"
    if "peft_type" in d:
        return "peft"
    if _is_ds(d) and "per_device_train_batch_size" not in d:
        return "deepspeed"
    if is_accelerate(d):
        return "accelerate"
    if is_torchtune(d):
        return "torchtune"
    from searcher.check.llamafactory_v1 import is_llamafactory_v1

    if is_llamafactory_v1(d):
        return "llamafactory-v1"
    if "finetuning_type" in d or "cutoff_len" in d or "quantization_bit" in d:
        return "llamafactory"
    if "base_model" in d or "micro_batch_size" in d or "adapter" in d or "sequence_len" in d:
        return "axolotl"
    if (
        "per_device_train_batch_size" in d
        or "model_name_or_path" in d
        or "gradient_accumulation_steps" in d
    ):
        return "hf-trainer"
    return None


#: LLaMA-Factory v0.9.5 examples/inference (``infer_backend``, for ``llamafactory-cli chat``) and
#: examples/merge_lora (``export_dir``, for ``llamafactory-cli export``) name a model and train
#: nothing; a training config has ``stage`` / ``do_train`` / ``output_dir``
INFERENCE_KEYS = ("infer_backend", "export_dir")
TRAINING_KEYS = ("stage", "do_train", "output_dir", "per_device_train_batch_size")


def not_training(d: dict[str, Any]) -> str | None:
    """Why a Trainer-looking YAML is not a training config (None: it is one)."""
    found = [k for k in INFERENCE_KEYS if k in d or get(d, f"peft_config.{k}") is not None]
    if found and not any(k in d for k in TRAINING_KEYS):
        return f"a LLaMA-Factory inference or export config ({found[0]})"
    return None


#: the model's config.json that an emitted folder carries (searcher/emitters: offline folders),
#: and the shrunken copy its CPU smoke test builds (searcher/emitters/smoke_model.py)
MODEL_CONFIG_NAMES = ("config.json", SMOKE_CONFIG_FILE)


def expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            # a folder's config.json is the model's (fitplan emits it beside train.py), not a
            # training config
            found = sorted(
                x
                for x in p.iterdir()
                if (x.suffix in (".yaml", ".yml", ".json") and x.name not in MODEL_CONFIG_NAMES)
                or x.name in ("train.py", "torchtune.sh")
            )
            main = [x for x in found if x.name != "plan.json"]
            out += main if main else found
        else:
            out.append(p)
    if not out:
        raise FitplanError("no config files given", "fitplan check CONFIG.yaml [ds_config.json …]")
    return out


def read_configs(
    paths: list[str], *, gpu_bf16: bool = True, overlay: dict[Path, str] | None = None
) -> Reading:
    """One Reading for the files (and the DeepSpeed JSON they point at)."""
    docs = [read_document(p, overlay) for p in expand(paths)]
    for doc in docs:
        check_values(doc)
    kinds = [(detect(d), d) for d in docs]
    unknown = [str(d.path) for k, d in kinds if k is None]
    if unknown:
        raise FitplanError(
            f"{unknown[0]}: not a training config fitplan reads",
            "give an axolotl, torchtune, LLaMA-Factory, TrainingArguments, accelerate or DeepSpeed "
            "config (or fitplan's plan.json)",
        )
    for k, d in kinds:
        trainer_like = k in ("hf-trainer", "llamafactory", "llamafactory-v1")
        why = not_training(d.data) if trainer_like else None
        if why:
            raise FitplanError(
                f"{d.path}: {why}, not a training config",
                "check the config you train with (LLaMA-Factory: the one with stage: sft)",
            )
    loaded: dict[Path, Document] = {}

    def load_ds(base: Document, ref: str) -> Document | None:
        for cand in (Path(ref), base.path.parent / ref, base.path.parent / Path(ref).name):
            key = cand.resolve()
            if key in loaded:
                return loaded[key]
            if cand.is_file() or (overlay and key in overlay):
                loaded[key] = read_document(cand, overlay)
                check_values(loaded[key])
                return loaded[key]
        return None

    for _k, d in kinds:
        loaded[d.path.resolve()] = d
    mains = [
        (k, d)
        for k, d in kinds
        if k
        in (
            "axolotl",
            "torchtune",
            "hf-trainer",
            "llamafactory",
            "llamafactory-v1",
            "fitplan",
            "fitplan-script",
            "torchtune-command",
        )
    ]
    extras = [d for k, d in kinds if k in ("deepspeed", "peft")]
    acc = [d for k, d in kinds if k == "accelerate"]
    if len(mains) > 1:
        raise FitplanError(
            f"{mains[0][1].path} and {mains[1][1].path} are both training configs",
            "check one training config at a time (with its DeepSpeed / PEFT / accelerate files)",
        )
    acc_reading, acc_ds = read_accelerate(acc[0], load_ds) if acc else (None, None)
    if acc_ds is not None:
        extras.append(acc_ds)
    if mains:
        kind, main = mains[0]
        if kind == "fitplan":
            r = read_plan(main)
        elif kind == "torchtune-command":
            from searcher.check.torchtune_sh import read_tune_run

            r = read_tune_run(main)
        elif kind == "fitplan-script":
            from searcher.check.script import read_script

            r = read_script(main, load_ds, extras)
            _gpu_of_plan_beside(r, main.path)
        elif kind == "torchtune":
            r = read_torchtune(main)
        elif kind == "llamafactory-v1":
            from searcher.check.llamafactory_v1 import read_llamafactory_v1

            r = read_llamafactory_v1(main, load_ds)
        else:
            r = read_trainer(kind, main, extras, gpu_bf16, load_ds)
    elif extras:
        # the DeepSpeed / PEFT files alone, or the DeepSpeed JSON an accelerate config points at
        r = read_trainer("hf-trainer", extras[0], extras[1:], gpu_bf16, load_ds)
        r.format = detect(extras[0]) or "deepspeed"
        if acc_reading is not None:
            r.notes.append("an accelerate config names no model or batch: pass --model")
    elif acc_reading is not None:
        r = Reading("accelerate", [])
        r.notes.append(
            "an accelerate config alone names no model or batch: pass --model, --micro-batch …"
        )
    else:
        raise FitplanError("no training config among the files")
    if acc_reading is not None:
        _merge_accelerate(r, acc_reading)
    for d in extras:
        if d not in r.docs:
            r.docs.append(d)
    r.finish()
    return r


def _merge_accelerate(r: Reading, acc: Reading) -> None:
    half = acc.fields.pop("_half", None)
    weights = acc.fields.pop("_weights", None)
    ds_mode = acc.fields.pop("_ds_mode", None)
    for key in ("zero", "offload", "checkpointing", "grad_accum"):
        if (key in acc.fields and key not in r.fields) or (
            key in ("zero", "offload") and key in acc.fields
        ):
            r.fields[key] = acc.fields[key]
    from searcher.check.common import precision_fields

    has_ds_json = any(_is_ds(d.data) for d in r.docs if isinstance(d.data, dict))
    if half and ds_mode and not has_ds_json:
        # accelerate's DeepSpeed plugin (inline zero_stage) with bf16/fp16: DeepSpeed's own mixed
        # precision — 16-bit weights, fp32 master — whatever dtype the script loaded
        r.fields.update(precision_fields(half, "fp32", {"mode": ds_mode, "half": half}))
    elif half and r.fields.get("recipe") in (None, "fp32"):
        r.fields.update(precision_fields(half, weights or "fp32", None))
    r.gpus = acc.gpus or r.gpus
    r.docs = [*r.docs, *acc.docs]
    r.uses += acc.uses
    r.notes += acc.notes
    main_writer = r.writer

    def write(rr: Reading, old: Any, new: Any) -> list[Edit] | None:
        shard = (new.zero, new.offload) != (old.zero, old.offload)
        base_new = (
            new.model_copy(update={"zero": old.zero, "offload": old.offload}) if shard else new
        )
        edits: list[Edit] = []
        if main_writer is not None and base_new != old:
            main = main_writer(rr, old, base_new)
            if main is None:
                return None
            edits += main
        if shard:
            more = acc.writer(rr, old, new) if acc.writer else None
            if more is None:
                return None
            edits += more
        return edits

    r.writer = write


def train_config(r: Reading, overrides: dict[str, Any], gpus: int | None) -> TrainConfig:
    """The TrainConfig the files mean, with command-line overrides applied last."""
    fields = {k: v for k, v in r.fields.items() if not k.startswith("_")}
    fields.update(overrides)
    n = gpus or r.gpus or 1
    tp, pp = int(fields.get("tp", 1)), int(fields.get("pp", 1))
    if n % (tp * pp):
        raise FitplanError(f"{n} GPUs is not a multiple of tp {tp} × pp {pp}")
    if r.format in ("torchtune", "torchtune-command"):
        sharding(r, n)
        fields.setdefault("zero", r.fields.get("zero", 0))
        if "zero" in r.fields:
            fields["zero"] = r.fields["zero"]
    if r.format != "fitplan" or gpus:
        fields["dp"] = n // (tp * pp)
    if not gpus and not r.gpus and fields.get("zero") and r.format != "fitplan":
        r.notes.append(
            "the files shard (ZeRO / FSDP) but name no GPU count (the launcher sets it): "
            "1 GPU assumed — pass --gpus N"
        )
    if fields.get("offload", "none") != "none" and not fields.get("zero"):
        fields["offload"] = "none"
        r.notes.append("offload without ZeRO/FSDP sharding has no effect: ignored")
    from searcher.check.grad_sync import resolve_grad_sync

    return resolve_grad_sync(r, TrainConfig(**fields), overrides)


def apply_edits(r: Reading, edits: list[Edit]) -> dict[Path, str]:
    """The new text of every file the edits touch (nothing is written)."""
    texts: dict[Path, str] = {}
    by_path = {d.path.resolve(): d for d in r.docs}
    for e in edits:
        key = e.path.resolve()
        doc = by_path[key]
        texts[key] = set_key(doc, e.key, e.value, texts.get(key))
    return texts


def _gpu_of_plan_beside(r: Reading, script: Path) -> None:
    """The GPU the plan.json beside an emitted script names (``search --emit`` writes both):
    what ``check DIR`` checks against when --gpu is not given."""
    import json

    from constraints.limits import read_text

    plan = script.parent / "plan.json"
    try:
        gpu = json.loads(read_text(plan, "plan.json")).get("gpu") if plan.is_file() else None
    except (FitplanError, ValueError, AttributeError):
        return
    if isinstance(gpu, str) and gpu.strip():
        r.gpu = gpu.strip()
        r.notes.append(
            f"GPU {r.gpu}: named by {plan.name} beside {script.name} (--gpu for another)"
        )
