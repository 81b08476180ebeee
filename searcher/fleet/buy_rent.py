"""Buy or rent each pool: its utilisation in the placement against its 3-year cost of ownership.

A pool's utilisation is the share of its GPU-hours the placed jobs use while the plan runs,
Σ(GPUs × hours) / (pool GPUs × longest job), as if the plan ran back to back for the horizon;
``ownership.utilization`` in the fleet file sets it instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from constraints.errors import FitplanError
from constraints.frozen import frozen
from constraints.ownership import Ownership, ownership_of


class OwnershipIn(BaseModel):
    """Buy vs rent settings (constraints/ownership.py); any left out take the catalog's."""

    model_config = ConfigDict(extra="forbid")

    years: float | None = Field(default=None, gt=0)
    pue: float | None = Field(default=None, ge=1)
    usd_per_kwh: float | None = Field(default=None, ge=0)
    hosting_usd_per_gpu_year: float | None = Field(default=None, ge=0)
    utilization: float | None = Field(default=None, gt=0, le=1)


@frozen
class BuyRent:
    pool: str
    gpus: int
    utilization: float
    usd_per_gpu_hour: float
    ownership: Ownership

    @property
    def break_even(self) -> float:
        return self.ownership.break_even_utilization(self.usd_per_gpu_hour)

    @property
    def own_usd(self) -> float:
        """The whole pool's cost of ownership over the horizon at this utilisation."""
        return self.gpus * self.ownership.own_usd(self.utilization)

    @property
    def rent_usd(self) -> float:
        return self.gpus * self.ownership.rent_usd(self.usd_per_gpu_hour, self.utilization)

    @property
    def verdict(self) -> str:
        return "buy" if self.utilization > self.break_even else "rent"


def buy_vs_rent(plan: Any) -> list[BuyRent]:
    fleet = plan.fleet
    site = {k: v for k, v in fleet.ownership.items() if k != "utilization"}
    fixed_u = fleet.ownership.get("utilization")
    span = plan.makespan_hours
    out = []
    for pool in fleet.pools:
        gpu_hours = sum(
            p.option.gpus * p.option.hours for p in plan.placed if p.option.pool == pool.name
        )
        u = fixed_u if fixed_u is not None else (gpu_hours / (pool.count * span) if span else 0.0)
        try:
            own = ownership_of(
                pool.gpu.id, purchase_usd=pool.purchase_usd, power_w=pool.power_w, **site
            )
        except FitplanError:
            continue  # a custom card with no price or power: no row (give purchase_usd, power_w)
        out.append(BuyRent(pool.name, pool.count, float(u), pool.price, own))
    return out


def buy_rent_json(rows: list[BuyRent]) -> list[dict[str, Any]]:
    return [
        {
            "pool": r.pool,
            "gpus": r.gpus,
            "utilization": r.utilization,
            "break_even_utilization": r.break_even,
            "verdict": r.verdict,
            "years": r.ownership.years,
            "own_usd": r.own_usd,
            "rent_usd": r.rent_usd,
            "tco_usd_per_gpu": r.ownership.own_usd(r.utilization),
            "purchase_usd_per_gpu": r.ownership.purchase_usd,
            "power_w": r.ownership.power_w,
            "pue": r.ownership.pue,
            "usd_per_kwh": r.ownership.usd_per_kwh,
            "hosting_usd_per_gpu_year": r.ownership.hosting_usd_per_gpu_year,
            "usd_per_gpu_hour": r.usd_per_gpu_hour,
            "source": r.ownership.source,
        }
        for r in rows
    ]
