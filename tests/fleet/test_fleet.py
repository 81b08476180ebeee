"""Fleet planning: the fleet file, multi-node search per pool, exact placement, the CLI."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constraints.errors import FitplanError
from searcher.cli import main
from searcher.fleet.fleet_file import load_fleet
from searcher.fleet.options import Option, prune, within_limits
from searcher.fleet.placement import Item, solve_exhaustive, solve_milp
from searcher.fleet.plan import plan_fleet, plan_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scenarios" / "fleet-example.yaml"

SMALL = """\
title: small
pools:
  - name: big
    gpu: a100-80gb
    count: 16
    gpus_per_node: 8
    inter_node_gb_s: 25
    usd_per_gpu_hour: 1.5
  - name: small
    gpu: rtx-4090
    count: 2
    link: pcie
    usd_per_gpu_hour: 0.3
jobs:
  - name: tiny
    model: qwen2.5-0.5b
    methods: [full]
    target_batch: 16
    seq_len: 1024
    tokens: 50M
  - name: mid
    model: qwen2.5-1.5b
    methods: [lora]
    lora_rank: 16
    target_batch: 16
    seq_len: 1024
    tokens: 100M
"""


def write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ the fleet file


def test_example_loads_with_overrides() -> None:
    fleet = load_fleet(EXAMPLE)
    h100, g4090 = fleet.pools
    assert (h100.count, h100.gpus_per_node, h100.nodes) == (16, 8, 2)
    assert h100.price == 2.20  # the pool's price over the catalog's 2.50
    assert h100.gpu.interconnect_gb_s == 450  # NVLink 4 from the catalog
    assert g4090.gpu.interconnect_gb_s == pytest.approx(32 * 0.8)  # PCIe
    assert g4090.cpu_ram_per_node == 128 * 2**30
    assert fleet.jobs[0].tokens == 200e6 and fleet.jobs[2].tokens == 1e9
    assert fleet.jobs[0].methods == ("lora", "qlora")


def test_pool_link_overrides_the_catalog(tmp_path: Path) -> None:
    text = SMALL.replace("    link: pcie\n", "    link: nvlink\n    link_gb_s: 56\n")
    fleet = load_fleet(write(tmp_path, text))
    assert fleet.pools[1].gpu.interconnect_gb_s == 56
    text = SMALL.replace("    inter_node_gb_s: 25\n", "    inter_node_gb_s: 25\n    link: pcie\n")
    fleet = load_fleet(write(tmp_path, text))
    assert fleet.pools[0].gpu.interconnect_gb_s == pytest.approx(32 * 0.8)
    assert "PCIe" in fleet.pools[0].link


def test_custom_gpu_mapping(tmp_path: Path) -> None:
    text = SMALL.replace(
        "    gpu: rtx-4090\n",
        "    gpu: {name: My Card, memory: 48GiB, bf16_tflops: 200, bandwidth_gb_s: 1000}\n",
    )
    fleet = load_fleet(write(tmp_path, text))
    gpu = fleet.pools[1].gpu
    assert gpu.memory_bytes == 48 * 2**30 and gpu.bf16_tflops == 200 and not gpu.custom


@pytest.mark.parametrize(
    ("old", "new", "needles"),
    [
        ("gpu: a100-80gb", "gpu: a100-90gb", ["pools[0].gpu", "unknown GPU", ":4:"]),
        ("count: 16", "count: -3", ["pools[0].count", "≥ 1", "-3"]),
        ("count: 16", "count: 12", ["pools[0].count", "whole number of 8-GPU nodes"]),
        ("model: qwen2.5-0.5b", "model: qwen9-7b", ["jobs[0].model", "unknown model"]),
        ("methods: [lora]", "methods: [lora, dora]", ["jobs[1].methods[1]"]),
        ("    tokens: 50M\n", "    tokens: 50M\n    pools: [biggg]\n", ["jobs[0].pools[0]", "big"]),
        ("tokens: 100M", "tokens: lots", ["jobs[1].tokens", "lots"]),
        ("seq_len: 1024\n    tokens: 50M", "tokens: 50M", ["jobs[0].seq_len", "missing"]),
        ("    lora_rank: 16\n", "    lora_rnak: 16\n", ["jobs[1].lora_rnak", "unknown field"]),
        ("name: mid", "name: tiny", ["jobs[1].name", "already"]),
        ("gpu: rtx-4090", "gpu: 24GiB", ["pools[1].gpu", "compute figures"]),
        ("    link: pcie\n", "    link: nvlink\n", ["pools[1].link", "no NVLink"]),
        ("usd_per_gpu_hour: 0.3", "usd_per_gpu_hour: -1", ["pools[1].usd_per_gpu_hour"]),
        ("seq_len: 1024\n    tokens: 50M", "seq_len: 1000000\n    tokens: 50M", ["context"]),
        ("title: small\n", "title: small\n  bad: [\n", ["not valid YAML", ":2:"]),
    ],
)
def test_bad_fleet_files_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, needles: list[str]
) -> None:
    assert old in SMALL
    path = write(tmp_path, SMALL.replace(old, new, 1))
    assert main(["fleet", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_bad_fleet_from_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, SMALL.replace("count: 16", "count: -3"))
    proc = subprocess.run(
        [sys.executable, "-m", "searcher.cli", "fleet", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("fitplan: error:") and "pools[0].count" in proc.stderr
    for bad in (["fleet", "/nonexistent/fleet.yaml"], ["fleet", str(tmp_path)]):
        proc = subprocess.run(
            [sys.executable, "-m", "searcher.cli", *bad], capture_output=True, text=True
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_the_cli_stays_light() -> None:
    code = (
        "import sys, searcher.cli.parser; searcher.cli.parser.build_parser(); "
        "heavy = [m for m in ('scipy', 'matplotlib', 'pandas', 'searcher.fleet.plan') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ------------------------------------------------------------------ GPU counts and packing


@pytest.mark.parametrize(
    ("count", "per_node", "expected"),
    [
        (16, 8, (1, 2, 4, 8, 16)),
        (32, 8, (1, 2, 4, 8, 16, 24, 32)),
        (4, 8, (1, 2, 4)),
        (12, 6, (1, 2, 6, 12)),
    ],
)
def test_gpu_counts_are_a_chain_then_whole_nodes(
    tmp_path: Path, count: int, per_node: int, expected: tuple[int, ...]
) -> None:
    text = SMALL.replace(
        "count: 16\n    gpus_per_node: 8", f"count: {count}\n    gpus_per_node: {per_node}"
    )
    pool = load_fleet(write(tmp_path, text)).pools[0]
    assert pool.gpu_counts() == expected


def _first_fit_decreasing(sizes: list[int], nodes: int, per_node: int) -> bool:
    free = [per_node] * nodes
    for s in sorted(sizes, reverse=True):
        if s >= per_node:  # whole nodes
            whole = s // per_node
            empty = [i for i, f in enumerate(free) if f == per_node]
            if len(empty) < whole:
                return False
            for i in empty[:whole]:
                free[i] = 0
            continue
        for i, f in enumerate(free):
            if f >= s:
                free[i] -= s
                break
        else:
            return False
    return True


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    per_node=st.sampled_from([4, 6, 8]),
    nodes=st.integers(1, 4),
    data=st.data(),
)
def test_sizes_from_the_chain_pack_whenever_their_sum_fits(
    per_node: int, nodes: int, data: st.DataObject
) -> None:
    """Why 'Σ GPUs ≤ pool size' is an exact capacity constraint: job sizes drawn from the pool's
    GPU counts always pack onto its nodes when their sum fits (multi-node jobs first)."""
    from searcher.fleet.schema import Pool

    pool = Pool("p", None, per_node * nodes, per_node, 50.0, 0, 0.1, "")  # type: ignore[arg-type]
    sizes = data.draw(st.lists(st.sampled_from(pool.gpu_counts()), max_size=10))
    if sum(sizes) <= pool.count:
        assert _first_fit_decreasing(sizes, nodes, per_node)


# ------------------------------------------------------------------ multi-node physics


def test_communication_uses_the_inter_node_bandwidth_across_nodes() -> None:
    from constraints.config import TrainConfig
    from constraints.config_batch import ConfigBatch
    from constraints.gpus import resolve_gpu
    from constraints.models import resolve_model
    from constraints.throughput import throughput_arrays

    spec, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    cfg = TrainConfig(method="full", zero=2, dp=16, micro_batch=1, seq_len=2048, grad_accum=1)
    batch = ConfigBatch.from_configs([cfg])

    def step(per_node: int, inter: float) -> float:
        t = throughput_arrays(spec, batch, gpu, gpus_per_node=per_node, inter_node_gb_s=inter)
        return float(t["step_time_s"][0])

    # 16 GPUs over two nodes: a slower network makes the step slower
    assert step(8, 5.0) > step(8, 50.0) * 1.2
    # inside one node of 16 the network does not matter
    assert step(16, 5.0) == step(16, 50.0)
    # and an NVLink node beats a PCIe one for the same data-parallel all-reduce
    pcie = gpu.model_copy(update={"interconnect_gb_s": 0.0})
    t_pcie = throughput_arrays(spec, batch, pcie, gpus_per_node=16, inter_node_gb_s=50.0)
    assert float(t_pcie["step_time_s"][0]) > step(16, 50.0)


def test_search_keeps_tensor_parallel_inside_a_node(tmp_path: Path) -> None:
    from searcher.fleet.options import problem_for
    from searcher.search.factors import grid

    text = SMALL.replace("count: 16\n    gpus_per_node: 8", "count: 16\n    gpus_per_node: 4")
    fleet = load_fleet(write(tmp_path, text))
    problem = problem_for(fleet.jobs[1], fleet.pools[0])
    batch = grid(problem)
    assert set(np.unique(batch.gpus)) <= set(fleet.pools[0].gpu_counts())
    assert batch.tp.max() <= 4
    assert (batch.gpus > 4).any()  # multi-node layouts are searched


# ------------------------------------------------------------------ options


def _opt(gpus: int, usd: float, hours: float = 1.0, tps: float = 1.0) -> Option:
    class M:  # the fields prune and within_limits read
        tokens_per_s = tps
        config = None

    return Option("j", "p", gpus, M(), hours, usd)  # type: ignore[arg-type]


def test_prune_drops_options_beaten_on_gpus_and_cost() -> None:
    opts = [_opt(1, 10), _opt(2, 9), _opt(4, 9.5), _opt(8, 8), _opt(8, 12), _opt(16, 8)]
    kept = [(o.gpus, o.usd) for o in prune(opts)]
    assert kept == [(1, 10), (2, 9), (8, 8)]


def test_deadline_and_budget_reasons_are_in_numbers(tmp_path: Path) -> None:
    from searcher.fleet.options import search_cell

    fleet = load_fleet(EXAMPLE)
    rush, h100 = fleet.jobs[2], fleet.pools[0]
    cell = search_cell(rush, h100)
    assert not cell.options and cell.all_options
    assert "> deadline 2 h" in (cell.reason or "")
    fastest = min(o.hours for o in cell.all_options)
    assert f"{fastest:,.1f} h" in (cell.reason or "")
    # the same options against a budget instead of a deadline
    from dataclasses import replace

    broke = replace(rush, deadline_hours=None, budget_usd=10.0)
    kept, reason = within_limits(broke, cell.all_options)
    cheapest = min(o.usd for o in cell.all_options)
    assert not kept and reason is not None
    assert f"${cheapest:,.0f}" in reason and "> budget $10" in reason


# ------------------------------------------------------------------ exact placement


def _brute_force(items: list[Item], n_jobs: int, capacity: list[int]) -> tuple[int, float]:
    """Every assignment, no pruning: the definition of the optimum."""
    per_job = [[None] + [k for k, it in enumerate(items) if it.job == j] for j in range(n_jobs)]
    best = (-1, 0.0)
    for combo in itertools.product(*per_job):
        used = [0] * len(capacity)
        for k in combo:
            if k is not None:
                used[items[k].pool] += items[k].gpus
        if any(u > c for u, c in zip(used, capacity, strict=True)):
            continue
        placed = sum(k is not None for k in combo)
        cost = sum(items[k].cost for k in combo if k is not None)
        if placed > best[0] or (placed == best[0] and cost < best[1] - 1e-9):
            best = (placed, cost)
    return best


def _random_instance(rng: random.Random, max_jobs: int = 6) -> tuple[list[Item], int, list[int]]:
    n_jobs = rng.randint(1, max_jobs)
    capacity = [rng.choice([4, 8, 16]) for _ in range(rng.randint(1, 3))]
    items = []
    for j in range(n_jobs):
        for p, cap in enumerate(capacity):
            for g in rng.sample([1, 2, 4, 8, 16], rng.randint(0, 3)):
                if g <= cap:
                    items.append(Item(j, p, g, round(rng.uniform(1, 1000) * g**0.5, 3)))
    return items, n_jobs, capacity


def test_milp_and_exhaustive_match_brute_force_on_random_fleets() -> None:
    rng = random.Random(6)
    contested = 0
    for _ in range(150):
        items, n_jobs, capacity = _random_instance(rng)
        want = _brute_force(items, n_jobs, capacity)
        for solver in (solve_milp, solve_exhaustive):
            got = solver(items, n_jobs, capacity)
            assert got.placed == want[0], (solver.__name__, items, capacity)
            assert got.cost == pytest.approx(want[1], rel=1e-9, abs=1e-6)
            used = [0] * len(capacity)
            for k in got.chosen:
                if k is not None:
                    used[items[k].pool] += items[k].gpus
            assert all(u <= c for u, c in zip(used, capacity, strict=True))
            assert all(k is None or items[k].job == j for j, k in enumerate(got.chosen))
        every_cheapest = sum(
            min((it.cost for it in items if it.job == j), default=0) for j in range(n_jobs)
        )
        contested += want[1] > every_cheapest + 1e-9
    assert contested > 10  # capacity really forced trade-offs in many instances


def test_milp_places_more_jobs_before_it_saves_money() -> None:
    # job 0 alone could take the pool cheaply with 8 GPUs; taking 4 (dearer) lets job 1 in
    items = [Item(0, 0, 8, 10.0), Item(0, 0, 4, 50.0), Item(1, 0, 4, 1000.0)]
    got = solve_milp(items, 2, [8])
    assert got.placed == 2 and got.cost == pytest.approx(1050.0)
    assert got.chosen == (1, 2)


def test_milp_handles_a_large_fleet_the_exhaustive_solver_cannot() -> None:
    rng = random.Random(1)
    capacity = [64, 32, 16, 8, 8]
    items = [
        Item(j, p, g, rng.uniform(10, 2000) * (1 + 0.05 * g))
        for j in range(40)
        for p, cap in enumerate(capacity)
        for g in (1, 2, 4, 8, 16, 32)
        if g <= cap and rng.random() < 0.5
    ]
    got = solve_milp(items, 40, capacity)
    used = [0] * 5
    for k in got.chosen:
        if k is not None:
            used[items[k].pool] += items[k].gpus
    assert all(u <= c for u, c in zip(used, capacity, strict=True))
    with pytest.raises(FitplanError, match="gave up"):
        solve_exhaustive(items, 40, capacity)


# ------------------------------------------------------------------ plans


def test_plan_example_places_two_and_explains_the_third() -> None:
    plan = plan_fleet(load_fleet(EXAMPLE), workers=1)
    where = {p.job.name: p.option.pool for p in plan.placed}
    assert where == {"support-bot": "rtx4090", "code-70b": "h100"}
    (u,) = plan.unplaced
    assert u.job.name == "rush-70b"
    assert "deadline 2 h" in u.per_pool["h100"] and "GiB of CPU RAM" in u.per_pool["rtx4090"]
    for p in plan.placed:
        o = p.option
        assert o.member.needed <= o.member.memory.total
        assert o.hours == pytest.approx(p.job.tokens / o.tokens_per_s / 3600)
        assert o.usd == pytest.approx(o.gpus * plan.fleet.pool(o.pool).price * o.hours)
        assert o.member.config.method in p.job.methods
    assert plan.total_usd == pytest.approx(sum(p.option.usd for p in plan.placed))
    # the exhaustive solver finds the same plan
    again = plan_fleet(load_fleet(EXAMPLE), workers=1, solver="exhaustive")
    assert again.total_usd == pytest.approx(plan.total_usd)


def test_capacity_conflict_is_explained(tmp_path: Path) -> None:
    # each job meets its deadline only on both GPUs (one GPU takes about twice as long): one runs
    text = """\
pools:
  - {name: box, gpu: rtx-4090, count: 2, usd_per_gpu_hour: 0.3, cpu_ram_per_node: 8GiB}
jobs:
  - {name: a, model: qwen3-4b, methods: [full], target_batch: 8, seq_len: 1024, tokens: 10M,
     deadline_hours: 0.6}
  - {name: b, model: qwen3-4b, methods: [full], target_batch: 8, seq_len: 1024, tokens: 20M,
     deadline_hours: 1.2}
"""
    plan = plan_fleet(load_fleet(write(tmp_path, text)), workers=1)
    for job in ("a", "b"):
        cell = plan.cell(job, "box")
        assert {o.gpus for o in cell.all_options} == {1, 2}
        assert [o.gpus for o in cell.options] == [2]
    # the cheaper of the two runs; the other is told why, in numbers
    assert [p.job.name for p in plan.placed] == ["a"]
    (u,) = plan.unplaced
    assert u.job.name == "b" and "not beside the placed jobs" in u.reason
    assert "box needs ≥ 2 GPUs, 0 free" in u.reason


def test_parallel_and_serial_searches_agree(tmp_path: Path) -> None:
    fleet = load_fleet(write(tmp_path, SMALL))
    serial = plan_fleet(fleet, workers=1)
    parallel = plan_fleet(fleet, workers=2)
    assert plan_json(serial)["placement"] == plan_json(parallel)["placement"]


def test_fleet_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["fleet", str(EXAMPLE), "--json", "--workers", "1"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1  # one job is not placed
    assert set(out) >= {"pools", "jobs", "matrix", "placement", "unplaced", "totals", "solver"}
    assert len(out["matrix"]) == 3 * 2
    assert {r["job"] for r in out["placement"]} == {"support-bot", "code-70b"}
    for r in out["placement"]:
        assert {"pool", "gpus", "config", "memory_bytes", "tokens_per_s", "hours", "usd"} <= set(r)
        assert r["config"]["gpus"] == r["gpus"]
    assert out["unplaced"][0]["job"] == "rush-70b"
    assert out["totals"]["usd"] == pytest.approx(sum(r["usd"] for r in out["placement"]))
    bad = [c for c in out["matrix"] if not c["ok"]]
    assert all(c["reason"] for c in bad)


def test_fleet_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(EXAMPLE), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    for text in ("Capacity matrix", "Placement", "support-bot", "rush-70b not placed", "total $"):
        assert text in out


# ------------------------------------------------------------------ scenarios


def test_fleet_expectations_can_fail(tmp_path: Path) -> None:
    from searcher.scenarios.runner import run_file

    text = EXAMPLE.read_text()
    wrong = text.replace(
        "placed.support-bot: {equals: rtx4090}", "placed.support-bot: {equals: h100}"
    )
    assert wrong != text
    results = run_file(write(tmp_path, wrong))
    assert not results[0].ok and results[1].ok
    assert not all(r.ok for r in results)
    bad_metric = text.replace("placed_count: {value: 2}", "placed_cnt: {value: 2}")
    results = run_file(write(tmp_path, bad_metric, "b.yaml"))
    assert any(r.error and "placed_cnt" in r.error for r in results)


def test_fits_kind_can_fail(tmp_path: Path) -> None:
    from searcher.scenarios.runner import run_file

    text = (ROOT / "scenarios" / "24gb-card.yaml").read_text()
    wrong = text.replace(
        "      full.fits: {equals: false}\n", "      full.fits: {equals: true}\n", 1
    )
    results = run_file(write(tmp_path, wrong))
    assert not results[0].ok and all(r.ok for r in results[1:])


def test_pool_says_its_nvlink_domain(tmp_path: Path) -> None:
    text = SMALL.replace(
        "    inter_node_gb_s: 25\n", "    inter_node_gb_s: 25\n    nvlink_domain: 16\n"
    )
    fleet = load_fleet(write(tmp_path, text))
    assert fleet.pools[0].nvlink_domain == 16
    assert fleet.pools[1].nvlink_domain is None
    from searcher.fleet.options import problem_for

    assert problem_for(fleet.jobs[0], fleet.pools[0]).nvlink_domain == 16


def test_first_fit_seating_every_job_proves_the_most_placed() -> None:
    """``all_placeable`` lets the MILP skip its first programme: whenever it says yes, the
    brute-force optimum places every job that has an option (and it says yes often enough to
    be exercised by the random fleets above)."""
    from searcher.fleet.placement import all_placeable

    rng = random.Random(11)
    said_yes = 0
    for _ in range(150):
        items, n_jobs, capacity = _random_instance(rng)
        if all_placeable(items, n_jobs, capacity):
            said_yes += 1
            assert _brute_force(items, n_jobs, capacity)[0] == len({it.job for it in items})
    assert 20 < said_yes < 150  # both branches of solve_milp are taken
