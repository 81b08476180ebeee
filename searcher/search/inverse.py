"""The inverse questions: the longest sequence, the largest micro-batch, the fewest GPUs for which
some configuration fits — and the cheapest catalog GPU that runs a job.

Each is a bisection over a quantity the feasible set shrinks (or grows) with monotonically, each
probe one exact exhaustive search of the full space at that value:

- sequence length: every term of the peak is non-decreasing in s (activations ∝ s or s², logits
  ∝ s), so "some configuration fits at s" holds for all s below the largest that fits;
- micro-batch: the same in b (the batch of a step is b × GPUs, accumulation 1, so that every
  micro-batch is a legal split);
- GPUs: "fits on at most n GPUs" is monotone by definition (a configuration on n GPUs is also one
  on at most n + 1), and the smallest such n is met with exactly n GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from constraints.errors import FitplanError
from constraints.frozen import frozen
from searcher.search.run import FrontMember, run_search
from searcher.search.space import SearchProblem
from searcher.search.strategies import make_strategy

#: the largest micro-batch probed (the bisection doubles up to it)
MAX_MICRO_BATCH = 65536
#: the longest sequence probed when the model states no context
MAX_SEQ_LEN = 1 << 20


@frozen
class InverseAnswer:
    """The extreme value found, the configuration that achieves it, and the probes it took."""

    question: str
    value: int | None
    member: FrontMember | None
    bound: int
    limited_by_bound: bool
    probes: int


def best_member(problem: SearchProblem) -> FrontMember | None:
    """The top of the front (cheapest) when some configuration fits, else None."""
    result = run_search(problem, make_strategy("exhaustive"))
    return result.front[0] if result.front else None


def _bisect_max(
    lo: int, hi: int, probe: Callable[[int], FrontMember | None], question: str
) -> InverseAnswer:
    """The largest x in [lo, hi] with probe(x) not None (probe monotone: true then false)."""
    probes = 1
    top = probe(hi)
    if top is not None:
        return InverseAnswer(question, hi, top, hi, True, probes)
    probes += 1
    best = probe(lo)
    if best is None:
        return InverseAnswer(question, None, None, hi, False, probes)
    good, bad = lo, hi
    while bad - good > 1:
        mid = (good + bad) // 2
        probes += 1
        m = probe(mid)
        if m is None:
            bad = mid
        else:
            good, best = mid, m
    return InverseAnswer(question, good, best, hi, False, probes)


def max_seq_len(problem: SearchProblem, upper: int | None = None) -> InverseAnswer:
    hi = upper or problem.model.max_position or MAX_SEQ_LEN
    return _bisect_max(1, hi, lambda s: best_member(replace(problem, seq_len=s)), "seq_len")


def max_micro_batch(problem: SearchProblem, upper: int = MAX_MICRO_BATCH) -> InverseAnswer:
    def probe(b: int) -> FrontMember | None:
        pins = {**problem.pins, "micro_batch": b}
        return best_member(replace(problem, pins=pins, target_batch=b * problem.max_gpus))

    # doubling to the first micro-batch that does not fit, then bisection below it
    b, probes, last = 1, 0, None
    while b <= upper:
        probes += 1
        m = probe(b)
        if m is None:
            break
        last, b = m, b * 2
    if last is None:
        return InverseAnswer("micro_batch", None, None, upper, False, probes)
    if b > upper:
        return InverseAnswer("micro_batch", last.config.micro_batch, last, upper, True, probes)
    ans = _bisect_max(b // 2, b, probe, "micro_batch")
    return replace(ans, probes=ans.probes + probes, bound=upper)


def min_gpus(problem: SearchProblem) -> InverseAnswer:
    """The fewest GPUs (up to ``problem.max_gpus``) on which some configuration fits."""

    def fits_within(n: int) -> FrontMember | None:
        return best_member(replace(problem, max_gpus=n, min_gpus=1))

    hi = problem.max_gpus
    probes = 1
    top = fits_within(hi)
    if top is None:
        return InverseAnswer("gpus", None, None, hi, False, probes)
    good_n, good = hi, top
    bad = 0
    while good_n - bad > 1:
        mid = (good_n + bad) // 2
        probes += 1
        m = fits_within(mid)
        if m is None:
            bad = mid
        else:
            good_n, good = mid, m
    return InverseAnswer("gpus", good.gpus, good, hi, False, probes)


@frozen
class GpuOption:
    gpu_id: str
    gpu_name: str
    usd_per_gpu_hour: float
    member: FrontMember


def cheapest_gpus(problem: SearchProblem, gpu_ids: list[str] | None = None) -> list[GpuOption]:
    """Every priced catalog GPU on which the job fits, cheapest $ per million tokens first."""
    from constraints.gpus import gpu_catalog

    out = []
    for gid, gpu in gpu_catalog().items():
        if gpu_ids is not None and gid not in gpu_ids:
            continue
        if not gpu.usd_per_gpu_hour:
            continue
        try:
            m = best_member(replace(problem, gpu=gpu))
        except FitplanError:
            continue
        if m is not None and m.usd_per_mtok is not None:
            out.append(GpuOption(gid, gpu.name, gpu.usd_per_gpu_hour, m))
    out.sort(key=lambda o: (o.member.usd_per_mtok, o.usd_per_gpu_hour))
    return out
