"""Count what a CUDA caching allocator would hold, op by op, while real torch code runs on fakes.

:class:`AllocTracker` is a ``TorchDispatchMode`` entered inside a ``FakeTensorMode``: every aten
op's outputs are inspected, each storage not seen before is charged once (views share their base's
storage), rounded up as the CUDA caching allocator rounds a request (512-byte blocks), and a
``weakref`` finaliser on the storage object uncharges it when the last tensor using it dies (torch
keeps one Python object per storage alive as long as the storage, so the finaliser fires exactly at
the free). This is the core that ``torch.distributed._tools.mem_tracker.MemTracker`` is built on,
without its per-parameter hooks (which fail on frozen PEFT parameters in torch 2.13).

Each block carries a category, set when it is allocated (from the step's current phase) and
re-labelled when the driver learns more (a backward temporary that becomes ``p.grad``, a tensor
that ends up in ``optimizer.state``). The peak keeps references to the blocks alive at that
moment, so its composition is read with their final labels.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from constraints.allocator import MIN_BLOCK_BYTES, round_request, rounding_slack

#: the CUDA caching allocator rounds every request up to a multiple of 512 bytes
#: (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize = 512, round_size; constraints/allocator.py)
CUDA_BLOCK_BYTES = MIN_BLOCK_BYTES

#: categories a block can carry
CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "master_weights",
    "activations",
    "recomputed",
    "logits_and_loss",
    "temporaries",
    "optimizer_transient",
    "inputs",
)


def cuda_rounded(nbytes: int) -> int:
    """Bytes the CUDA caching allocator hands out for a request of ``nbytes`` (0 stays 0)."""
    return round_request(nbytes)


@dataclass(eq=False)
class Block:
    """One storage: its rounded size, its category and the phase that allocated it."""

    nbytes: int
    category: str
    phase: str
    #: dtype and shape of the tensor that first showed the storage, e.g. "float32[2, 2048, 4096]"
    what: str = ""
    alive: bool = True


@dataclass
class Peak:
    bytes: int = 0
    phase: str = ""
    segment: str = ""
    blocks: list[Block] = field(default_factory=list)

    def largest(self, n: int) -> list[Block]:
        """The ``n`` largest blocks alive at the peak."""
        return sorted(self.blocks, key=lambda b: -b.nbytes)[:n]

    def rounding_slack(self, expandable: bool = False) -> int:
        """Reserved beyond these live blocks that the allocator's rounding rules force, bytes:
        each block of 10 MiB or more in a segment of its own rounded up to 2 MiB (none with
        expandable segments); constraints/allocator.py."""
        return rounding_slack([b.nbytes for b in self.blocks], expandable)

    def composition(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for b in self.blocks:
            out[b.category] = out.get(b.category, 0) + b.nbytes
        return out


def _storages(t: Any) -> list[Any]:
    """The untyped storages behind ``t``: its own, or its inner tensors' for a wrapper
    subclass (torch.distributed._tools.common_utils.get_untyped_storages)."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    wrapper = bool(is_traceable_wrapper_subclass(t))
    if not wrapper:
        return [t.untyped_storage()]
    from torch.distributed._tools.common_utils import get_untyped_storages

    return list(get_untyped_storages(t))


def _dispatch_base() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def make_tracker() -> AllocTracker:
    """A new tracker (the class is built lazily so that importing this module needs no torch)."""
    return _tracker_class()()


_CLASS: list[type] = []


def _tracker_class() -> type[AllocTracker]:
    if _CLASS:
        return _CLASS[0]
    import torch
    from torch.utils._pytree import tree_map_only

    base: Any = _dispatch_base()
    tensor = torch.Tensor

    class _Tracker(base, AllocTracker):
        def __init__(self) -> None:
            base.__init__(self)
            AllocTracker.__init__(self)

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            out = func(*args, **(kwargs or {}))
            # the outputs in pytree's leaf order, without its flatten/unflatten for the common
            # shapes (a tensor, a flat tuple or list of tensors and scalars)
            if isinstance(out, tensor):
                self.track(out)
            elif isinstance(out, (tuple, list)):
                for o in out:
                    if isinstance(o, tensor):
                        self.track(o)
                    elif o is not None and not isinstance(o, (int, float, bool)):
                        tree_map_only(tensor, self.track, o)
            elif out is not None:
                tree_map_only(tensor, self.track, out)
            return out

    _CLASS.append(_Tracker)
    return _Tracker


class AllocTracker:
    """Live bytes by storage, the running peak and the phase (set by the step driver)."""

    def __init__(self) -> None:
        self._blocks: dict[int, tuple[Block, Any]] = {}  # id(storage) → (block, weakref)
        self.live = 0
        self.phase = "setup"
        self.category = "temporaries"  # default for new blocks in the current phase
        #: the structural place in the step (set by the driver: "forward:first", …); the peak of
        #: each segment is kept, so that traces at different depths can be matched segment-wise
        self.segment = "setup"
        self.segments: dict[str, Peak] = {}
        self.measuring = True
        #: the allocator calls in order, for constraints.allocator_replay: ("alloc", storage key,
        #: requested bytes), ("free", key, 0), ("reset_peak", None, 0)
        self.events: list[tuple[str, object, int]] = []

    def __enter__(self) -> AllocTracker:  # the dispatch mode's, in the class make_tracker builds
        raise NotImplementedError

    def __exit__(self, *exc: object) -> None:
        raise NotImplementedError

    # --- bookkeeping -------------------------------------------------------------------------

    def track(self, t: Any, category: str | None = None) -> None:
        """Charge the storages of ``t`` not seen before (to ``category`` or the phase's)."""
        for st in _storages(t):
            key = id(st)
            if key in self._blocks:
                continue
            what = f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
            block = Block(
                cuda_rounded(int(st.nbytes())), category or self.category, self.phase, what
            )
            ref = weakref.ref(st, self._finaliser(key))
            self._blocks[key] = (block, ref)
            self.events.append(("alloc", key, int(st.nbytes())))
            self.live += block.nbytes
            self._update_peak()

    def label(self, t: Any, category: str) -> None:
        """Re-label the storages of ``t`` (tracking them first if they are new)."""
        self.track(t, category)
        for st in _storages(t):
            entry = self._blocks.get(id(st))
            if entry is not None:
                entry[0].category = category

    def _finaliser(self, key: int) -> Any:
        def free(_ref: Any) -> None:
            self._free(key)

        return free

    def _free(self, key: int) -> None:
        entry = self._blocks.pop(key, None)
        if entry is not None:
            entry[0].alive = False
            self.live -= entry[0].nbytes
            self.events.append(("free", key, 0))

    def _update_peak(self) -> None:
        if not self.measuring:
            return
        blocks: list[Block] | None = None
        for key in self.segment.split("|"):  # a place may belong to two segments
            current = self.segments.get(key)
            if current is None or self.live > current.bytes:
                if blocks is None:
                    blocks = [b for b, _ in self._blocks.values()]
                self.segments[key] = Peak(self.live, self.phase, key, blocks)

    @property
    def peak(self) -> Peak:
        """The highest segment peak."""
        return max(self.segments.values(), key=lambda p: p.bytes, default=Peak())

    def reset_peak(self) -> None:
        """Start measuring afresh from what is alive now (the second step of a trace)."""
        self.segments = {}
        self.events.append(("reset_peak", None, 0))
        self._update_peak()

    def set_segment(self, segment: str) -> None:
        self.segment = segment
        self._update_peak()

    def set_phase(self, phase: str, category: str) -> None:
        """A new phase of the step (its own segment until the driver says where it is)."""
        self.phase = phase
        self.category = category
        self.set_segment(phase)

    def live_by_category(self) -> dict[str, int]:
        out = dict.fromkeys(CATEGORIES, 0)
        for b, _ in self._blocks.values():
            out[b.category] = out.get(b.category, 0) + b.nbytes
        return out
