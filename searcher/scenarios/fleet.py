"""Fleet files as scenarios: plan the fleet, then check its ``expect`` section.

    expect:
      - name: "the 7B LoRA job goes to the 4090 pool"
        source: "where the expected value comes from"
        note: "optional"
        checks:
          placed.support-bot: {equals: rtx4090}      # the pool, or null when not placed
          method.support-bot: {equals: lora}
          unplaced: {equals: [rush-70b]}             # sorted names
          total_usd: {min: 10, max: 500}
          fits.code-70b.rtx4090: {equals: false}     # capacity-matrix cell
          reason.rush-70b: {contains: "deadline"}

Numeric metrics take every expectation of :mod:`searcher.scenarios.runner` (``gb``, ``min_gib``,
``value`` …); names and lists take ``equals``, text takes ``contains``. Per job:
``placed``, ``gpus``, ``method``, ``hours``, ``usd``, ``tokens_per_s``, ``needed``, ``reason``;
per job and pool (``<metric>.<job>.<pool>``): ``fits``, ``cell_usd``, ``cell_hours``,
``cell_gpus``, ``cell_method``, ``fastest_hours`` (ignoring the deadline), ``cell_reason``;
buy vs rent, per pool: ``utilization``, ``break_even``, ``verdict``, ``own_usd``, ``rent_usd``;
for the fleet: ``total_usd``, ``placed_count``, ``unplaced``, ``makespan_hours``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from constraints.errors import FitplanError
from searcher.scenarios.cases import CaseResult, Check, case_result


class FleetExpect(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    source: str = ""
    note: str = ""
    checks: dict[str, dict[str, Any]]


def is_fleet_file(path: str | Path) -> bool:
    from searcher.fleet.fleet_file import looks_like_fleet
    from searcher.fleet.yaml_lines import read_yaml

    try:
        data, _ = read_yaml(path)
    except FitplanError:
        return False  # the scenario loader reports the problem
    return looks_like_fleet(data)


def plan_metrics(plan: Any) -> dict[str, Any]:
    """Every metric an ``expect`` check may name."""
    f = plan.fleet
    m: dict[str, Any] = {
        "total_usd": plan.total_usd,
        "placed_count": len(plan.placed),
        "unplaced": sorted(u.job.name for u in plan.unplaced),
        "makespan_hours": plan.makespan_hours,
    }
    reasons = {u.job.name: u.reason for u in plan.unplaced}
    for job in f.jobs:
        pl = plan.placement_of(job.name)
        o = pl.option if pl else None
        m[f"placed.{job.name}"] = o.pool if o else None
        m[f"gpus.{job.name}"] = o.gpus if o else None
        m[f"method.{job.name}"] = o.method if o else None
        m[f"hours.{job.name}"] = o.hours if o else None
        m[f"usd.{job.name}"] = o.usd if o else None
        m[f"tokens_per_s.{job.name}"] = o.tokens_per_s if o else None
        m[f"needed.{job.name}"] = o.member.needed if o else None
        m[f"reason.{job.name}"] = reasons.get(job.name, "")
        for pool in f.pools:
            cell = plan.cell(job.name, pool.name)
            best = cell.best
            key = f"{job.name}.{pool.name}"
            m[f"fits.{key}"] = best is not None
            m[f"cell_usd.{key}"] = best.usd if best else None
            m[f"cell_hours.{key}"] = best.hours if best else None
            m[f"cell_gpus.{key}"] = best.gpus if best else None
            m[f"cell_method.{key}"] = best.method if best else None
            m[f"fastest_hours.{key}"] = min((o.hours for o in cell.all_options), default=None)
            m[f"cell_reason.{key}"] = cell.reason or ""
    from searcher.fleet.buy_rent import buy_vs_rent

    for r in buy_vs_rent(plan):  # buy or rent, per pool
        m[f"utilization.{r.pool}"] = r.utilization
        m[f"break_even.{r.pool}"] = r.break_even
        m[f"verdict.{r.pool}"] = r.verdict
        m[f"own_usd.{r.pool}"] = r.own_usd
        m[f"rent_usd.{r.pool}"] = r.rent_usd
    return m


def check_metric(metric: str, expect: dict[str, Any], metrics: dict[str, Any]) -> Check:
    from searcher.scenarios.cases import check

    name = metric.split(" ", 1)[0]
    if name not in metrics:
        raise FitplanError(f"unknown fleet metric '{name}'", "see searcher/scenarios/fleet.py")
    got = metrics[name]
    if "contains" in expect:
        text = str(got or "")
        part = str(expect["contains"])
        return Check(
            metric=metric,
            expected=f"contains '{part}'",
            got=None,
            got_text=text,
            ok=part in text,
        )
    if got is None or isinstance(got, str | list):
        want = expect.get("equals")
        if isinstance(want, list):
            want = sorted(want)
        if "equals" not in expect:
            return Check(
                metric=metric,
                expected=str(expect),
                got=None,
                got_text=f"{got!r} (not a number)",
                ok=False,
            )
        return Check(
            metric=metric, expected=f"= {want}", got=None, got_text=str(got), ok=got == want
        )
    return check(metric, expect, got)


def run_fleet_file(path: str | Path) -> list[CaseResult]:
    from searcher.fleet.fleet_file import load_fleet
    from searcher.fleet.plan import plan_fleet

    fleet = load_fleet(path)
    cases: list[FleetExpect] = []
    for i, raw in enumerate(fleet.expect):
        try:
            cases.append(FleetExpect(**raw))
        except ValidationError as err:
            first = err.errors()[0]
            loc = ("expect", i, *first.get("loc", ()))
            raise fleet.lines.error(loc, str(first.get("msg"))) from None
    try:
        metrics = plan_metrics(plan_fleet(fleet))
    except FitplanError as err:
        return [
            CaseResult(
                file=str(path), case=c.name, source=c.source, note=c.note, checks=[], error=str(err)
            )
            for c in cases or [FleetExpect(name="plan", checks={})]
        ]
    if not cases:
        return [CaseResult(file=str(path), case="plan", source="", note="", checks=[])]

    def checks_of(c: FleetExpect) -> Callable[[], list[Check]]:
        return lambda: [check_metric(k, v, metrics) for k, v in c.checks.items()]

    return [case_result(path, c.name, c.source, c.note, checks_of(c)) for c in cases]
