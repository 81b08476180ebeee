"""Buy or rent a GPU: its total cost of ownership over a horizon against renting the hours used.

    own(u)  = purchase + hosting × years + power_kW × PUE × $/kWh × hours × u
    rent(u) = $/GPU-hour × hours × u                        hours = years × 8,766 h
    break-even u* = (purchase + hosting × years) / (hours × ($/GPU-hour − power_kW × PUE × $/kWh))

u is the utilisation (the share of the hours the GPU is busy); a busy GPU draws its rated power,
an idle one is not charged (an owned GPU's idle draw, ~10–20 % of rated, is left out). Defaults:
constraints/data/gpu_ownership.csv (price, power per GPU) and ownership_site.csv (horizon, PUE,
electricity, hosting), each row with its source; a fleet file overrides any of them.
"""

from __future__ import annotations

import csv
from functools import cache
from pathlib import Path

from constraints.errors import FitplanError
from constraints.frozen import frozen

DATA = Path(__file__).resolve().parent / "data"
HOURS_PER_YEAR = 365.25 * 24


@frozen
class Ownership:
    """The cost inputs of one GPU: price and power, and its site."""

    purchase_usd: float
    power_w: float
    years: float
    pue: float
    usd_per_kwh: float
    hosting_usd_per_gpu_year: float
    source: str = ""

    @property
    def hours(self) -> float:
        return self.years * HOURS_PER_YEAR

    @property
    def fixed_usd(self) -> float:
        """Paid whether the GPU works or not: the purchase and the hosting."""
        return self.purchase_usd + self.hosting_usd_per_gpu_year * self.years

    @property
    def power_usd_per_busy_hour(self) -> float:
        return self.power_w / 1000.0 * self.pue * self.usd_per_kwh

    def own_usd(self, utilization: float) -> float:
        return self.fixed_usd + self.power_usd_per_busy_hour * self.hours * utilization

    def rent_usd(self, usd_per_gpu_hour: float, utilization: float) -> float:
        return usd_per_gpu_hour * self.hours * utilization

    def break_even_utilization(self, usd_per_gpu_hour: float) -> float:
        """The utilisation above which buying costs less than renting (inf: never)."""
        margin = usd_per_gpu_hour - self.power_usd_per_busy_hour
        return self.fixed_usd / (self.hours * margin) if margin > 0 else float("inf")


@cache
def site_defaults() -> dict[str, float]:
    with (DATA / "ownership_site.csv").open(encoding="utf-8") as f:
        return {r["key"]: float(r["value"]) for r in csv.DictReader(f)}


@cache
def gpu_ownership_defaults() -> dict[str, tuple[float, float, str]]:
    with (DATA / "gpu_ownership.csv").open(encoding="utf-8") as f:
        return {
            r["gpu"]: (float(r["purchase_usd"]), float(r["power_w"]), r["source"])
            for r in csv.DictReader(f)
        }


def ownership_of(
    gpu_id: str,
    *,
    purchase_usd: float | None = None,
    power_w: float | None = None,
    **site: float | None,
) -> Ownership:
    """The catalog's defaults for ``gpu_id`` and its site, with any given value in their place."""
    unknown = set(site) - set(site_defaults())
    if unknown:
        raise FitplanError(f"unknown ownership settings {sorted(unknown)}")
    values = {
        k: (v if site.get(k) is None else float(site[k] or 0)) for k, v in site_defaults().items()
    }
    known = gpu_ownership_defaults().get(gpu_id)
    if known is None and (purchase_usd is None or power_w is None):
        raise FitplanError(
            f"no purchase price or power for GPU '{gpu_id}' in the catalog",
            "give purchase_usd and power_w in the pool",
        )
    price, watts, source = known or (0.0, 0.0, "")
    return Ownership(
        purchase_usd=price if purchase_usd is None else purchase_usd,
        power_w=watts if power_w is None else power_w,
        years=values["years"],
        pue=values["pue"],
        usd_per_kwh=values["usd_per_kwh"],
        hosting_usd_per_gpu_year=values["hosting_usd_per_gpu_year"],
        source=source if purchase_usd is None and power_w is None else "the fleet file",
    )
