"""A plan: one member of ``fitplan search --json`` (its ``config``, ``model`` and ``gpu``), resolved.

``load_plan`` reads PLAN.json (one member, or a whole ``search --json`` result with ``--pick``) and
refuses anything that is not a fitplan plan with one clear line. The helpers here derive what every
format needs from the knobs the same way: the LoRA alpha, the adapter dtype fitplan modelled, the
LoRA target module names, and the node layout.
"""

from __future__ import annotations

import math
from dataclasses import field
from pathlib import Path
from typing import Any

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.models import ModelSpec, catalog_entry, resolve_model
from constraints.record import InvalidField
from searcher.emitters.knobs import KNOB_NAMES

PLAN_HINT = "write one with `fitplan search … --json` (one member of its front) or pass that output with --pick N"


@frozen
class Plan:
    """A configuration to launch: the knobs, the model, and where it runs."""

    config: TrainConfig
    model: ModelSpec
    #: what the emitted files load: the catalog's Hugging Face repo, or the user's config folder
    model_ref: str
    gpu: str = ""
    gpus_per_node: int = 8
    member: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def gpus(self) -> int:
        return self.config.gpus

    @property
    def nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    @property
    def procs_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def global_batch(self) -> int:
        return self.config.global_batch

    def to_json(self) -> dict[str, Any]:
        """The plan as written next to the emitted files (``fitplan launch`` reads it back)."""
        out = dict(self.member) if self.member else {}
        cfg = self.config.model_dump()
        cfg["gpus"] = self.gpus
        cfg["rank"] = cfg["lora_rank"] if self.config.method != "full" else None
        out["config"] = cfg
        out.setdefault("model", self.model.id)
        out.setdefault("gpu", self.gpu)
        out["model_ref"] = self.model_ref
        out["gpus_per_node"] = self.gpus_per_node
        return out


def model_ref_for(spec: ModelSpec, given: str | None) -> str:
    """What ``from_pretrained`` should load: the catalog's repo, or the user's config folder."""
    if given:
        p = Path(given).expanduser()
        if p.exists() or p.suffix == ".json":
            # absolute: the launch command may run from another folder
            return str((p.parent if p.suffix == ".json" else p).resolve())
    try:
        return str(catalog_entry(spec.id).get("hf_repo") or spec.id)
    except FitplanError:
        return given or spec.id


def make_plan(
    config: TrainConfig,
    model: str | ModelSpec,
    *,
    model_ref: str | None = None,
    gpu: str = "",
    gpus_per_node: int = 8,
    member: dict[str, Any] | None = None,
) -> Plan:
    spec = resolve_model(model) if isinstance(model, str) else model
    if spec.arch == "raw":
        raise FitplanError(
            "a model given as raw numbers (--params) has no architecture to launch",
            "search with --model NAME or --model path/to/config.json",
        )
    if gpus_per_node < 1:
        raise FitplanError(f"--gpus-per-node must be at least 1, got {gpus_per_node}")
    ref = model_ref or model_ref_for(spec, model if isinstance(model, str) else None)
    plan = Plan(config, spec, ref, gpu, gpus_per_node, dict(member or {}))
    if plan.gpus > gpus_per_node and plan.gpus % gpus_per_node:
        raise FitplanError(
            f"{plan.gpus} GPUs do not split into whole nodes of {gpus_per_node}",
            "pass --gpus-per-node with a divisor of the GPU count",
        )
    return plan


def _not_a_plan(path: str, why: str) -> FitplanError:
    return FitplanError(f"{path} is not a fitplan plan: {why}", PLAN_HINT)


def load_plan(
    path: str,
    *,
    pick: int | None = None,
    model: str | None = None,
    gpus_per_node: int | None = None,
) -> Plan:
    """Read PLAN.json; every failure is one FitplanError naming the file and what is wrong."""
    from constraints.limits import GPUS_PER_NODE, excerpt, read_text, shown_path, strict_json

    p = Path(path)
    try:
        text = read_text(p, "plan file")
    except FitplanError as err:
        raise FitplanError(err.message, err.hint or PLAN_HINT) from None
    try:
        data = strict_json(text, shown_path(p))
    except FitplanError as err:
        reason = err.message.removeprefix(shown_path(p)).lstrip(":0123456789 ")
        raise _not_a_plan(path, f"not JSON ({reason})") from None
    if isinstance(data, dict) and "front" in data and "config" not in data:
        front = data["front"]
        if not isinstance(front, list):
            raise _not_a_plan(path, "'front' is not a list")
        if not front:
            raise FitplanError(f"{path}: the search found nothing that fits: no plan to launch")
        n = pick or 1
        if not 1 <= n <= len(front):
            raise FitplanError(f"--pick {n} is out of range: {path} holds {len(front)} plans")
        data = front[n - 1]
    elif pick not in (None, 1):
        raise FitplanError(f"--pick {pick}: {path} holds one plan, not a search result")
    if not isinstance(data, dict):
        raise _not_a_plan(path, "it holds no JSON object")
    cfg = data.get("config")
    if not isinstance(cfg, dict):
        raise _not_a_plan(path, "no 'config' object")
    if not isinstance(data.get("model"), str) or not data["model"]:
        raise _not_a_plan(path, "no 'model' name")
    for key in ("model_ref", "gpu"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise _not_a_plan(path, f"'{key}' is not a name (got {excerpt(data[key])})")
    per_node_given = data.get("gpus_per_node")
    if per_node_given is not None and (
        isinstance(per_node_given, bool)
        or not isinstance(per_node_given, int)
        or not GPUS_PER_NODE.low <= per_node_given <= GPUS_PER_NODE.high
    ):
        raise _not_a_plan(
            path, f"gpus_per_node must be {GPUS_PER_NODE.describe()}, got {excerpt(per_node_given)}"
        )
    unknown = sorted(set(cfg) - set(KNOB_NAMES) - {"gpus", "rank"})
    if unknown:
        raise _not_a_plan(path, f"unknown config key(s) {excerpt(', '.join(unknown), 80)[1:-1]}")
    missing = [k for k in ("method", "micro_batch", "grad_accum", "seq_len", "dp") if k not in cfg]
    if missing:
        raise _not_a_plan(path, f"config lacks {', '.join(missing)}")
    fields = {k: v for k, v in cfg.items() if k in KNOB_NAMES}
    try:
        config = TrainConfig.model_validate(fields, strict=True)  # "8" is not 8
    except InvalidField as err:
        if isinstance(err.cause, FitplanError):
            raise FitplanError(f"{path}: {err.cause}") from None
        raise FitplanError(
            f"{path}: config.{err.field or 'config'}: {err.msg} (got {excerpt(err.value)})"
        ) from None
    if "gpus" in cfg and cfg["gpus"] != config.gpus:
        raise _not_a_plan(path, f"config.gpus {cfg['gpus']} is not dp × tp × pp = {config.gpus}")
    ref = model or data.get("model_ref")
    # --model first, then what the plan loads (a catalog repo or the user's config folder), then
    # its catalog id
    candidates = [model] if model else [c for c in (data.get("model_ref"), data["model"]) if c]
    spec = None
    for candidate in candidates:
        try:
            spec = resolve_model(str(candidate))
            break
        except FitplanError:
            if model:
                raise
    if spec is None:
        raise FitplanError(
            f"{path}: model {excerpt(data['model'])} is not in the catalog",
            "pass --model with its config.json (or the catalog name)",
        )
    per_node = gpus_per_node or int(data.get("gpus_per_node") or 8)
    return make_plan(
        config,
        spec,
        model_ref=model_ref_for(spec, ref) if ref else None,
        gpu=str(data.get("gpu", "")),
        gpus_per_node=per_node,
        member=data,
    )


# ----------------------------------------------------------------------------------------------
# What every format derives from the knobs, in one place
# ----------------------------------------------------------------------------------------------


def lora_alpha(plan: Plan, override: int | None) -> int:
    """fitplan has no alpha knob: alpha = 2 × rank unless ``--lora-alpha`` says otherwise."""
    if override is not None:
        if override < 1:
            raise FitplanError(f"--lora-alpha must be positive, got {override}")
        return override
    return 2 * plan.config.lora_rank


def adapter_dtype(cfg: TrainConfig) -> str:
    """The dtype fitplan modelled for the LoRA adapters."""
    return cfg.trainable_dtype()


def lora_target_modules(plan: Plan) -> str | list[str]:
    """PEFT ``target_modules`` of the plan (constraints.lora_targets.peft_target_modules)."""
    from constraints.lora_targets import peft_target_modules

    return peft_target_modules(plan.model, plan.config.lora_targets)


@frozen
class Precision:
    """What the recipe means in framework terms.

    ``mode``: ``fp32`` (everything fp32), ``amp`` (fp32 weights, grads and states; 16-bit autocast
    compute), ``master`` (16-bit weights and grads + an fp32 master copy and fp32 states: DeepSpeed's
    bf16/fp16 mode), ``pure`` (16-bit weights and grads, fp32 states, no master), ``torch``
    (16-bit weights, grads and states: torch AdamW on a 16-bit model). ``half``: bf16 or fp16 for
    the 16-bit modes, None for fp32. ``load``: the dtype the model is loaded in.
    """

    mode: str
    half: str | None
    load: str


def precision(plan: Plan, fmt: str) -> Precision:
    from constraints.precision import recipe, with_compute
    from searcher.emitters.knobs import refuse

    cfg = plan.config
    r = recipe(cfg.recipe)
    if cfg.compute_dtype:
        r = with_compute(r, cfg.compute_dtype)
    if r.compute == "fp8":
        raise refuse(
            fmt,
            "compute_dtype",
            "fp8",
            "fitplan does not emit fp8 training (Transformer Engine / torchao float8 wiring)",
            "pin --compute-dtype bf16 in the search",
        )
    if cfg.weight_dtype and cfg.weight_dtype.lower() != r.weight:
        raise refuse(
            fmt,
            "weight_dtype",
            cfg.weight_dtype,
            f"the {cfg.recipe} recipe loads weights in {r.weight}; an overridden weight dtype is "
            "what-if arithmetic no launcher reproduces",
            "drop --weight-dtype (use --quant for a quantised base)",
        )
    if r.compute == "fp32":
        return Precision("fp32", None, "fp32")
    if r.weight == "fp32":
        if not r.autocast:
            raise refuse(
                fmt,
                "recipe",
                cfg.recipe,
                f"fp32 weights computed in {r.compute} without autocast is not a framework mode",
            )
        return Precision("amp", r.compute, "fp32")
    if r.master:
        return Precision("master", r.compute, r.weight)
    if r.state_dtype == "fp32":
        return Precision("pure", r.compute, r.weight)
    return Precision("torch", r.compute, r.weight)
