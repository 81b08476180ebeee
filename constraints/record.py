"""Frozen records: dataclasses that check their fields the way the CLI's users were told.

The models on every command's path (:class:`~constraints.models.ModelSpec`,
:class:`~constraints.gpus.GpuSpec`, :class:`~constraints.config.TrainConfig`, the breakdowns)
were pydantic models; importing pydantic and building their schemas took about a third of a cold
``fitplan explain``. They are now plain frozen dataclasses deriving from :class:`Record`, which
keeps the few pydantic behaviours the project relies on, with pydantic's names and messages:

- fields are coerced and checked on construction as pydantic 2's *lax* mode did (``"8"`` → 8,
  4.0 → 4, 0 → 0.0 for a float, ``"yes"`` → True, numpy scalars → Python ones) and bounds given
  with :func:`bounded` (``ge``/``gt``/``le``/``lt``); a bad field raises :class:`InvalidField`
  with pydantic's one-line message ("Input should be greater than or equal to 1");
- :meth:`Record.model_validate` (``strict=True``: no coercion, as a plan.json is read) refuses
  unknown keys ("Extra inputs are not permitted");
- ``model_dump`` / ``model_dump_json`` / ``model_copy`` (no validation, as pydantic's) /
  ``model_fields`` / ``dict(record)``.

Only scalar fields (int, float, bool, str, Literal, their ``| None``) are checked; containers and
nested records are taken as given (they are built by the code, not typed by a person).
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import sys
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

R = TypeVar("R", bound="Record")

#: the strings pydantic's lax mode reads as booleans
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


class InvalidField(ValueError):
    """One field that failed its check, as pydantic reported it: ``field`` (its name), ``kind``
    (pydantic's error type), ``msg`` (its message), ``value`` (the input); ``cause`` is the
    FitplanError a consistency check raised (``kind == "value_error"``)."""

    def __init__(
        self, field: str, kind: str, msg: str, value: Any = None, cause: Exception | None = None
    ) -> None:
        self.field, self.kind, self.msg, self.value, self.cause = field, kind, msg, value, cause
        super().__init__(str(cause) if cause is not None else f"{field}: {msg}")


def bounded(
    default: Any = dataclasses.MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with pydantic's ``Field(ge=…, gt=…, le=…, lt=…)`` bounds."""
    bounds = {k: v for k, v in (("le", le), ("lt", lt), ("ge", ge), ("gt", gt)) if v is not None}
    return dataclasses.field(default=default, metadata={"bounds": bounds})


# ------------------------------------------------------------------ scalar checks (lax / strict)


def _as_int(name: str, v: Any, strict: bool) -> int:
    if type(v) is int:
        return v
    if strict:
        if isinstance(v, int) and not isinstance(v, bool):
            return int(v)
        raise InvalidField(name, "int_type", "Input should be a valid integer", v)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float) or (hasattr(v, "__float__") and not hasattr(v, "__index__")):
        f = float(v)
        if not math.isfinite(f):
            raise InvalidField(name, "finite_number", "Input should be a finite number", v)
        if not f.is_integer():
            raise InvalidField(
                name,
                "int_from_float",
                "Input should be a valid integer, got a number with a fractional part",
                v,
            )
        return int(f)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            raise InvalidField(
                name,
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
                v,
            ) from None
    try:
        return operator.index(v)  # numpy integers
    except TypeError:
        raise InvalidField(name, "int_type", "Input should be a valid integer", v) from None


def _as_float(name: str, v: Any, strict: bool) -> float:
    if type(v) is float:
        return v
    if isinstance(v, bool):
        if strict:
            raise InvalidField(name, "float_type", "Input should be a valid number", v)
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if not strict and isinstance(v, str):
        try:
            return float(v.strip())
        except ValueError:
            raise InvalidField(
                name,
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
                v,
            ) from None
    if hasattr(v, "__float__") and not isinstance(v, str):
        return float(v)  # numpy numbers, strict or not (as pydantic-core)
    raise InvalidField(name, "float_type", "Input should be a valid number", v)


def _as_bool(name: str, v: Any, strict: bool) -> bool:
    if v is True or v is False:
        return v
    if strict:
        raise InvalidField(name, "bool_type", "Input should be a valid boolean", v)
    unreadable = "Input should be a valid boolean, unable to interpret input"
    if isinstance(v, str):
        word = v.strip().lower()
        if word in _TRUE | _FALSE:
            return word in _TRUE
        raise InvalidField(name, "bool_parsing", unreadable, v)
    number: float | None = None
    if hasattr(v, "__index__"):
        number = operator.index(v)
    elif hasattr(v, "__float__"):
        number = float(v)
    if number is not None:
        if number in (0, 1):
            return number == 1
        whole = math.isfinite(number) and number == int(number)
        if whole and -(2**63) <= number < 2**63:  # pydantic-core reads a 64-bit int, refuses it
            raise InvalidField(name, "bool_parsing", unreadable, v)
    raise InvalidField(name, "bool_type", "Input should be a valid boolean", v)


def _as_str(name: str, v: Any, strict: bool) -> str:
    if type(v) is str:
        return v
    if isinstance(v, str):
        return str(v)
    raise InvalidField(name, "string_type", "Input should be a valid string", v)


def _choices_text(choices: tuple[Any, ...]) -> str:
    shown = [repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


_BOUND_TEXT = {
    "le": ("less_than_equal", "less than or equal to"),
    "lt": ("less_than", "less than"),
    "ge": ("greater_than_equal", "greater than or equal to"),
    "gt": ("greater_than", "greater than"),
}
_BOUND_OK: dict[str, Callable[[Any, Any], bool]] = {
    "le": operator.le,
    "lt": operator.lt,
    "ge": operator.ge,
    "gt": operator.gt,
}

Check = Callable[[Any, bool], Any]


def _checker(name: str, hint: Any, bounds: dict[str, float]) -> Check | None:
    """The function that coerces and checks one field's value, or None to take it as given."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        one = _checker(name, inner[0], bounds) if len(inner) == 1 else None
        if one is None:
            return None
        return lambda v, strict: None if v is None else one(v, strict)
    if origin is typing.Literal:
        text = f"Input should be {_choices_text(args)}"

        def literal(v: Any, strict: bool) -> Any:
            for choice in args:
                if v == choice and type(v) is not bool:
                    return choice
            raise InvalidField(name, "literal_error", text, v)

        return literal
    scalar = {int: _as_int, float: _as_float, bool: _as_bool, str: _as_str}.get(hint)
    if scalar is None:
        if origin is tuple or hint is tuple:
            return lambda v, strict: tuple(v) if isinstance(v, list) else v
        return None
    if not bounds:
        return lambda v, strict: scalar(name, v, strict)

    def checked(v: Any, strict: bool) -> Any:
        v = scalar(name, v, strict)
        for key, limit in bounds.items():
            if not _BOUND_OK[key](v, limit):
                kind, words = _BOUND_TEXT[key]
                shown = (
                    int(limit) if float(limit).is_integer() else limit
                )  # pydantic's "1", not "1.0"
                raise InvalidField(name, kind, f"Input should be {words} {shown}", v)
        return v

    return checked


#: the annotations most fields have, read without evaluating them (typing.get_type_hints on
#: every record took ~10 ms of a cold start)
_SIMPLE: dict[str, Any] = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "int | None": int | None,
    "float | None": float | None,
    "str | None": str | None,
}


def _annotation(annotation: Any, module: dict[str, Any]) -> Any:
    """A field's type from its (string) annotation; None for a container or a record (not
    checked) or a name the module does not bind at run time."""
    if not isinstance(annotation, str):
        return annotation
    simple = _SIMPLE.get(annotation)
    if simple is not None:
        return simple
    if annotation.startswith("tuple["):
        return tuple
    if annotation.startswith(("dict[", "list[")):
        return None
    try:
        return eval(annotation, module)  # Literal[…], a Literal alias, a record class
    except NameError:
        return None


class _FieldsOf:
    """``Cls.model_fields``: the dataclass fields by name, in order (as pydantic's)."""

    def __get__(self, obj: Any, owner: type) -> dict[str, dataclasses.Field[Any]]:
        return {f.name: f for f in dataclasses.fields(owner)}


class Record:
    """The base of the frozen records (see the module docstring). A subclass is a
    ``@dataclass(frozen=True, slots=True)``; it may override :meth:`_consistent`."""

    __slots__ = ()
    model_fields: ClassVar[Any] = _FieldsOf()
    #: per class: (field name, check) for the fields that are checked
    _checks_cache: ClassVar[dict[type, list[tuple[str, Check]]]] = {}
    _strict: ClassVar[list[bool]] = [False]

    @classmethod
    def _checks(cls) -> list[tuple[str, Check]]:
        checks = Record._checks_cache.get(cls)
        if checks is None:
            module = vars(sys.modules[cls.__module__])
            checks = []
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                hint = _annotation(f.type, module)
                check = _checker(f.name, hint, dict(f.metadata.get("bounds", {})))
                if check is not None:
                    checks.append((f.name, check))
            Record._checks_cache[cls] = checks
        return checks

    def __post_init__(self) -> None:
        strict = Record._strict[-1]
        for name, check in self._checks():
            value = getattr(self, name)
            new = check(value, strict)
            if new is not value:
                object.__setattr__(self, name, new)
        try:
            self._consistent()
        except ValueError as err:  # as pydantic wrapped a validator's error: a ValidationError
            raise InvalidField("", "value_error", str(err), cause=err) from None

    def _consistent(self) -> None:
        """Checks across fields (a subclass's); raise FitplanError."""

    # ---- pydantic's names for what the project uses

    @classmethod
    def model_validate(cls: type[R], data: dict[str, Any], *, strict: bool = False) -> R:
        """A record from a mapping; unknown keys are refused; ``strict``: no coercion."""
        names = cls.model_fields
        for key, value in data.items():
            if key not in names:
                raise InvalidField(
                    str(key), "extra_forbidden", "Extra inputs are not permitted", value
                )
        for name, f in names.items():
            if (
                name not in data
                and f.default is dataclasses.MISSING
                and (f.default_factory is dataclasses.MISSING)
            ):
                raise InvalidField(name, "missing", "Field required", data)
        Record._strict.append(strict)
        try:
            return cls(**data)
        finally:
            Record._strict.pop()

    def model_dump(self, *, mode: str = "python", exclude_defaults: bool = False) -> dict[str, Any]:
        """The fields as a dict, nested records as dicts (``mode="json"``: tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if exclude_defaults and f.default is not dataclasses.MISSING and value == f.default:
                continue
            out[f.name] = _dumped(value, mode)
        return out

    def model_dump_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)

    def model_copy(self: R, *, update: dict[str, Any] | None = None) -> R:
        """A copy with ``update`` applied, not validated (as pydantic's ``model_copy``)."""
        new = object.__new__(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = update[f.name] if update and f.name in update else getattr(self, f.name)
            object.__setattr__(new, f.name, value)
        return new

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """(field, value) pairs, so that ``dict(record)`` works as for a pydantic model."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            yield f.name, getattr(self, f.name)


def _dumped(value: Any, mode: str) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode=mode)
    if isinstance(value, dict):
        return {k: _dumped(v, mode) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        items = [_dumped(v, mode) for v in value]
        return items if mode == "json" or isinstance(value, list) else tuple(items)
    return value
