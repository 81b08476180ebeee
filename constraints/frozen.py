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
import inspect
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


def _setattr_guards(cls: type, names: tuple[str, ...]) -> tuple[Callable[..., None], ...]:
    """dataclass's frozen ``__setattr__`` / ``__delattr__``, as closures (no compilation)."""

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    return __setattr__, __delattr__


def _getstate(self: Any) -> list[Any]:
    """A slotted frozen record's pickle state: its field values in order (as dataclass's)."""
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


class _Factory:
    """The default that stands for "call the field's default_factory" (dataclass's marker)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _compiled_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` dataclass writes for a frozen class, compiled now: parameters in field
    order (keyword-only ones after ``*``), each value set with ``object.__setattr__``, a factory
    called where its field is not given, then ``__post_init__``."""
    fields = dataclasses.fields(cls)
    space: dict[str, Any] = {"__set__": object.__setattr__, "__factory__": _FACTORY}
    positional: list[str] = []
    keyword: list[str] = []
    body: list[str] = []
    seen_default = False
    for f in fields:
        space[f"__type_{f.name}"] = f.type
        value = f.name
        if f.default is not dataclasses.MISSING:
            space[f"__default_{f.name}"] = f.default
            param = f"{f.name}: __type_{f.name} = __default_{f.name}"
            seen_default |= not f.kw_only
        elif f.default_factory is not dataclasses.MISSING:
            space[f"__default_{f.name}"] = f.default_factory
            param = f"{f.name}: __type_{f.name} = __factory__"
            value = f"__default_{f.name}() if {f.name} is __factory__ else {f.name}"
            seen_default |= not f.kw_only
        else:
            if seen_default and not f.kw_only:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            param = f"{f.name}: __type_{f.name}"
        (keyword if f.kw_only else positional).append(param)
        body.append(f"    __set__(__self__, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("    __self__.__post_init__()")
    params = ["__self__", *positional, *(["*", *keyword] if keyword else [])]
    text = f"def __init__({', '.join(params)}) -> None:\n" + ("\n".join(body) or "    pass")
    exec(compile(text, f"<{cls.__qualname__}.__init__>", "exec", dont_inherit=True), space)
    init: Callable[..., None] = space["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _init_on_first_use(cls: type) -> Callable[..., None]:
    """An ``__init__`` that compiles the class's real one the first time an instance is made,
    installs it, and runs it: a class that is never built on a command's path costs nothing."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        real = _compiled_init(cls)
        cls.__init__ = real  # type: ignore[misc]
        real(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _signature_doc(cls: type) -> str:
    """The ``__doc__`` dataclass gives a class without one, ``Name(a: 'int', b: 'str' = 'x')``
    (``inspect.signature`` of its ``__init__``, here read from the fields)."""
    positional: list[str] = []
    keyword: list[str] = []
    for f in dataclasses.fields(cls):
        text = f"{f.name}: {inspect.formatannotation(f.type)}"
        if f.default is not dataclasses.MISSING:
            text += f" = {f.default!r}"
        elif f.default_factory is not dataclasses.MISSING:
            text += " = <factory>"
        (keyword if f.kw_only else positional).append(text)
    params = [*positional, *(["*", *keyword] if keyword else [])]
    return f"{cls.__name__}({', '.join(params)})"


@overload
def frozen(cls: type[T], /) -> type[T]: ...
@overload
def frozen(*, kw_only: bool = False, slots: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True)
def frozen(
    cls: type[T] | None = None, /, *, kw_only: bool = False, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass(frozen=True, kw_only=…, slots=…)``, its methods shared or compiled lazily."""

    def wrap(c: type[T]) -> type[T]:
        own = set(c.__dict__)
        undocumented = not c.__doc__
        if undocumented:  # dataclass would read the signature of a missing __init__ (slow)
            c.__doc__ = "-"
        made = dataclasses.dataclass(
            c, init=False, repr=False, eq=False, frozen=False, kw_only=kw_only, slots=slots
        )
        if undocumented:
            made.__doc__ = _signature_doc(made)
        names = tuple(f.name for f in dataclasses.fields(made))  # type: ignore[arg-type]
        shared: dict[str, Any] = {"__repr__": _repr, "__eq__": _eq, "__hash__": _hash}
        shared["__setattr__"], shared["__delattr__"] = _setattr_guards(made, names)
        shared["__init__"] = _init_on_first_use(made)
        if slots:
            shared["__getstate__"], shared["__setstate__"] = _getstate, _setstate
        for name, method in shared.items():
            if name not in own:
                setattr(made, name, method)
        return made

    return wrap if cls is None else wrap(cls)
