"""The CUDA out-of-memory message, parsed.

The formats are those of PyTorch's ``c10/cuda/CUDACachingAllocator.cpp`` (sizes from its
``format_size``: bytes, KiB, MiB, GiB):

- torch ≥ 2.1: ``CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
  23.64 GiB of which 1.20 GiB is free. [Process 123 has 22.4 GiB memory in use. | Including
  non-PyTorch memory, this process has 22.4 GiB memory in use.] Of the allocated memory 20.10 GiB
  is allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated. If reserved but
  unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True …``
- torch ≤ 2.0: ``CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity;
  130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)``
"""

from __future__ import annotations

import math
import re

from constraints.errors import FitplanError
from constraints.frozen import frozen

_UNITS = {"bytes": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB)"
EXPANDABLE = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


#: the largest size an OOM message can name, bytes: 1 PiB, far above any GPU's memory (a B200 has
#: 180 GiB); a larger figure is a pasted or edited message, not torch's
MAX_OOM_BYTES = 2**50


def _bytes(number: str, unit: str) -> int:
    """Bytes of a size in torch's OOM text (``format_size``), or one line naming the bad figure."""
    try:
        value = float(number) * _UNITS[unit.lower()]
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= MAX_OOM_BYTES:
        raise FitplanError(
            f"--oom: {number} {unit} is not a size torch reports (at most 1 PiB)",
            "paste the message exactly as torch printed it",
        )
    return round(value)


@frozen
class OomMessage:
    requested: int
    gpu_index: int
    capacity: int
    free: int
    allocated: int | None
    reserved_unallocated: int | None
    process_in_use: int | None
    other_process: bool

    @property
    def fragmentation(self) -> bool:
        """The allocator failed although it held more reserved-but-unallocated memory than the
        request: free, but in blocks too small — fragmentation."""
        return (self.reserved_unallocated or 0) >= self.requested

    @property
    def in_use(self) -> int:
        """What PyTorch held when the allocation failed, plus the request."""
        return (self.allocated or 0) + (self.reserved_unallocated or 0) + self.requested


def parse_oom(text: str) -> OomMessage:
    t = " ".join(text.split())
    m = re.search(rf"Tried to allocate {_SIZE}", t)
    if not m:
        raise FitplanError(
            "--oom: no 'Tried to allocate …' in the message",
            "paste the whole 'CUDA out of memory. Tried to allocate …' line from the traceback",
        )
    requested = _bytes(*m.groups())
    new = re.search(rf"GPU (\d+) has a total capacity of {_SIZE} of which {_SIZE} is free", t)
    if new:
        gpu, cap_n, cap_u, free_n, free_u = new.groups()
        alloc = re.search(rf"Of the allocated memory {_SIZE} is allocated by PyTorch", t)
        ru = re.search(rf"and {_SIZE} is reserved by PyTorch but unallocated", t)
        proc = re.search(rf"this process has {_SIZE} memory in use", t)
        other = re.search(rf"Process \d+ has {_SIZE} memory in use", t)
        return OomMessage(
            requested=requested,
            gpu_index=int(gpu),
            capacity=_bytes(cap_n, cap_u),
            free=_bytes(free_n, free_u),
            allocated=_bytes(*alloc.groups()) if alloc else None,
            reserved_unallocated=_bytes(*ru.groups()) if ru else None,
            process_in_use=_bytes(*used.groups()) if (used := proc or other) else None,
            other_process=bool(other) and not proc,
        )
    old = re.search(
        rf"\(GPU (\d+); {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free; "
        rf"{_SIZE} reserved in total by PyTorch\)",
        t,
    )
    if old:
        g = old.groups()
        allocated = _bytes(g[3], g[4])
        reserved = _bytes(g[7], g[8])
        return OomMessage(
            requested=requested,
            gpu_index=int(g[0]),
            capacity=_bytes(g[1], g[2]),
            free=_bytes(g[5], g[6]),
            allocated=allocated,
            reserved_unallocated=max(reserved - allocated, 0),
            process_in_use=None,
            other_process=False,
        )
    raise FitplanError(
        "--oom: the message names no GPU capacity",
        "paste the line with 'GPU 0 has a total capacity of …' (torch ≥ 2.1) or "
        "'(GPU 0; … total capacity; …)' (older torch)",
    )


def diagnosis(oom: OomMessage) -> list[str]:
    """What the numbers in the message say, one line each."""
    from constraints.units import GiB

    lines = [
        f"the run asked for {oom.requested / GiB:.2f} GiB more with {oom.free / GiB:.2f} GiB free "
        f"of {oom.capacity / GiB:.2f} GiB (GPU {oom.gpu_index})"
    ]
    if oom.allocated is not None:
        lines.append(
            f"PyTorch held {oom.allocated / GiB:.2f} GiB in tensors and "
            f"{(oom.reserved_unallocated or 0) / GiB:.2f} GiB reserved but unallocated"
        )
    if oom.fragmentation:
        lines.append(
            f"fragmentation: {(oom.reserved_unallocated or 0) / GiB:.2f} GiB sit reserved in blocks "
            f"too small for the request; set {EXPANDABLE} before launching"
        )
    if oom.other_process:
        lines.append(
            "another process holds memory on this GPU: the numbers are not this run's alone"
        )
    return lines
