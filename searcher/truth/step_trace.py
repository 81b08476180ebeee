"""Trace real training steps of a fitplan configuration on fake tensors and count its peak.

The HF model is built from its ``config.json`` on the meta device (random init, nothing
downloaded), wrapped as the user's stack wraps it (PEFT LoRA with its defaults; QLoRA with the
bitsandbytes NF4 emulation of :mod:`searcher.truth.fake_quant` and PEFT's
``prepare_model_for_kbit_training``; HF gradient checkpointing, non-reentrant), materialised with
``to_empty(device="cpu")`` inside a ``FakeTensorMode``, and run for two full steps (forward with
labels, so transformers computes the loss with its fp32 upcast; backward; gradient clipping at
HF Trainer's default ``max_grad_norm`` 1.0; the optimizer step; ``zero_grad(set_to_none=True)``).
The second step is measured: optimizer state exists only after the first ``step()``. The first
step runs only its optimizer step, on zero gradients (``_seeded_step``: what it leaves behind is
the state a real first step leaves; the tracer falls back to a real one where a trainable
parameter gets no gradient), so a trace costs one forward and backward per traced depth.
:class:`searcher.truth.alloc_tracker.AllocTracker` counts every storage as the CUDA caching
allocator would (512-byte blocks); :mod:`searcher.truth.cuda_kernels` puts the CUDA attention and
dropout kernels' allocations in place of the CPU's.

Decoder layers are identical, so the step is traced at 3 and 4 layers and each segment is
extrapolated linearly to the model's depth (tests/truth/test_step_trace.py holds this to a full
trace, exact to the block).

Python API::

    from searcher.truth.step_trace import trace_step
    t = trace_step(spec, cfg)            # ModelSpec, TrainConfig
    t.peak_bytes, t.moment, t.composition  # int, "backward", {"parameters": …, …}
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from constraints.allocator_replay import AllocatorSettings, ReplayResult, replay
from constraints.config import TrainConfig
from constraints.models import ModelSpec
from searcher.truth.step_build import build, check_supported, optimizer_for, torch_dtype
from searcher.truth.step_replay import with_replay
from searcher.truth.step_segments import _hooks, _segment

#: HF Trainer's default gradient clipping (TrainingArguments.max_grad_norm)
HF_MAX_GRAD_NORM = 1.0
#: steps run; the last is measured
TRACED_STEPS = 2
#: blocks listed from the peak (StepTrace.largest)
LARGEST_BLOCKS = 12
#: layer counts traced for the extrapolation: enough for the first two and the last two layers
#: to be told apart (the first has no input gradient when the embedding is frozen; the last
#: meets the head), and every peak of a layer between them lies at one of those
TRACE_DEPTHS = (3, 4)


@dataclass
class StepTrace:
    """The traced peak allocated bytes of one training step (the second) of ``config``."""

    model: str
    config: TrainConfig
    peak_bytes: int
    #: the phase at the peak: forward, loss, backward, optimizer step
    moment: str
    #: bytes at the peak per category (alloc_tracker.CATEGORIES)
    composition: dict[str, int]
    #: bytes per decoder layer at the peak (the 3-layer minus the 2-layer trace)
    per_layer_bytes: int
    layers: int
    traced_layers: tuple[int, ...]
    #: bytes outside torch's allocator (paged optimizer states in unified memory)
    paged_bytes: int = 0
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: the largest blocks alive at the peak of the (deepest) traced model:
    #: (bytes, category, phase that allocated it, "dtype[shape]")
    largest: list[tuple[int, str, str, str]] = field(default_factory=list)
    #: the caching allocator replayed over both steps (constraints/allocator_replay.py):
    #: max_memory_reserved and max_memory_allocated (blocks: 512 B rounding, unsplit blocks
    #: whole); None when the trace ran without the replay
    peak_reserved_bytes: int | None = None
    replayed_allocated_bytes: int | None = None
    #: segments held at the reserved peak (of the deepest traced model)
    segments_at_peak: int = 0
    #: the allocator settings replayed, as PYTORCH_CUDA_ALLOC_CONF would say them
    allocator: str = ""
    #: the request the replayed allocator could not serve within the card's memory, bytes
    #: (its cache released first, as torch does); 0 = none
    oom_request_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "config": self.config.model_dump(),
            "peak_allocated_bytes": self.peak_bytes,
            "moment": self.moment,
            "composition": self.composition,
            "per_layer_bytes": self.per_layer_bytes,
            "layers": self.layers,
            "traced_layers": list(self.traced_layers),
            "paged_bytes": self.paged_bytes,
            "wall_s": self.wall_s,
            "notes": self.notes,
            "largest_blocks": [list(b) for b in self.largest],
            "peak_reserved_bytes": self.peak_reserved_bytes,
            "replayed_allocated_bytes": self.replayed_allocated_bytes,
            "segments_at_peak": self.segments_at_peak,
            "allocator": self.allocator,
            "oom_request_bytes": self.oom_request_bytes,
        }


@dataclass
class _Raw:
    #: segment → (peak bytes, phase, composition at that peak)
    segments: dict[str, tuple[int, str, dict[str, int]]]
    paged: int
    largest: dict[str, list[tuple[int, str, str, str]]]
    replayed: ReplayResult | None = None
    #: the allocator calls of every step (AllocTracker.events), when asked for
    events: list[tuple[str, object, int]] | None = None

    def top(self) -> tuple[str, tuple[int, str, dict[str, int]]]:
        return max(self.segments.items(), key=lambda kv: kv[1][0])


# --------------------------------------------------------------------------------------------
# Running the steps
# --------------------------------------------------------------------------------------------


@contextmanager
def _quiet_masks() -> Iterator[None]:
    """No packed-sequence detection (a data-dependent check fake tensors cannot answer)."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda *a, **k: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def _run(
    cfg_dict: dict[str, Any],
    cfg: TrainConfig,
    adamw_impl: str,
    steps: int,
    autocast_override: bool | None = None,
    seeded: bool = True,
    allocator: AllocatorSettings | None = None,
    keep_events: bool = False,
) -> _Raw:
    """Trace ``steps`` steps of ``cfg`` on the model of ``cfg_dict``, measuring the last.
    ``seeded``: the steps before the last are :func:`_seeded_step` (raises _UnusedParameters
    where that would not be exact); else real steps. ``allocator``: replay the caching
    allocator over every allocation and free of the steps with these settings."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from searcher.truth.alloc_tracker import make_tracker
    from searcher.truth.cuda_emulation import cuda_dropout
    from searcher.truth.cuda_kernels import cuda_attention

    weight, _grad, master, _state, compute, autocast = cfg.resolved_recipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, _note = build(cfg_dict, cfg)
    tracker = make_tracker()
    with ExitStack() as stack:
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(cuda_attention())
        stack.enter_context(cuda_dropout())
        stack.enter_context(_quiet_masks())
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        _materialise(model)
        stack.enter_context(tracker)
        for t in (*model.parameters(), *model.buffers()):
            tracker.label(t, "parameters")
        trainable = [p for p in model.parameters() if p.requires_grad]
        masters = None
        if master and trainable and trainable[0].dtype != torch.float32:
            tracker.set_phase("setup", "master_weights")
            masters = [p.detach().float() for p in trainable]
        opt = optimizer_for(cfg, masters or trainable, adamw_impl)
        _hooks(model, tracker)
        tracker.set_phase("setup", "inputs")
        ids = torch.zeros(cfg.micro_batch, cfg.seq_len, dtype=torch.long)
        use_amp = autocast and compute != weight
        if autocast_override is not None:
            use_amp = autocast_override and compute != "fp32"
        amp = torch.autocast("cpu", dtype=torch_dtype(compute)) if use_amp else None
        for step in range(steps):
            if step == steps - 1:
                tracker.reset_peak()
                if _one_step(model, opt, ids, trainable, masters, tracker, amp) and seeded:
                    raise _UnusedParameters
            elif seeded:
                _seeded_step(opt, trainable, masters, tracker)
            else:
                _one_step(model, opt, ids, trainable, masters, tracker, amp)
        paged = int(getattr(opt, "paged_bytes", 0))
        segments = {k: (p.bytes, p.phase, p.composition()) for k, p in tracker.segments.items()}
        largest = {
            k: [(b.nbytes, b.category, b.phase, b.what) for b in p.largest(LARGEST_BLOCKS)]
            for k, p in tracker.segments.items()
        }
    replayed = replay(tracker.events, allocator) if allocator is not None else None
    return _Raw(segments, paged, largest, replayed, tracker.events if keep_events else None)


def _run_exact(
    cfg_dict: dict[str, Any],
    cfg: TrainConfig,
    adamw_impl: str,
    steps: int,
    autocast_override: bool | None = None,
    allocator: AllocatorSettings | None = None,
) -> _Raw:
    """:func:`_run` with a seeded first step, or with real steps where a trainable parameter
    gets no gradient (a seeded step would give it optimizer state) or where the allocator is
    replayed (the cache a real first step's forward and backward leave shapes the second's)."""
    if allocator is None:
        try:
            return _run(cfg_dict, cfg, adamw_impl, steps, autocast_override, seeded=True)
        except _UnusedParameters:
            pass
    return _run(cfg_dict, cfg, adamw_impl, steps, autocast_override, False, allocator)


def _materialise(model: Any) -> None:
    """``to_empty(device="cpu")`` (fake storages), keeping tied parameters tied: ``_apply``
    makes a new Parameter per module when the tensor type changes (meta → fake), which would
    untie an output head from its embedding."""
    shared: dict[int, list[tuple[Any, str]]] = {}
    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                shared.setdefault(id(p), []).append((module, name))
    model.to_empty(device="cpu")
    for places in shared.values():
        first_module, first_name = places[0]
        for module, name in places[1:]:
            module._parameters[name] = first_module._parameters[first_name]


def _one_step(
    model: Any, opt: Any, ids: Any, trainable: list[Any], masters: Any, tracker: Any, amp: Any
) -> int:
    """One training step; returns how many trainable parameters backward left without a
    gradient."""
    tracker.set_phase("forward", "activations")
    if amp is not None:
        with amp:
            out = model(input_ids=ids, labels=ids)
    else:
        out = model(input_ids=ids, labels=ids)
    loss = out.loss
    del out
    tracker.set_phase("backward", "temporaries")
    loss.backward()
    del loss
    without_grad = sum(p.grad is None for p in trainable)
    _optimizer_step(opt, trainable, masters, tracker)
    return without_grad


def _seeded_step(opt: Any, trainable: list[Any], masters: Any, tracker: Any) -> None:
    """A first step without its forward and backward: each trainable parameter gets a zero
    gradient of its own shape and dtype (what backward leaves when every trainable parameter is
    used, which :func:`_one_step` checks on the measured step), then the optimizer step as
    :func:`_one_step` runs it. The optimizer state it leaves is the state a real first step
    leaves (state tensors take the parameter's shape and dtype, never the gradient's values), and
    nothing else a forward or backward allocates outlives its step (autocast's weight cache is
    cleared on leaving autocast; tests/truth/test_step_trace_fast.py holds a seeded trace to one
    with two real steps). Under fake tensors a trace costs its operators; this halves them."""
    import torch

    tracker.set_phase("backward", "temporaries")
    for p in trainable:
        p.grad = torch.zeros_like(p)
    _optimizer_step(opt, trainable, masters, tracker)


class _UnusedParameters(Exception):
    """Trainable parameters without a gradient after backward: a seeded first step would have
    given them optimizer state that a real one does not."""


def _optimizer_step(opt: Any, trainable: list[Any], masters: Any, tracker: Any) -> None:
    import torch

    tracker.set_phase("optimizer step", "optimizer_transient")
    torch.nn.utils.clip_grad_norm_(trainable, HF_MAX_GRAD_NORM, foreach=True)
    if masters is not None:
        # the cast in segments of the layer being cast: live bytes while layer i is cast are
        # fp32 gradients before it and 16-bit ones after, so a single segment's peak (the first,
        # largest parameter at 3 and 4 layers, the last at 28) would not be linear in the depth
        place_of = getattr(tracker, "place_of", {})
        after_layers = False
        for p, m in zip(trainable, masters, strict=True):
            place = place_of.get(id(p))
            after_layers = after_layers or place is not None
            if place is None:
                place = "after" if after_layers else "before"
            tracker.set_segment(_segment("optimizer step:master cast", place))
            m.grad = p.grad.float()
            p.grad = None
        tracker.set_segment("optimizer step:update")
    opt.step()
    if masters is not None:
        for p, m in zip(trainable, masters, strict=True):
            p.data.copy_(m)
    for s in opt.state.values():
        for t in s.values():
            if isinstance(t, torch.Tensor):
                tracker.label(t, "optimizer_state")
    opt.zero_grad(set_to_none=True)
    if masters is not None:
        for m in masters:
            m.grad = None
    tracker.set_phase("between steps", "temporaries")


# --------------------------------------------------------------------------------------------
# The public function
# --------------------------------------------------------------------------------------------


def trace_depths(spec: ModelSpec) -> tuple[int, int]:
    """The two depths a deep model is traced at: :data:`TRACE_DEPTHS`, or where its layers
    follow a pattern of token mixers (Qwen 3.5: three gated DeltaNets, then attention), one
    and two whole periods of it, so that their difference is a period's layers."""
    mixers = spec.layer_mixers
    period = next(
        (
            p
            for p in range(1, len(mixers) + 1)
            if all(m == mixers[i % p] for i, m in enumerate(mixers))
        ),
        1,
    )
    return TRACE_DEPTHS if period == 1 else (period, 2 * period)


def _depth_of(cfg_dict: dict[str, Any]) -> int:
    from searcher.truth.hf_build import depth_of

    return depth_of(cfg_dict)


def trace_step(
    spec: ModelSpec,
    cfg: TrainConfig,
    *,
    hf_config_dict: dict[str, Any] | None = None,
    full_depth: bool = False,
    adamw_impl: str = "fused",
    steps: int = TRACED_STEPS,
    autocast: bool | None = None,
    allocator: AllocatorSettings | None = None,
) -> StepTrace:
    """Trace two training steps of ``cfg`` on ``spec``'s HF model; the second step's peak.

    ``hf_config_dict``: the model's ``config.json`` fields (default: the catalog entry of
    ``spec.id``). ``full_depth``: trace every layer instead of extrapolating from 3 and 4.
    ``adamw_impl``: ``fused`` (HF Trainer's ``adamw_torch_fused``) or ``foreach`` (torch's
    default on CUDA). ``steps``: steps run, the last measured (2: optimizer state exists from the
    first ``step()`` on; 1 shows a first step). ``autocast``: run forward under
    ``torch.autocast(compute dtype)`` (HF Trainer with ``bf16=True``/``fp16=True`` does, through
    accelerate, whatever dtype the model was loaded in); default: the recipe's. ``allocator``:
    replay the CUDA caching allocator with these settings over both (real) steps and report the
    reserved peak beside the allocated one. Needs torch, transformers and peft (the ``measure``
    extra).
    """
    from searcher.truth.hf_build import require_torch, with_layers

    require_torch()
    check_supported(spec, cfg)
    if hf_config_dict is None:
        from searcher.truth.hf_build import config_of

        hf_config_dict, _ = config_of(spec.id)
    start = time.perf_counter()
    depth = _depth_of(hf_config_dict)
    depths = trace_depths(spec)
    if full_depth or depth <= max(depths):
        raw = _run_exact(hf_config_dict, cfg, adamw_impl, steps, autocast, allocator)
        seg, (peak, moment, comp) = raw.top()
        elapsed = time.perf_counter() - start
        trace = StepTrace(
            spec.id, cfg, peak, moment, comp, 0, depth, (depth,), raw.paged, elapsed,
            [f"peak in segment {seg}"], raw.largest[seg],
        )  # fmt: skip
        return with_replay(trace, allocator, raw.replayed, raw.replayed, 0)
    runs = []
    for n in depths:
        small = with_layers(hf_config_dict, n)
        runs.append(
            (_depth_of(small), _run_exact(small, cfg, adamw_impl, steps, autocast, allocator))
        )
    (l2, a), (l3, b) = runs
    trace = _extrapolate(spec, cfg, depth, (l2, a), (l3, b), time.perf_counter() - start)
    extra = (depth - l3) / (l3 - l2)
    return with_replay(trace, allocator, a.replayed, b.replayed, extra)


def _extrapolate(
    spec: ModelSpec,
    cfg: TrainConfig,
    depth: int,
    shallow: tuple[int, _Raw],
    deeper: tuple[int, _Raw],
    elapsed: float,
) -> StepTrace:
    """Each segment's peak (and composition) linearly in the layer count, from two depths; the
    step's peak is the highest extrapolated segment. Middle layers are left out: their peaks lie
    between the first's and the last's (live bytes change linearly from layer to layer)."""
    (l2, a), (l3, b) = shallow, deeper
    steps = l3 - l2
    extra = depth - l3
    best: tuple[int, str, dict[str, int], int, str] | None = None
    for seg, (p3, moment, c3) in b.segments.items():
        if seg.endswith(":middle") or seg not in a.segments:
            continue
        p2, _m, c2 = a.segments[seg]
        per_layer = (p3 - p2) // steps
        peak = p3 + extra * per_layer
        if best is None or peak > best[0]:
            comp = {k: c3[k] + extra * (c3[k] - c2[k]) // steps for k in c3}
            best = (peak, moment, comp, per_layer, seg)
    assert best is not None
    peak, moment, comp, per_layer, seg = best
    paged = b.paged + extra * (b.paged - a.paged) // steps
    return StepTrace(
        spec.id, cfg, peak, moment, comp, per_layer, depth, (l2, l3), paged, elapsed,
        notes=[f"peak in segment {seg}"], largest=b.largest[seg],
    )  # fmt: skip
