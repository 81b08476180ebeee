"""``fitplan autotune``: measured trials on the local device, driven by optuna, seeded by the analytic front.

1. The analytic search (exhaustive) finds the configurations that fit one device and that
   ``fitplan measure`` can run in one process (no ZeRO/TP/PP/offload; bitsandbytes paths only
   where bitsandbytes and CUDA exist). They become the trial candidates, best predicted first.
2. An optuna study (TPE, seeded; ``--storage`` shares it between processes) chooses candidates;
   the analytic Pareto front is enqueued first, cheapest first, so the first trials measure what
   the model recommends.
3. Each trial builds the model from its config with random weights, runs ``--steps`` optimizer
   steps and records tokens/s (and, on CUDA, peak reserved memory). An out-of-memory error makes
   the trial infeasible: it is pruned, and the table says so next to the predicted peak.
4. The report ranks the measured trials and names the measured best.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from constraints.errors import FitplanError

#: knobs a single-process measurement applies (see searcher.truth.measure)
_SINGLE_PROCESS_PINS = {"zero": 0, "offload": "none", "tp": 1, "pp": 1, "loss": "standard"}


@dataclass
class Trial:
    number: int
    config: Any
    predicted_tokens_per_s: float | None
    predicted_reserved: int
    state: str = "pending"
    measured_tokens_per_s: float | None = None
    measured_reserved: int | None = None
    note: str = ""
    seeded: bool = False


@dataclass
class AutotuneResult:
    model: str
    device: str
    gpu: str
    trials: list[Trial] = field(default_factory=list)

    @property
    def best(self) -> Trial | None:
        done = [t for t in self.trials if t.state == "complete" and t.measured_tokens_per_s]
        return max(done, key=lambda t: t.measured_tokens_per_s or 0.0) if done else None


def _measurable(cfg: Any, device: str, has_bnb: bool) -> bool:
    if cfg.recipe == "bf16-pure" or cfg.optimizer in ("lion",) or cfg.checkpointing == "selective":
        return False
    needs_bnb = cfg.quant != "none" or cfg.optimizer in ("adamw-8bit", "paged-adamw-8bit")
    return not (needs_bnb and (device != "cuda" or not has_bnb))


def candidates(args: argparse.Namespace, device: str) -> tuple[Any, list[Any], list[int], Any]:
    """(problem, candidate configs best-predicted first, indices of the front among them, result)."""
    import importlib.util

    import numpy as np

    from searcher.inputs import search_problem
    from searcher.search.run import run_search
    from searcher.search.space import SearchProblem
    from searcher.search.strategies import ExhaustiveStrategy

    base = search_problem(args)
    problem = SearchProblem(
        **{**base.__dict__, "max_gpus": 1, "pins": {**base.pins, **_SINGLE_PROCESS_PINS}}
    )
    result = run_search(problem, ExhaustiveStrategy(), keep_evaluation=True)
    ev = result.evaluation
    assert ev is not None
    has_bnb = importlib.util.find_spec("bitsandbytes") is not None
    idx = np.flatnonzero(ev.feasible)
    speed = np.nan_to_num(ev.throughput["tokens_per_s"][idx], nan=0.0)
    idx = idx[np.argsort(-speed, kind="stable")]
    configs: list[Any] = []
    seen = set()
    for i in idx:
        cfg = ev.batch.config(int(i))
        key = cfg.model_dump_json()
        if key in seen or not _measurable(cfg, device, has_bnb):
            continue
        seen.add(key)
        configs.append(cfg)
        if len(configs) >= args.candidates:
            break
    front = []
    for m in result.front:
        if _measurable(m.config, device, has_bnb):
            if m.config not in configs:
                configs.append(m.config)
            front.append(configs.index(m.config))
    if not configs:
        raise FitplanError(
            "no configuration that fits can be measured in one process on this device",
            "fitplan search shows what fits; measure needs no ZeRO/TP/PP/offload (and CUDA + bitsandbytes for QLoRA)",
        )
    return problem, configs, front, result


def _measure_one(
    cfg: Any, cfg_dict: dict[str, Any], spec: Any, device: str, steps: int
) -> dict[str, Any]:
    import torch

    from searcher.truth.measure import run_steps
    from searcher.truth.training_setup import build

    torch.manual_seed(0)
    model = None
    try:
        model, _notes = build(spec, cfg_dict, cfg, device)
        out = run_steps(model, cfg, device, steps, spec.vocab, spec.arch == "encoder-decoder")
        tokens = cfg.micro_batch * cfg.seq_len * cfg.grad_accum
        return {"tokens_per_s": tokens / out["step_time_s"], "reserved": out.get("reserved")}
    finally:
        del model
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def _is_oom(err: BaseException) -> bool:
    text = str(err).lower()
    return "out of memory" in text or type(err).__name__ == "OutOfMemoryError"


def autotune(args: argparse.Namespace) -> AutotuneResult:
    from searcher.inputs import PRICE_ONLY_IN_SEARCH, check_layout_args, refuse_unused
    from searcher.truth.hf_build import config_of, quiet_transformers, require_torch

    refuse_unused(
        args,
        {
            "cpu_ram": "measured trials do not offload, so CPU RAM changes nothing",
            "price": PRICE_ONLY_IN_SEARCH,
        },
    )
    check_layout_args(args)
    if args.storage is not None:
        from searcher.search.storage import check_storage_url

        check_storage_url(args.storage)  # before the search and the model build
    if args.trials < 1:
        raise FitplanError(f"--trials must be at least 1, got {args.trials}")
    if args.steps < 1:
        raise FitplanError(f"--steps must be at least 1, got {args.steps}")
    require_torch()  # after what the arguments alone refuse
    quiet_transformers()
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=FutureWarning)
    from constraints.breakdown import breakdown_of
    from constraints.config_batch import ConfigBatch
    from constraints.throughput import throughput_arrays
    from searcher.truth.training_setup import detected_gpu, pick_device

    device = pick_device(args.device)
    if args.gpu is None:
        args.gpu = detected_gpu() if device == "cuda" else "a100-80gb"
    cfg_dict, spec = config_of(args.model)
    problem, configs, front, _result = candidates(args, device)
    gpu = problem.gpu
    predicted = throughput_arrays(spec, ConfigBatch.from_configs(configs), gpu)["tokens_per_s"]
    reserved = [b.reserved for b in breakdown_of(spec, configs, gpu)]
    result = AutotuneResult(model=spec.id, device=device, gpu=gpu.id)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from searcher.search.storage import fingerprint, open_study

    study = open_study(
        args.storage,
        args.study_name,
        problem_key=f"autotune-{device}-{args.steps}-{fingerprint(problem)}",
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed),
    )
    for i in front[: args.trials]:  # a second worker finds them queued already
        study.enqueue_trial({"candidate": i}, skip_if_exists=True)
    seeded = set(front[: args.trials])
    measured: dict[int, Trial] = {}
    for _ in range(args.trials):
        trial = study.ask()
        i = int(trial.suggest_categorical("candidate", list(range(len(configs)))))
        cfg = configs[i]
        t = Trial(
            number=trial.number,
            config=cfg,
            predicted_tokens_per_s=float(predicted[i]) if predicted[i] == predicted[i] else None,
            predicted_reserved=reserved[i],
            seeded=i in seeded,
        )
        shared = _measured_elsewhere(study, i, trial.number) if i not in measured else None
        if shared is not None:  # another worker of the shared study measured it: reuse
            t.state, t.measured_tokens_per_s, t.note = (
                "complete",
                shared,
                "measured by another worker",
            )
            measured[i] = t
        elif i in measured:  # the sampler came back to a measured candidate: reuse the measurement
            prev = measured[i]
            t.state, t.measured_tokens_per_s, t.measured_reserved, t.note = (
                prev.state,
                prev.measured_tokens_per_s,
                prev.measured_reserved,
                "repeat",
            )
        else:
            try:
                out = _measure_one(cfg, cfg_dict, spec, device, args.steps)
                t.state, t.measured_tokens_per_s, t.measured_reserved = (
                    "complete",
                    out["tokens_per_s"],
                    out["reserved"],
                )
            except Exception as err:
                if not _is_oom(err):
                    if isinstance(err, FitplanError):
                        t.state, t.note = "skipped", str(err)
                    else:
                        raise
                else:
                    t.state, t.note = "oom", "out of memory: infeasible, pruned"
            measured[i] = t
        if t.state == "complete" and t.measured_tokens_per_s:
            study.tell(trial, t.measured_tokens_per_s)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        result.trials.append(t)
    return result


def _measured_elsewhere(study: Any, candidate: int, number: int) -> float | None:
    """tokens/s of ``candidate`` if a complete trial of the (shared) study already measured it."""
    import optuna

    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if t.number != number and t.params.get("candidate") == candidate and t.value:
            return float(t.value)
    return None


def result_json(r: AutotuneResult) -> dict[str, Any]:
    def trial(t: Trial) -> dict[str, Any]:
        return {
            "trial": t.number,
            "state": t.state,
            "seeded_from_front": t.seeded,
            "config": t.config.model_dump(),
            "predicted_tokens_per_s": t.predicted_tokens_per_s,
            "measured_tokens_per_s": t.measured_tokens_per_s,
            "predicted_reserved_bytes": t.predicted_reserved,
            "measured_reserved_bytes": t.measured_reserved,
            "note": t.note,
        }

    best = r.best
    return {
        "model": r.model,
        "device": r.device,
        "gpu_for_prediction": r.gpu,
        "trials": [trial(t) for t in r.trials],
        "best": trial(best) if best else None,
    }


def cmd_autotune(args: argparse.Namespace) -> int:
    result = autotune(args)
    if args.json:
        sys.stdout.write(json.dumps(result_json(result), indent=2) + "\n")
        return 0 if result.best else 1
    from rich.table import Table

    from constraints.units import GiB
    from searcher.search.briefs import config_brief
    from searcher.terminal import console

    out = console()
    table = Table(
        title=f"autotune: {result.model} on {result.device} ({len(result.trials)} trials)",
        title_justify="left",
    )
    pred = f"predicted tok/s ({result.gpu})"
    for col in (
        "trial",
        "from",
        "configuration",
        pred,
        "measured tok/s",
        "pred. reserved GiB",
        "meas. reserved GiB",
        "state",
    ):
        table.add_column(
            col, justify="left" if col in ("configuration", "from", "state") else "right"
        )
    for t in result.trials:
        table.add_row(
            str(t.number),
            "front" if t.seeded else "optuna",
            config_brief(t.config),
            f"{t.predicted_tokens_per_s:,.0f}" if t.predicted_tokens_per_s else "—",
            f"{t.measured_tokens_per_s:,.0f}" if t.measured_tokens_per_s else "—",
            f"{t.predicted_reserved / GiB:.2f}",
            f"{t.measured_reserved / GiB:.2f}" if t.measured_reserved else "—",
            t.state + (f" ({t.note})" if t.note and t.state != "complete" else ""),
        )
    out.print(table)
    best = result.best
    if best is None:
        out.print("[red]no trial completed[/]")
        return 1
    out.print(
        f"measured best: {config_brief(best.config)} — {best.measured_tokens_per_s:,.0f} tokens/s"
        + (" (CPU: memory not measured)" if result.device == "cpu" else "")
    )
    return 0
