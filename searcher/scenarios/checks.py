"""A scenario case's values, checked when the file is read, before any case runs: the numbers
of its ``model``, its ``headroom``, its ``config`` (each pin as the flag of that name would take
it; the whole configuration for ``explain``), its ``inputs`` (per kind: the names and ranges the
kind's evaluation takes) and its ``expect`` (each metric's expectation: known keys, finite
numbers). A wrong value is one line naming the file, the case and the field, exit 2."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from constraints import limits as L
from constraints.errors import FitplanError
from constraints.limits import Bound, excerpt

#: model keys that hold a count, and the range each must lie in
MODEL_COUNTS = {"layers": L.LAYERS, "hidden": L.HIDDEN, "vocab": L.VOCAB, "heads": L.HEADS}
#: model keys that hold a parameter count (floats allowed: 7e9)
MODEL_PARAMS = ("params", "trainable_params")

Validator = Callable[[str, Any], None]


def _whole(bound: Bound) -> Validator:
    def check(where: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise FitplanError(
                f"{where} must be a whole number ({bound.describe()}), got {excerpt(value)}"
            )
        bound.check(where, value)

    return check


def _number(bound: Bound) -> Validator:
    def check(where: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FitplanError(
                f"{where} must be a number ({bound.describe()}), got {excerpt(value)}"
            )
        if not math.isfinite(value):
            raise FitplanError(f"{where} must be a finite number, got {excerpt(value)}")
        bound.check(where, value)

    return check


def _yaml_number(value: Any) -> Any:
    """``70e9`` as YAML 1.1 reads it (a string: its floats need a dot) taken as the number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _text(where: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise FitplanError(f"{where} must be a name, got {excerpt(value)}")


def _flag(where: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise FitplanError(f"{where} must be true or false, got {excerpt(value)}")


def _size(where: str, value: Any) -> None:
    from searcher.validate import check_size

    if isinstance(value, bool) or not isinstance(value, str | int):
        raise FitplanError(f"{where} must be a size such as 64GiB, got {excerpt(value)}")
    check_size(str(value), Bound(1, 1 << 60, "bytes"), where)


def _tokens(where: str, value: Any) -> None:
    if not isinstance(value, list):
        raise FitplanError(f"{where} must be a list of token counts, got {excerpt(value)}")
    for i, v in enumerate(value):
        _whole(L.CONTEXT)(f"{where}[{i}]", v)


_SEARCH = {
    "gpus": _whole(L.GPU_COUNT),
    "target_batch": _whole(L.TARGET_BATCH),
    "seq_len": _whole(L.SEQ_LEN),
    "cpu_ram": _size,
}
#: per kind: input name → its check (the names each kind's evaluation reads)
INPUTS: dict[str, dict[str, Validator]] = {
    "explain": {},
    "saved_tensor": {
        "batch": _whole(L.MICRO_BATCH),
        "seq_len": _whole(L.SEQ_LEN),
        "hidden": _whole(L.HIDDEN),
        "layers": _whole(L.LAYERS),
        "bytes": _number(Bound(0.0625, 64, "bytes per element")),
    },
    "inference": {
        "batch": _whole(L.MICRO_BATCH),
        "context": _whole(L.SEQ_LEN),
        "weight_dtype": _text,
        "quant": _text,
        "kv_dtype": _text,
        "tp": _whole(L.PARALLEL_DEGREE),
    },
    "search": _SEARCH,
    "fits": _SEARCH,
    "inverse": {
        "question": _text,
        "gpus": _whole(L.GPU_COUNT),
        "target_batch": _whole(L.TARGET_BATCH),
        "seq_len": _whole(L.SEQ_LEN),
        "max_seq_len": _whole(L.SEQ_LEN),
    },
    "serve": {
        "context": _whole(L.CONTEXT),
        "concurrency": _whole(L.MICRO_BATCH),
        "tp": _whole(L.PARALLEL_DEGREE),
        "weights": _text,
        "kv_dtype": _text,
        "block_size": _whole(L.KV_BLOCK),
        "gpu_memory_utilization": _number(L.GPU_MEMORY_UTILIZATION),
        "max_num_batched_tokens": _whole(L.CONTEXT),
        "max_num_seqs": _whole(L.MICRO_BATCH),
        "cuda_graphs": _flag,
        "allow_long_context": _flag,
        "tokens": _tokens,
    },
}
#: the inputs a kind cannot run without
REQUIRED_INPUTS = {"saved_tensor": ("batch", "seq_len", "hidden", "layers", "bytes")}

#: expectation keys holding a number, and those holding something else
EXPECT_NUMBERS = {"tol", "gb", "gib", "bytes", "value"}
EXPECT_NUMBERS |= {f"not_{k}" for k in ("gb", "gib", "bytes", "value")}
EXPECT_NUMBERS |= {f"{b}{s}" for b in ("min", "max") for s in ("", "_gb", "_gib")}
EXPECT_LISTS = {"contains", "excludes"}


def check_case(case: Any, path: str | Path) -> None:
    """Refuse the first value of ``case`` its evaluation could not take (FitplanError)."""
    where = f"{path}: case {excerpt(case.name, 80)}"
    _check_model(case.model, f"{where}: model")
    if case.headroom is not None:
        _number(L.FRACTION)(f"{where}: headroom", case.headroom)
    _check_config(case, f"{where}: config")
    known = INPUTS.get(case.kind)
    if known is not None:  # an unknown kind is refused by the runner, naming the known ones
        for name, value in case.inputs.items():
            if name not in known:
                raise FitplanError(
                    f"{where}: inputs: unknown input {excerpt(str(name), 60)} for kind {case.kind}",
                    f"known: {', '.join(known) or 'none'}",
                )
            known[name](f"{where}: inputs.{name}", value)
        missing = [k for k in REQUIRED_INPUTS.get(case.kind, ()) if k not in case.inputs]
        if missing:
            raise FitplanError(f"{where}: inputs: {case.kind} needs {', '.join(missing)}")
    for metric, expect in case.expect.items():
        _check_expect(expect, f"{where}: expect.{excerpt(str(metric), 60)[1:-1]}")


def _check_model(model: dict[str, Any], where: str) -> None:
    for key in ("id", "config", "family"):
        if key in model:
            _text(f"{where}.{key}", model[key])
    for key in MODEL_PARAMS:
        if key in model:
            _number(L.PARAMS)(f"{where}.{key}", _yaml_number(model[key]))
    for key, bound in MODEL_COUNTS.items():
        if key in model and model[key] is not None:
            _whole(bound)(f"{where}.{key}", model[key])


def _check_config(case: Any, where: str) -> None:
    """Each pin as TrainConfig checks that field; ``explain`` builds the whole configuration."""
    from constraints.config import TrainConfig

    checks = dict(TrainConfig._checks())
    fields = TrainConfig.model_fields
    for key, value in case.config.items():
        if key not in fields:
            raise FitplanError(
                f"{where}: unknown knob {excerpt(str(key), 60)}",
                "a knob is explain's flag without the dashes: micro_batch, recipe, lora_rank, …",
            )
        if isinstance(value, dict | list):
            raise FitplanError(f"{where}.{key} must be one value, got {excerpt(value)}")
        if key in checks:
            _as_field(checks[key], (value, False), where, key)
    if case.kind == "explain":
        _as_field(TrainConfig.model_validate, (case.config,), where, "config")


def _as_field(build: Callable[..., Any], args: tuple[Any, ...], where: str, key: str) -> None:
    """``build(*args)``; a field it refuses becomes one line naming the case and the field."""
    from constraints.record import InvalidField

    try:
        build(*args)
    except InvalidField as err:
        if err.cause is not None:
            raise FitplanError(f"{where}: {err.cause}") from None
        raise FitplanError(
            f"{where}.{err.field or key}: {err.msg} (got {excerpt(err.value)})"
        ) from None


def _check_expect(expect: Any, where: str) -> None:
    if not isinstance(expect, dict) or not expect:
        raise FitplanError(f"{where} must be a mapping such as {{gb: 16.0}}, got {excerpt(expect)}")
    for key, value in expect.items():
        if key in EXPECT_NUMBERS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FitplanError(f"{where}.{key} must be a number, got {excerpt(value)}")
            if not math.isfinite(value) or (key == "tol" and value < 0):
                raise FitplanError(f"{where}.{key} must be a finite number, got {excerpt(value)}")
        elif key in EXPECT_LISTS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise FitplanError(f"{where}.{key} must be a list of names, got {excerpt(value)}")
        elif key == "equals":
            if isinstance(value, dict | list):
                raise FitplanError(f"{where}.equals must be one value, got {excerpt(value)}")
        else:
            known = sorted(EXPECT_NUMBERS | EXPECT_LISTS | {"equals"})
            raise FitplanError(
                f"{where}: unknown expectation key {excerpt(str(key), 40)}",
                f"known: {', '.join(known)}",
            )
