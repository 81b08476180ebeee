"""What every scenario kind shares: the case and result types, the model a case names, and checks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from constraints.errors import FitplanError
from constraints.limits import excerpt
from constraints.units import GB, GiB


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    kind: str = "explain"
    source: str = ""
    note: str = ""
    model: dict[str, Any] = Field(default_factory=dict)
    gpu: str = "a100-80gb"
    headroom: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    expect: dict[str, dict[str, Any]]


class Check(BaseModel):
    metric: str
    expected: str
    got: float | bool | None
    got_text: str
    ok: bool


class CaseResult(BaseModel):
    file: str
    case: str
    source: str
    note: str
    checks: list[Check]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)


#: the keys a case's ``model`` takes: a catalog ``id``, a ``config`` path (with ``family``, as
#: --family, for a missing or unknown model_type), or raw numbers
MODEL_KEYS: tuple[str, ...] = ("id", "config", "family", "params", "trainable_params")
MODEL_KEYS += ("layers", "hidden", "vocab", "heads")


def model_of(spec: dict[str, Any]):
    from constraints.models import raw_model, resolve_model

    family = spec.get("family")
    if "id" in spec:
        return resolve_model(str(spec["id"]), family=family)
    if "config" in spec:
        from searcher.validate import family_in_file

        try:
            return resolve_model(str(spec["config"]), family=family)
        except FitplanError as err:  # "add family: NAME", the field, not the flag
            raise family_in_file(err) from None
    if "params" in spec:
        return raw_model(
            float(spec["params"]),
            trainable_params=float(spec["trainable_params"])
            if "trainable_params" in spec
            else None,
            layers=spec.get("layers"),
            hidden=spec.get("hidden"),
            vocab=spec.get("vocab"),
            heads=spec.get("heads"),
        )
    raise FitplanError("scenario model needs id, config or params")


def check_models(cases: list[Case], path: str | Path) -> None:
    """Before any case runs: each ``model`` names known keys, and a ``family`` is refused as
    --family would be (unsupported, with a catalog id or raw numbers, contradicting the
    config's model_type): one line, exit 2."""
    from searcher.validate import family_in_file

    for case in cases:
        where = f"{path}: case {excerpt(case.name, 80)}: model"
        unknown = [k for k in case.model if k not in MODEL_KEYS]
        if unknown:
            raise FitplanError(
                f"{where}: unknown key {excerpt(str(unknown[0]), 60)}",
                f"known: {', '.join(MODEL_KEYS)}",
            )
        if "family" not in case.model:
            continue
        family = case.model["family"]
        if not isinstance(family, str) or not family.strip():
            raise FitplanError(f"{where}.family: must be a family name, got {excerpt(family)}")
        if "params" in case.model and "config" not in case.model and "id" not in case.model:
            raise FitplanError(
                f"{where}.family: applies to a config.json (model: {{config: PATH}}), not to "
                "raw numbers"
            )
        try:
            model_of(case.model)
        except FitplanError as err:
            err = family_in_file(err)
            raise FitplanError(f"{where}.family: {err.message}", err.hint) from None


def lookup(metrics: dict[str, Any], name: str) -> Any:
    name = name.split(" ", 1)[0]  # "static (GiB)" checks the metric 'static' a second way
    if name.startswith("bytes_per_param."):
        base = name.removeprefix("bytes_per_param.")
        return lookup(metrics, base) / metrics["params.total"]
    if name not in metrics:
        raise FitplanError(f"unknown metric '{name}'", f"known: {', '.join(sorted(metrics))}")
    return metrics[name]


def check(metric: str, expect: dict[str, Any], got: Any) -> Check:
    tol = float(expect.get("tol", 0.005))
    unit = 1.0
    if "contains" in expect or "excludes" in expect:
        items = set(got)
        want_in, want_out = set(expect.get("contains", [])), set(expect.get("excludes", []))
        ok = want_in <= items and not (want_out & items)
        text = " ".join(
            [f"⊇ {sorted(want_in)}" if want_in else "", f"∌ {sorted(want_out)}" if want_out else ""]
        ).strip()
        return Check(metric=metric, expected=text, got=None, got_text=str(sorted(items)), ok=ok)
    if isinstance(got, bool) or "equals" in expect:
        want = expect.get("equals")
        return Check(
            metric=metric, expected=f"= {want}", got=got, got_text=str(got), ok=got == want
        )
    value = float(got)
    for key, scale in (("gb", GB), ("gib", GiB), ("bytes", 1.0), ("value", 1.0)):
        if key in expect:
            unit = scale
            want = float(expect[key])
            ok = abs(value / unit - want) <= tol * abs(want) if want else abs(value) < 1e-9
            return Check(
                metric=metric,
                expected=f"{want:g} {key} ±{tol:.1%}",
                got=value / unit,
                got_text=f"{value / unit:.4g} {key}",
                ok=ok,
            )
        if f"not_{key}" in expect:
            unit = scale
            avoid = float(expect[f"not_{key}"])
            ok = abs(value / unit - avoid) > tol * abs(avoid)
            return Check(
                metric=metric,
                expected=f"≠ {avoid:g} {key} (±{tol:.0%})",
                got=value / unit,
                got_text=f"{value / unit:.4g} {key}",
                ok=ok,
            )
    for suffix, scale in (("_gb", GB), ("_gib", GiB), ("", 1.0)):
        lo, hi = expect.get(f"min{suffix}"), expect.get(f"max{suffix}")
        if lo is not None or hi is not None:
            v = value / scale
            ok = (lo is None or v >= float(lo)) and (hi is None or v <= float(hi))
            unit_name = suffix.strip("_") or ""
            return Check(
                metric=metric,
                expected=f"[{lo if lo is not None else '−∞'}, {hi if hi is not None else '∞'}] {unit_name}",
                got=v,
                got_text=f"{v:.4g} {unit_name}",
                ok=ok,
            )
    raise FitplanError(f"expectation for {metric} has no known key: {expect}")


def case_result(
    path: str | Path, name: str, source: str, note: str, checks: Callable[[], list[Check]]
) -> CaseResult:
    """One case's result: its checks, or the one-line error that stopped them."""
    try:
        return CaseResult(file=str(path), case=name, source=source, note=note, checks=checks())
    except FitplanError as err:
        return CaseResult(
            file=str(path), case=name, source=source, note=note, checks=[], error=str(err)
        )
