"""The ``train.py`` fitplan emits (``--emit hf | deepspeed | accelerate | torchrun``): its plan is a
block of module-level constants (``MICRO_BATCH = 4  # micro_batch -> …``), read with ``ast``
(nothing is executed) and edited in place, line by line."""

from __future__ import annotations

import ast
from typing import Any

from searcher.check.common import ATTN_IMPL, TRAINER_OPTIMIZERS, ds_precision, read_deepspeed
from searcher.check.doc import Document
from searcher.check.reading import Edit, Reading
from searcher.check.text_edits import set_constant as set_constant

#: the constants that carry the plan, and the knob each one is
CONSTANTS = {
    "MODEL": "model",
    "METHOD": "method",
    "SEQ_LEN": "seq_len",
    "MICRO_BATCH": "micro_batch",
    "GRAD_ACCUM": "grad_accum",
    "WORLD_SIZE": "dp",
    "LOAD_DTYPE": "recipe",
    "MIXED_PRECISION": "recipe",
    "OPTIM": "optimizer",
    "OPTIM_ARGS": "optimizer",
    "GRADIENT_CHECKPOINTING": "checkpointing",
    "ACTIVATION_CHECKPOINTING_BY_SHARDING": "checkpointing",
    "ATTN_IMPLEMENTATION": "attention",
    "FUSED_CROSS_ENTROPY": "loss",
    "LORA": "lora_rank",
    "ADAPTER_DTYPE": "adapter_dtype",
    "QUANT": "quant",
    "PREPARE_KBIT": "quant",
    "DEEPSPEED": "zero",
    "FSDP": "zero",
    "SYNC_EACH_BATCH": "grad_sync",
}


def constants(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def is_script(doc: Document) -> bool:
    return doc.kind == "python" and "fitplan plan" in doc.text[:400] and "METHOD = " in doc.text


def read_script(doc: Document, load_ds: Any, extra: list[Document] | None = None) -> Reading:
    c = constants(doc.text)
    doc = Document(doc.path, doc.text, doc.kind, c)
    r = Reading("fitplan-script", [doc])
    f = r.fields
    r.model = str(c.get("MODEL")) if c.get("MODEL") else None
    f["method"] = c.get("METHOD", "full")
    for key, fld in (
        ("SEQ_LEN", "seq_len"),
        ("MICRO_BATCH", "micro_batch"),
        ("GRAD_ACCUM", "grad_accum"),
    ):
        if isinstance(c.get(key), int):
            f[fld] = c[key]
    if isinstance(c.get("WORLD_SIZE"), int):
        r.gpus = c["WORLD_SIZE"]
    if isinstance(c.get("SYNC_EACH_BATCH"), bool):
        f["_sync_each_batch"] = c["SYNC_EACH_BATCH"]
    opt = str(c.get("OPTIM", "adamw_torch")).lower()
    f["optimizer"] = TRAINER_OPTIMIZERS.get(opt, "adamw")
    if f["optimizer"] == "sgd" and "momentum" in str(c.get("OPTIM_ARGS") or ""):
        f["optimizer"] = "sgd-momentum"
    f["checkpointing"] = (
        "full"
        if c.get("GRADIENT_CHECKPOINTING") or c.get("ACTIVATION_CHECKPOINTING_BY_SHARDING")
        else "none"
    )
    f["attention"] = ATTN_IMPL.get(str(c.get("ATTN_IMPLEMENTATION")), "sdpa")
    f["loss"] = "fused" if c.get("FUSED_CROSS_ENTROPY") else "standard"
    lora = c.get("LORA") or {}
    if f["method"] != "full" and isinstance(lora, dict):
        f["lora_rank"] = int(lora.get("r", 16))
        f["lora_dropout"] = float(lora.get("lora_dropout", 0.0))
        tm = lora.get("target_modules")
        f["lora_targets"] = (
            "all-linear"
            if tm == "all-linear"
            else ",".join(tm)
            if isinstance(tm, list)
            else "all-linear"
        )
    q = c.get("QUANT") or {}
    if q.get("load_in_4bit"):
        f["quant"] = "nf4-dq" if q.get("bnb_4bit_use_double_quant") else "nf4"
    elif q.get("load_in_8bit"):
        f["quant"] = "int8"
    half = c.get("MIXED_PRECISION")
    half = half if half in ("bf16", "fp16") else None
    load = str(c.get("LOAD_DTYPE", "fp32"))
    ds_prec = None
    ds_doc = next((x for x in extra or [] if x.kind == "json" and isinstance(x.data, dict)), None)
    if ds_doc is None and isinstance(c.get("DEEPSPEED"), str):
        ds_doc = load_ds(doc, c["DEEPSPEED"])
    if ds_doc is not None:
        r.docs.append(ds_doc)
        ds_prec = read_deepspeed(r, ds_doc, half)
        f.setdefault("offload", "none")
    if isinstance(c.get("FSDP"), dict):
        spec = str(c["FSDP"].get("fsdp", ""))
        f["zero"] = 2 if "shard_grad_op" in spec else 3
        f["offload"] = "all" if "offload" in spec else "none"
    if ds_prec and ds_prec.get("mode"):
        f["recipe"] = {
            "master": "bf16-master",
            "pure": "bf16-pure",
            "torch": "bf16-torch",
            "amp": "amp",
        }[ds_prec["mode"]]
    elif half is None:
        f["recipe"] = "fp32"
    else:
        f["recipe"] = "amp" if load == "fp32" else "bf16-torch"
    if half == "fp16" and f["recipe"] != "fp32":
        f["compute_dtype"] = "fp16"
    if f["method"] != "full" and c.get("ADAPTER_DTYPE"):
        from constraints.config import TrainConfig
        from searcher.emitters.plan import adapter_dtype

        default = adapter_dtype(TrainConfig(**{k: v for k, v in f.items() if k != "adapter_dtype"}))
        if c["ADAPTER_DTYPE"] != default:
            f["adapter_dtype"] = c["ADAPTER_DTYPE"]
    for key in c:
        if key in CONSTANTS:
            r.read(doc, key, CONSTANTS[key])
        else:
            r.ignore(doc, key, "not memory-relevant (learning rate, betas, launch command)")
    r.writer = write_script
    return r


def write_script(r: Reading, old: Any, new: Any) -> list[Edit] | None:
    from searcher.check.common import deepspeed_edits

    doc = r.docs[0]
    c = doc.data
    edits: list[Edit] = []
    ds_doc = next((d for d in r.docs[1:] if d.kind == "json"), None)
    for fld, key, ds_key in (
        ("micro_batch", "MICRO_BATCH", "train_micro_batch_size_per_gpu"),
        ("grad_accum", "GRAD_ACCUM", "gradient_accumulation_steps"),
        ("seq_len", "SEQ_LEN", None),
    ):
        if getattr(new, fld) != getattr(old, fld):
            edits.append(Edit(doc.path, key, getattr(new, fld)))
            if ds_key and ds_doc is not None and isinstance(ds_doc.data.get(ds_key), int):
                edits.append(Edit(ds_doc.path, ds_key, getattr(new, fld)))
    if new.checkpointing != old.checkpointing:
        if new.checkpointing == "selective" or c.get("ACTIVATION_CHECKPOINTING_BY_SHARDING"):
            return None
        edits.append(Edit(doc.path, "GRADIENT_CHECKPOINTING", new.checkpointing == "full"))
    if new.loss != old.loss:
        if new.loss != "fused":
            return None
        edits.append(Edit(doc.path, "FUSED_CROSS_ENTROPY", True))
    if new.optimizer != old.optimizer:
        from searcher.check.common import OPTIMIZER_NAMES

        if new.optimizer not in OPTIMIZER_NAMES or new.optimizer == "sgd-momentum":
            return None
        if ds_doc is not None and "optimizer" in ds_doc.data:
            return None
        edits.append(Edit(doc.path, "OPTIM", OPTIMIZER_NAMES[new.optimizer]))
    if (new.zero, new.offload) != (old.zero, old.offload):
        if ds_doc is None:
            return None
        ds_prec = ds_precision(ds_doc.data, None)
        if ds_prec.get("mode") in ("pure", "torch") and new.zero == 0:
            return None
        more = deepspeed_edits(ds_doc, old, new)
        if more is None:
            return None
        edits += more
    unchanged = (
        "method",
        "quant",
        "lora_rank",
        "lora_targets",
        "recipe",
        "attention",
        "tp",
        "pp",
        "dp",
    )
    if any(getattr(new, k) != getattr(old, k) for k in unchanged):
        return None
    return edits
