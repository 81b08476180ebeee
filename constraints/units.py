"""Units. Bytes are integers (or float64 arrays) inside; GB (1e9) and GiB (2^30) only at the edge."""

from __future__ import annotations

import re

from constraints.errors import FitplanError

KB = 1_000
MB = 1_000_000
GB = 1_000_000_000
TB = 1_000_000_000_000
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_SIZE_UNITS = {
    "b": 1,
    "kb": KB,
    "mb": MB,
    "gb": GB,
    "tb": TB,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]+)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'24GiB' -> 25769803776, '16GB' -> 16000000000. The unit is required: GB and GiB differ by 7 %."""
    m = _SIZE_RE.match(text) if len(text) <= 60 else None
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        shown = text if len(text) <= 60 else text[:59] + "…"
        raise FitplanError(
            f"cannot read the size '{shown}'",
            "write a number and a unit, e.g. 24GiB, 16GB, 81920MiB",
        )
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not value < 1e30:  # inf and absurd sizes: callers bound the range in their unit
        raise FitplanError(f"size '{text.strip()}' is absurdly large")
    if value <= 0:
        raise FitplanError(f"size '{text}' must be positive")
    return round(value)


def looks_like_size(text: str) -> bool:
    m = _SIZE_RE.match(text) if len(text) <= 60 else None
    return bool(m and m.group(2).lower() in _SIZE_UNITS)


def gb(n_bytes: float) -> float:
    return float(n_bytes) / GB


def gib(n_bytes: float) -> float:
    return float(n_bytes) / GiB


def fmt_bytes(n_bytes: float, digits: int = 2) -> str:
    """'14.00 GB (13.04 GiB)': both units wherever a person reads memory."""
    return f"{gb(n_bytes):.{digits}f} GB ({gib(n_bytes):.{digits}f} GiB)"


def fmt_count(n: float) -> str:
    """Parameter counts use decimal prefixes (never 1024 divisors): 8.03B, 41.9M."""
    n = float(n)
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}" if n / div < 100 else f"{n / div:.0f}{suffix}"
    return f"{n:.0f}"
