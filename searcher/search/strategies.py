"""Search strategies behind one small interface, like optuna's samplers.

A strategy turns a :class:`SearchProblem` into an :class:`Evaluation` of the configurations it
chose to evaluate; :func:`searcher.search.run.run_search` takes the Pareto front of the feasible ones.
A new strategy plugs in with :func:`register` and passes the shared contract tests
(tests/test_strategies.py).

- ``exhaustive``: every valid configuration, vectorised with numpy; exact. The default.
- ``optuna``: NSGA-II (multi-objective, constrained, seeded) through optuna's ask/tell interface,
  a population at a time evaluated as one numpy batch; ``storage`` (an optuna RDB URL such as
  ``sqlite:///fitplan.db``) lets several processes or machines share one study.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from constraints.config import TrainConfig
from constraints.config_batch import ConfigBatch
from constraints.errors import FitplanError
from searcher.search.evaluate import Evaluation, concat, evaluate
from searcher.search.factors import grid
from searcher.search.layout_refusal import checked_layout_rows
from searcher.search.space import SearchProblem, pair_ok, static_variants

Progress = Callable[[int, int], None]


class Strategy(Protocol):
    name: str

    def run(self, problem: SearchProblem, progress: Progress | None = None) -> Evaluation: ...


@dataclass
class ExhaustiveStrategy:
    """Every valid configuration, exactly. ``search`` streams the grid in chunks through sinks
    (:mod:`searcher.search.stream`); ``run`` returns the evaluation of the whole grid at once,
    for callers that want every row.

    ``prune`` skips rows that provably change no answer. Off by default: bounding a row runs
    the throughput model on it, about the cost of evaluating it, and on the benchmarks' grids
    (benchmarks/bench_scale.py, CPU time, one process) it only ever cost time — single node
    22,304 configurations 0.14 s pruned / 0.075 s not, 4,096 × H100 0.43 / 0.23 s, 16,384 × H100
    0.48 / 0.29 s, fleet 20 pools × 100 jobs 9.4 / 5.4 s — pruning 11–24 % of the rows."""

    chunk: int = 1 << 16
    prune: bool = False
    name: str = "exhaustive"

    def search(
        self, problem: SearchProblem, sinks: Sequence[Any], progress: Progress | None = None
    ) -> Any:
        from searcher.search.stream import stream_search

        return stream_search(problem, sinks, chunk=self.chunk, prune=self.prune, progress=progress)

    def run(self, problem: SearchProblem, progress: Progress | None = None) -> Evaluation:
        batch = grid(problem)
        n = len(batch)
        if n <= self.chunk:  # one chunk: no copy of the batch
            ev = evaluate(problem, batch)
            if progress:
                progress(n, n)
            return ev
        parts = []
        for start in range(0, n, self.chunk):
            idx = np.arange(start, min(n, start + self.chunk))
            parts.append(evaluate(problem, batch.take(idx)))
            if progress:
                progress(int(idx[-1]) + 1, n)
        return concat(parts)


@dataclass
class OptunaStrategy:
    """NSGA-II over the knobs. Objectives: cost, peak memory, −fidelity; constraint: memory
    within usable, hardware rules, CPU RAM (optuna's convention: ≤ 0 is feasible)."""

    trials: int = 2000
    population: int = 64
    seed: int = 0
    storage: str | None = None
    study_name: str | None = None
    name: str = "optuna"

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise FitplanError(f"--trials must be at least 1, got {self.trials}")
        if self.population < 2:
            raise FitplanError(f"the NSGA-II population must be at least 2, got {self.population}")

    def run(self, problem: SearchProblem, progress: Progress | None = None) -> Evaluation:
        try:
            import optuna
        except ImportError as err:  # pragma: no cover - optuna is a core dependency
            raise FitplanError("the optuna strategy needs optuna", "pip install optuna") from err
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        statics = static_variants(problem)
        rows = checked_layout_rows(problem)
        static_keys = _knob_choices(statics)
        from searcher.search.storage import fingerprint, open_study

        index: dict[tuple[Any, ...], dict[str, Any]] = {}
        for st in statics:
            index.setdefault(_choice_key(st), st)
        sampler = (
            optuna.samplers.NSGAIISampler(population_size=self.population, seed=self.seed)
            if self.storage is not None  # a shared study: other processes ask and tell too
            else _batch_nsga2(optuna)(population_size=self.population, seed=self.seed)
        )
        key = fingerprint(problem)
        name = self.study_name or f"fitplan-{key}"
        if self.study_name and problem.stack is not None:
            # the in-stack search has other choices per knob: a study of its own (optuna refuses
            # a parameter whose choices change within one study)
            name = f"{self.study_name}-stack-{key[:8]}"
        study = open_study(
            self.storage,
            name,
            problem_key=key,
            directions=["minimize", "minimize", "minimize"],
            sampler=sampler,
        )
        parts: list[Evaluation] = []
        done = 0
        while done < self.trials:
            n = min(self.population, self.trials - done)
            trials = [study.ask() for _ in range(n)]
            configs = [_suggest(t, index, statics, static_keys, rows, problem) for t in trials]
            ev = evaluate(problem, ConfigBatch.from_configs(configs))
            tput_all = _throughput_all(problem, ev)
            objectives = ev.objectives()
            objectives[:, 0] = tput_all
            over = ev.needed - ev.usable
            for i, trial in enumerate(trials):
                trial.set_constraint("gpu_memory_over_gib", float(over[i]) / 2**30)
                trial.set_constraint("hardware_rules_broken", float(ev.hardware[i] > 0))
                trial.set_constraint("cpu_ram_over", float(not ev.cpu_ok[i]))
                study.tell(trial, [float(x) for x in objectives[i]])
            parts.append(ev)
            done += n
            if progress:
                progress(done, self.trials)
        if self.storage is not None:  # a shared study: the front of every process's trials
            shared = _replay(study, index, statics, static_keys, rows, problem)
            if shared is not None:
                return shared
        return concat(parts)


def _replay(
    study: Any,
    index: dict[tuple[Any, ...], dict[str, Any]],
    statics: list[dict[str, Any]],
    keys: dict[str, list[Any]],
    rows: list[dict[str, Any]],
    problem: SearchProblem,
) -> Evaluation | None:
    """Every complete trial of a (shared) study, evaluated again from its parameters: the same
    configurations, so the same front, whichever process ran them."""
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    configs = [
        _suggest(optuna.trial.FixedTrial(t.params), index, statics, keys, rows, problem)
        for t in done
    ]
    return evaluate(problem, ConfigBatch.from_configs(configs)) if configs else None


def _throughput_all(problem: SearchProblem, ev: Evaluation) -> np.ndarray:
    """The cost objective for every trial (infeasible ones too: NSGA-II needs finite values)."""
    from constraints.throughput import throughput_arrays

    t = throughput_arrays(
        problem.model,
        ev.batch,
        problem.gpu,
        gpus_per_node=problem.gpus_per_node,
        inter_node_gb_s=problem.inter_node_gb_s,
        nvlink_domain=problem.nvlink_domain,
        memory=ev.memory,
    )
    cost = t["usd_per_mtok"]
    return np.where(np.isnan(cost), 1e6 / t["tokens_per_s"], cost)


def _knob_choices(statics: list[dict[str, Any]]) -> dict[str, list[Any]]:
    keys: dict[str, list[Any]] = {}
    for st in statics:
        for k, v in st.items():
            keys.setdefault(k, [])
            if v not in keys[k]:
                keys[k].append(v)
    return keys


def _batch_nsga2(optuna: Any) -> Any:
    """optuna's NSGA-II with bookkeeping that costs the same per trial however many came before.

    optuna finds a trial's generation by scanning every completed trial, and re-reads the parent
    population from every trial: O(trials) per trial. Here trials are asked and told a whole
    generation at a time into a fresh study, so trial n belongs to generation n // population
    (what optuna's scan would find), and a generation's parents never change once chosen."""

    class BatchNSGAIISampler(optuna.samplers.NSGAIISampler):
        def __init__(self, *, population_size: int, seed: int) -> None:
            super().__init__(population_size=population_size, seed=seed)
            self._size = population_size
            self._parents: dict[int, list[Any]] = {}

        def get_trial_generation(self, study: Any, trial: Any) -> int:
            key = self._get_generation_key()
            generation = trial.system_attrs.get(key)
            if generation is None:
                generation = trial.number // self._size
                study._storage.set_trial_system_attr(trial._trial_id, key, generation)
            return int(generation)

        def get_parent_population(self, study: Any, generation: int) -> list[Any]:
            # optuna returns the parents in selection order when it chooses them, in trial
            # order when it reads them back: the same here, without reading every trial
            if generation in self._parents:
                return self._parents[generation]
            parents = super().get_parent_population(study, generation)
            self._parents[generation] = sorted(parents, key=lambda t: t._trial_id)
            return parents

    return BatchNSGAIISampler


#: the knobs a trial chooses for each method (the rest follow from the static variant)
_CHOICE_KNOBS = ("method", "recipe", "optimizer", "checkpointing", "loss", "optimizer_in_backward")


def _choice_key(choice: dict[str, Any]) -> tuple[Any, ...]:
    method = choice["method"]
    extra = (
        () if method == "full" else ("lora_rank",) if method == "lora" else ("lora_rank", "quant")
    )
    return tuple(choice[k] for k in _CHOICE_KNOBS + extra)


def _suggest(
    trial: Any,
    index: dict[tuple[Any, ...], dict[str, Any]],
    statics: list[dict[str, Any]],
    keys: dict[str, list[Any]],
    rows: list[dict[str, Any]],
    problem: SearchProblem,
) -> TrainConfig:
    choice: dict[str, Any] = {}
    method = trial.suggest_categorical("method", keys["method"])
    choice["method"] = method
    for k in ("recipe", "optimizer", "checkpointing", "loss", "optimizer_in_backward"):
        choice[k] = trial.suggest_categorical(k, keys[k])
    if method != "full":
        choice["lora_rank"] = trial.suggest_categorical("lora_rank", keys["lora_rank"])
    if method == "qlora":
        choice["quant"] = trial.suggest_categorical(
            "quant", [q for q in keys["quant"] if q != "none"]
        )
    static = index.get(_choice_key(choice), statics[0])  # the first static variant that matches
    row = rows[trial.suggest_int("layout", 0, len(rows) - 1)]
    eight = static["optimizer"] in ("adamw-8bit", "paged-adamw-8bit")
    from constraints.config import CODE

    gpus = int(row["dp"]) * int(row["tp"]) * int(row["pp"])
    if not bool(
        pair_ok(
            static["optimizer_in_backward"],
            eight,
            row["grad_accum"],
            gpus,
            row["zero"],
            CODE["offload"][str(row["offload"])],
        )
    ):
        static = {**static, "optimizer_in_backward": False}
        if eight and row["offload"] != "none":
            static = {**static, "optimizer": "adamw"}
    return TrainConfig(**{**static, **row, "seq_len": problem.seq_len})


STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "exhaustive": ExhaustiveStrategy,
    "optuna": OptunaStrategy,
}


def register(name: str, factory: Callable[..., Strategy]) -> None:
    STRATEGIES[name] = factory


def make_strategy(name: str, **kwargs: Any) -> Strategy:
    if name not in STRATEGIES:
        raise FitplanError(f"unknown strategy '{name}'", f"use one of {', '.join(STRATEGIES)}")
    factory = STRATEGIES[name]
    dataclass_fields = getattr(factory, "__dataclass_fields__", None)
    accepted = set(dataclass_fields) if dataclass_fields is not None else set(kwargs)
    return factory(**{k: v for k, v in kwargs.items() if k in accepted and v is not None})
