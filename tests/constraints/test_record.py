"""The records' field checks against pydantic itself (the library they replace on the cold path).

For every checked field of TrainConfig, ModelSpec and GpuSpec, a pydantic model is built from the
dataclass's own annotations and bounds, and both are fed the same hostile values, lax and strict:
each must accept the same values (to the same Python value and type) and refuse the others with
pydantic's error type and message — the one line a user reads.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import numpy as np
import pytest

pydantic = pytest.importorskip("pydantic")

from constraints.config import TrainConfig  # noqa: E402
from constraints.gpus import GpuSpec  # noqa: E402
from constraints.models import ModelSpec  # noqa: E402
from constraints.record import InvalidField  # noqa: E402

#: valid values of the required fields, so that one field at a time can be varied
REQUIRED: dict[type, dict[str, Any]] = {
    TrainConfig: {},
    GpuSpec: {"id": "g", "name": "G", "memory_bytes": 1},
    ModelSpec: {
        "id": "m",
        "name": "M",
        "family": "llama",
        "hidden": 8,
        "layers": 2,
        "heads": 2,
        "kv_heads": 2,
        "head_dim": 4,
        "intermediate": 16,
        "vocab": 32,
    },
}

HOSTILE: list[Any] = [
    0,
    1,
    -1,
    3,
    7,
    16,
    65537,
    10**30,
    0.0,
    0.05,
    1.0,
    4.0,
    4.5,
    -0.1,
    math.nan,
    math.inf,
    True,
    False,
    None,
    "",
    "4",
    " 4 ",
    "4.5",
    "0.1",
    "yes",
    "off",
    "x",
    "full",
    "lora",
    "flash",
    "bf16",
    [],
    {},
    np.int64(4),
    np.float64(0.5),
    np.True_,
]


def pydantic_twin(cls: type) -> type:
    """A pydantic model with ``cls``'s field annotations and Field bounds."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = ... if f.default is dataclasses.MISSING else f.default
        fields[f.name] = (hints[f.name], pydantic.Field(default, **f.metadata.get("bounds", {})))
    return pydantic.create_model(f"{cls.__name__}Twin", **fields)


def outcome(build: Any) -> tuple[str, Any]:
    try:
        return "ok", build()
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        return first["type"], first["msg"]
    except InvalidField as err:
        return err.kind, err.msg


def scalar_fields(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls)
    keep = []
    for f in dataclasses.fields(cls):
        args = {a for a in typing.get_args(hints[f.name]) if a is not type(None)}
        hint = args.pop() if len(args) == 1 else hints[f.name]
        if hint in (int, float, bool, str) or typing.get_origin(hint) is typing.Literal:
            keep.append(f.name)
    return keep


CASES = [(cls, name) for cls in REQUIRED for name in scalar_fields(cls)]


@pytest.mark.parametrize("strict", [False, True], ids=["lax", "strict"])
@pytest.mark.parametrize(("cls", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
def test_a_field_takes_and_refuses_what_pydantic_does(cls: type, name: str, strict: bool) -> None:
    twin = pydantic_twin(cls)
    for value in HOSTILE:
        data = {**REQUIRED[cls], name: value}
        want = outcome(lambda d=data: getattr(twin.model_validate(d, strict=strict), name))
        got = outcome(lambda d=data: cls.model_validate(d, strict=strict))
        if want[0] == "ok" and got[0] == "ok":
            got = ("ok", getattr(got[1], name))
            if name == "backend" and value is None:
                continue  # TrainConfig infers a backend where none is given
            same = want[1] == got[1] or (want[1] != want[1] and got[1] != got[1])  # nan
            assert same and type(want[1]) is type(got[1]), (name, value, want, got)
        elif got[0] == "value_error":
            continue  # a consistency check (e.g. an unknown recipe) past pydantic's field check
        else:
            assert got == want, (name, value)


def test_unknown_and_missing_keys_are_refused_as_pydantic_says() -> None:
    assert outcome(lambda: TrainConfig.model_validate({"foo": 1})) == (
        "extra_forbidden",
        "Extra inputs are not permitted",
    )
    assert outcome(lambda: GpuSpec.model_validate({"id": "g", "name": "G"}))[0] == "missing"


def test_a_consistency_error_keeps_its_fitplan_message() -> None:
    with pytest.raises(InvalidField) as err:
        TrainConfig(method="qlora")
    assert "--method qlora needs a quantised base" in str(err.value)


def test_dump_copy_and_dict_behave_as_pydantic_did() -> None:
    cfg = TrainConfig(method="lora", lora_dropout=0, micro_batch=np.int64(2))
    dumped = cfg.model_dump()
    assert list(dumped) == list(TrainConfig.model_fields)
    assert dumped["lora_dropout"] == 0.0 and type(dumped["lora_dropout"]) is float
    assert type(dumped["micro_batch"]) is int
    assert cfg.model_dump(exclude_defaults=True) == {
        "method": "lora",
        "micro_batch": 2,
        "backend": cfg.backend,  # inferred, so not the default None
    }
    assert dict(cfg) == dumped
    copied = cfg.model_copy(update={"grad_accum": 0})  # not validated, as pydantic's model_copy
    assert copied.grad_accum == 0 and cfg.grad_accum == 1
    assert TrainConfig.model_validate(dumped) == cfg and hash(TrainConfig(**dumped)) == hash(cfg)
