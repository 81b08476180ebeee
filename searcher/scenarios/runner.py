"""Scenario files: worked examples with their expected values, evaluated and checked.

A scenario YAML holds ``cases``; each names a ``kind`` (how to evaluate it: ``explain`` by
default), its inputs, and ``expect``: metric → expectation. Metrics are the keys of
``fitplan explain --json``'s ``memory_bytes`` (``static``, ``weights``, ``total`` …), plus
``params.total``, ``params.trainable``, ``fits`` and ``bytes_per_param.<metric>``. Expectations:

    {gb: 84.0}  {gib: 78.23}  {bytes: 8388608}  {value: 12}    relative tolerance ``tol`` (0.005)
    {min_gb: 30, max_gb: 40}   (also min_gib / max_gib / min / max)                 a band
    {not_gb: 24.5, tol: 0.03}                                                         must differ
    {equals: true}                                                                    exact
    {contains: [lora], excludes: [full]}                                   for list-valued metrics

A metric may carry a note after a space (``static (GiB)``) to check one metric twice.

New kinds register in ``KINDS``; the runner and the checks stay the same. A file with ``pools``
and ``jobs`` is a fleet file: it is planned and its ``expect`` checked (searcher/scenarios/fleet.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from constraints.errors import FitplanError
from constraints.limits import excerpt
from searcher.scenarios.cases import (
    Case,
    CaseResult,
    Check,
    case_result,
    check,
    check_models,
    lookup,
    model_of,
)
from searcher.scenarios.checks import check_case


class ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    source: str = ""
    notes: str = ""
    cases: list[Case]


def _explain_metrics(case: Case) -> dict[str, Any]:
    from constraints.config import TrainConfig
    from constraints.constants import DEFAULT_HEADROOM
    from constraints.gpus import resolve_gpu
    from searcher.search.levers import advise
    from searcher.search.views import explanation_json

    spec = model_of(case.model)
    gpu = resolve_gpu(case.gpu)
    cfg = TrainConfig.model_validate(case.config)
    e = advise(spec, cfg, gpu, DEFAULT_HEADROOM if case.headroom is None else case.headroom)
    j = explanation_json(e)
    metrics: dict[str, Any] = dict(j["memory_bytes"])
    metrics["params.total"] = j["params"]["total"]
    metrics["params.trainable"] = j["params"]["trainable"]
    metrics["fits"] = j["fits"]
    metrics["needed"] = j["needed_bytes"]
    metrics["usable"] = j["gpu"]["usable_bytes"]
    return metrics


def _saved_tensor_metrics(case: Case) -> dict[str, Any]:
    """The source document's single saved tensor: batch × seq × hidden × bytes, and × layers."""
    i = case.inputs
    one = int(i["batch"]) * int(i["seq_len"]) * int(i["hidden"]) * float(i["bytes"])
    return {"tensor_bytes": one, "all_layers_bytes": one * int(i["layers"])}


def _inference_metrics(case: Case) -> dict[str, Any]:
    from constraints.gpus import resolve_gpu
    from constraints.inference import inference_memory

    spec = model_of(case.model)
    b = inference_memory(spec, resolve_gpu(case.gpu), **case.inputs)
    return {**b.model_dump(), "params.total": _params_total(spec)}


def _params_total(spec: Any) -> int:
    from constraints.params import total_params

    return total_params(spec)


def _uses_memory_lever(cfg: Any) -> bool:
    """8-bit optimizer states, optimizer-state sharding, CPU offload, reduced-precision states,
    or the optimizer step fused into backward: what fits a model whose fp32 Adam states do not."""
    from constraints.precision import recipe

    eight_bit = cfg.optimizer in ("adamw-8bit", "paged-adamw-8bit")
    sharded = cfg.zero >= 1 and cfg.dp > 1
    low_states = recipe(cfg.recipe).state_dtype is None and cfg.resolved_recipe()[0] != "fp32"
    return (
        eight_bit
        or sharded
        or cfg.offload != "none"
        or low_states
        or cfg.optimizer_in_backward
        or cfg.tp * cfg.pp > 1
    )


def _search_metrics(case: Case) -> dict[str, Any]:
    """Run the exhaustive search; metrics describe the front and the rejected families."""
    from constraints.gpus import resolve_gpu
    from constraints.units import parse_size
    from searcher.search.run import run_search
    from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE, SearchProblem
    from searcher.search.strategies import ExhaustiveStrategy

    i = dict(case.inputs)
    cpu_ram = i.pop("cpu_ram", None)
    problem = SearchProblem(
        model=model_of(case.model),
        gpu=resolve_gpu(case.gpu),
        max_gpus=int(i.pop("gpus", 1)),
        target_batch=int(i.pop("target_batch", 16)),
        seq_len=int(i.pop("seq_len", 2048)),
        cpu_ram_per_node=parse_size(str(cpu_ram)) if cpu_ram else DEFAULT_CPU_RAM_PER_NODE,
        pins=dict(case.config),
    )
    if i:
        raise FitplanError(f"search case '{case.name}': unknown inputs {sorted(i)}")
    r = run_search(problem, ExhaustiveStrategy())
    cfgs = [m.config for m in r.front]
    return {
        "front.size": len(cfgs),
        "front.methods": sorted({c.method for c in cfgs}),
        "front.all_use_a_memory_lever": all(_uses_memory_lever(c) for c in cfgs),
        "front.all_use_zero": bool(cfgs) and all(c.zero >= 1 for c in cfgs),
        "front.any_fits": bool(cfgs),
        "rejected.families": sorted(x.family for x in r.rejected),
    }


def _fits_metrics(case: Case) -> dict[str, Any]:
    from searcher.scenarios.fits import fits_metrics

    return fits_metrics(case)


def _inverse_metrics(case: Case) -> dict[str, Any]:
    from searcher.scenarios.inverse import inverse_metrics

    return inverse_metrics(case)


def _serve_metrics(case: Case) -> dict[str, Any]:
    from searcher.scenarios.serve import serve_metrics

    return serve_metrics(case)


KINDS: dict[str, Callable[[Case], dict[str, Any]]] = {
    "explain": _explain_metrics,
    "saved_tensor": _saved_tensor_metrics,
    "inference": _inference_metrics,
    "search": _search_metrics,
    "fits": _fits_metrics,
    "inverse": _inverse_metrics,
    "serve": _serve_metrics,
}


def register_kind(name: str, fn: Callable[[Case], dict[str, Any]]) -> None:
    KINDS[name] = fn


def load_file(path: str | Path) -> ScenarioFile:
    from searcher.validate import load_yaml

    p = Path(path)
    data, _root = load_yaml(p, "scenario file")
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise FitplanError(f"{p}: a scenario file is a mapping with 'title' and 'cases'")
    try:
        scenario = ScenarioFile(**data)
    except Exception as err:
        from pydantic import ValidationError

        if isinstance(err, ValidationError):
            first = err.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            raise FitplanError(f"{p}: {excerpt(loc, 80)[1:-1]}: {first['msg']}") from None
        raise
    check_models(scenario.cases, p)  # before any case runs
    for case in scenario.cases:
        if case.kind not in KINDS:
            raise FitplanError(
                f"{p}: case {excerpt(case.name, 80)}: unknown kind {excerpt(case.kind, 40)}",
                f"known: {', '.join(KINDS)}",
            )
        check_case(case, p)
    return scenario


def run_file(path: str | Path) -> list[CaseResult]:
    from searcher.scenarios.fleet import is_fleet_file, run_fleet_file

    if is_fleet_file(path):  # pools + jobs: plan the fleet and check its `expect`
        return run_fleet_file(path)
    scenario = load_file(path)
    results = []
    for case in scenario.cases:
        if case.kind not in KINDS:
            raise FitplanError(
                f"{path}: case '{case.name}': unknown kind '{case.kind}'",
                f"known: {', '.join(KINDS)}",
            )

        def checks(case: Case = case) -> list[Check]:
            metrics = KINDS[case.kind](case)
            return [check(m, exp, lookup(metrics, m)) for m, exp in case.expect.items()]

        results.append(case_result(path, case.name, case.source, case.note, checks))
    return results


def run_files(paths: Iterable[str | Path]) -> list[CaseResult]:
    out: list[CaseResult] = []
    for p in paths:
        out.extend(run_file(p))
    return out


def print_results(results: list[CaseResult]) -> None:
    from rich.table import Table

    from searcher.terminal import console

    out = console()
    current = None
    table = None
    for r in results:
        if r.file != current:
            if table is not None:
                out.print(table)
            current = r.file
            table = Table(title=r.file, title_justify="left")
            for col in ("case", "metric", "expected", "fitplan", "ok"):
                table.add_column(col)
        assert table is not None
        if r.error:
            table.add_row(r.case, "—", "—", r.error, "[red]error[/]")
            continue
        for i, c in enumerate(r.checks):
            table.add_row(
                r.case if i == 0 else "",
                c.metric,
                c.expected,
                c.got_text,
                "[green]ok[/]" if c.ok else "[red]MISS[/]",
            )
    if table is not None:
        out.print(table)
    n_ok = sum(r.ok for r in results)
    out.print(f"{n_ok}/{len(results)} cases pass")
