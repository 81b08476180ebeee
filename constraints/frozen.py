"""``@frozen``: a frozen dataclass whose ``__repr__``, ``__eq__`` and ``__hash__`` are shared.

``dataclasses.dataclass`` writes every method of every class as source text and compiles it with
``exec`` when the class is created (CPython 3.11 ``dataclasses._create_fn``): six compilations
per frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``). With ~25 records on ``fitplan explain``'s path and ~37 on ``search``'s, that was
~50 ms of CPU of explain's ~110 ms after numpy (measured: the time inside
``dataclasses._process_class``, 2-core VM). ``@frozen`` compiles only ``__init__`` and the two
frozen-attribute guards (dataclass always writes those for ``frozen=True``, and pickling and
``copy`` of a frozen slotted class rely on them); ``__repr__``, ``__eq__`` and ``__hash__`` are the
functions below, the same for every class, reading the class's fields once. They give what the
generated ones gave, to the byte: the repr text (``Name(a=1, b='x')``, fields with
``repr=False`` left out, ``...`` for a record inside itself), equality only with an instance of
the very same class, comparing the tuple of the ``compare=True`` fields, and the hash of that same
tuple (``hash=`` honoured as dataclass does), so sets and dicts of records iterate as before.

A method the class body defines itself is kept, as dataclass keeps it. Type checkers read the
decorator as ``dataclass(frozen=True, …)`` (:func:`typing.dataclass_transform`).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from reprlib import recursive_repr
from typing import Any, TypeVar, dataclass_transform, overload

T = TypeVar("T")

#: per class: the names its repr shows and the function giving the tuple eq and hash compare
_REPR_NAMES: dict[type, tuple[str, ...]] = {}
_KEYS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
_HASH_KEYS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _tuple_of(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """``obj -> (obj.a, obj.b, …)`` (a tuple even for one name or none)."""
    if len(names) >= 2:
        return operator.attrgetter(*names)
    if len(names) == 1:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    return lambda obj: ()


def _key(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    key = _KEYS.get(cls)
    if key is None:
        key = _KEYS[cls] = _tuple_of(tuple(f.name for f in dataclasses.fields(cls) if f.compare))
    return key


def _hash_key(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    key = _HASH_KEYS.get(cls)
    if key is None:
        names = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if (f.compare if f.hash is None else f.hash)  # dataclass's own rule
        )
        key = _HASH_KEYS[cls] = _tuple_of(names)
    return key


@recursive_repr()
def _repr(self: Any) -> str:
    cls = self.__class__
    names = _REPR_NAMES.get(cls)
    if names is None:
        names = _REPR_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls) if f.repr)
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
    return f"{cls.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = _key(self.__class__)
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(_hash_key(self.__class__)(self))


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, kw_only: bool = False, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True)
def frozen(
    cls: type[T] | None = None, /, *, kw_only: bool = False, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass(frozen=True, kw_only=…, slots=…)`` with the shared repr, eq and hash."""

    def wrap(c: type[T]) -> type[T]:
        own = set(c.__dict__)
        made = dataclasses.dataclass(c, frozen=True, repr=False, eq=False, kw_only=kw_only, slots=slots)  # fmt: skip
        if "__repr__" not in own:
            made.__repr__ = _repr  # type: ignore[method-assign]
        if "__eq__" not in own:
            made.__eq__ = _eq  # type: ignore[method-assign]
        if "__hash__" not in own:
            made.__hash__ = _hash  # type: ignore[method-assign]
        return made

    return wrap if cls is None else wrap(cls)
