"""``@frozen`` gives what ``@dataclass(frozen=True)`` gives: repr text, equality, hash, frozenness,
copying, pickling (of catalog records); each case is one class body built twice, once by each
decorator (the standard library's dataclass is the independent reference)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from collections.abc import Callable
from dataclasses import field
from typing import Any

import pytest

from constraints.frozen import frozen
from constraints.gpus import GpuSpec, resolve_gpu
from constraints.models import resolve_model


def _pair(make: Callable[[Callable[..., Any]], type]) -> tuple[type, type]:
    """The class ``make`` defines, under dataclass(frozen=True, …) and under @frozen(…)."""

    def std(**kw: Any) -> Callable[[type], type]:
        return lambda c: dataclasses.dataclass(c, frozen=True, **kw)

    def lean(**kw: Any) -> Callable[[type], type]:
        return lambda c: frozen(c) if not kw else frozen(**kw)(c)

    return make(std), make(lean)


def _plain(deco: Callable[..., Any]) -> type:
    @deco()
    class Plain:
        a: int
        b: str = "x"
        c: float = 1.5
        items: tuple[int, ...] = ()

    return Plain


def _slotted(deco: Callable[..., Any]) -> type:
    @deco(slots=True, kw_only=True)
    class Slotted:
        n: int
        hidden: tuple[int, ...] = field(default=(), repr=False)
        note: str = field(default="", compare=False)
        tag: str = field(default="t", hash=False)

    return Slotted


def _one(deco: Callable[..., Any]) -> type:
    @deco()
    class One:
        only: Any

    return One


def _none(deco: Callable[..., Any]) -> type:
    @deco()
    class Empty:
        pass

    return Empty


def _own_repr(deco: Callable[..., Any]) -> type:
    @deco()
    class OwnRepr:
        a: int

        def __repr__(self) -> str:
            return f"<{self.a}>"

    return OwnRepr


CASES: list[tuple[Callable[[Callable[..., Any]], type], list[dict[str, Any]]]] = [
    (_plain, [{"a": 1}, {"a": 1, "b": "y"}, {"a": 2, "c": 0.0, "items": (1, 2)}, {"a": -0}]),
    (_slotted, [{"n": 1}, {"n": 1, "note": "other"}, {"n": 1, "tag": "u"}, {"n": 2, "hidden": (3,)}]),
    (_one, [{"only": 1}, {"only": (1,)}, {"only": "s"}, {"only": None}, {"only": 1.0}]),
    (_none, [{}]),
    (_own_repr, [{"a": 1}, {"a": 2}]),
]  # fmt: skip


@pytest.mark.parametrize(("make", "values"), CASES, ids=[c[0].__name__ for c in CASES])
def test_same_as_dataclass(make: Callable[[Callable[..., Any]], type], values: list[dict]) -> None:
    std_cls, lean_cls = _pair(make)
    std = [std_cls(**v) for v in values]
    lean = [lean_cls(**v) for v in values]
    for s, m in zip(std, lean, strict=True):
        assert repr(m).replace(lean_cls.__qualname__, "X") == repr(s).replace(
            std_cls.__qualname__, "X"
        )
        assert hash(m) == hash(s)
        for s2, m2 in zip(std, lean, strict=True):
            assert (m == m2) is (s == s2)
            assert (m != m2) is (s != s2)
        assert m != s and s != m  # another class: never equal, as dataclass
        assert m != object()
        name = next(iter(values[0]), None)
        if name is not None:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(m, name, 0)
        assert copy.deepcopy(m) == m and copy.copy(m) == m
        assert dataclasses.replace(m) == m
        assert inspect.signature(lean_cls) == inspect.signature(std_cls)
        assert lean_cls.__doc__ == std_cls.__doc__
        assert lean_cls.__match_args__ == std_cls.__match_args__  # type: ignore[attr-defined]
        assert [f.name for f in dataclasses.fields(m)] == [f.name for f in dataclasses.fields(s)]


def test_a_record_inside_itself_is_shown_as_dots() -> None:
    std_cls, lean_cls = _pair(_one)
    std_items: list[Any] = []
    lean_items: list[Any] = []
    std, lean = std_cls(only=std_items), lean_cls(only=lean_items)
    std_items.append(std)
    lean_items.append(lean)
    assert repr(lean).replace(lean_cls.__qualname__, "X") == "X(only=[...])"
    assert repr(std).replace(std_cls.__qualname__, "X") == "X(only=[...])"


def test_project_records_keep_dataclass_behaviour() -> None:
    """A catalog GPU and model: equal to a rebuilt copy, hashable as their fields' tuple, repr
    naming every field as dataclass writes it."""
    gpu = resolve_gpu("a100-80gb")
    again = GpuSpec(**{f.name: getattr(gpu, f.name) for f in dataclasses.fields(gpu)})
    assert again == gpu and hash(again) == hash(gpu) and again is not gpu
    fields = dataclasses.fields(gpu)
    assert hash(gpu) == hash(tuple(getattr(gpu, f.name) for f in fields if f.compare))
    expected = ", ".join(f"{f.name}={getattr(gpu, f.name)!r}" for f in fields if f.repr)
    assert repr(gpu) == f"GpuSpec({expected})"
    model = resolve_model("llama-3.1-8b")
    assert {model: 1}[resolve_model("llama-3.1-8b")] == 1
    assert pickle.loads(pickle.dumps(gpu)) == gpu and pickle.loads(pickle.dumps(model)) == model
    assert copy.deepcopy(model) == model
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.hidden = 1  # type: ignore[misc]


def test_the_first_instance_compiles_init_and_arguments_are_checked_as_dataclass() -> None:
    lean_cls = _pair(_plain)[1]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        lean_cls()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        lean_cls(a=1, z=2)
    assert repr(lean_cls(3, "y")).endswith("(a=3, b='y', c=1.5, items=())")
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        _pair(_slotted)[1](1)
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):

        @frozen
        class Bad:
            a: int = 0
            b: int

        Bad(b=1)


def test_factories_give_fresh_values() -> None:
    @frozen
    class Holder:
        items: list[int] = field(default_factory=list)

    one, two = Holder(), Holder()
    assert one.items == [] and one.items is not two.items
    assert Holder([1]).items == [1]
