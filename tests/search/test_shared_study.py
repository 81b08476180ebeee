"""Several processes, one optuna study (issue 14): SQLite (embedded, always run) and PostgreSQL
(a real server: FITPLAN_PG_URL, e.g. from tools/pg_throwaway.sh; skipped without it unless
FITPLAN_PG_REQUIRED=1, which makes a missing server a failure).

Two ``fitplan search --strategy optuna --storage URL`` processes run against one study at the same
time. Afterwards the study holds every trial of both, each once; the process that finished last
reports the front of all of them, and that front equals the front of one fresh process given
exactly the same trials (enqueued into a new study). A server that is down, or a wrong URL, is one
line and exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 64  # one NSGA-II population per process
SEARCH = [
    "search",
    "--model",
    "qwen2.5-0.5b",
    "--gpu",
    "rtx-4090",
    "--target-batch",
    "8",
    "--seq-len",
    "1024",
    "--strategy",
    "optuna",
    "--json",
    # one study: with a partial stack a search also runs its in-stack space, in a study of its
    # own (test_a_partial_stack_keeps_its_own_study)
    "--stack",
    "all",
]
TIMEOUT_S = 600


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _start(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "searcher.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )


def _finish_all(procs: list[subprocess.Popen[str]]) -> list[tuple[float, str, str, int]]:
    """(finish time, stdout, stderr, exit code) of each process, in start order."""
    out: list[tuple[float, str, str, int]] = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=TIMEOUT_S)
        out.append((time.monotonic(), stdout, stderr, p.returncode))
    return out


def _front_keys(payload: str) -> list[str]:
    front = json.loads(payload)["front"]
    return sorted(json.dumps(m["config"], sort_keys=True) for m in front)


def _study(url: str, name: str):
    import optuna

    from searcher.search.storage import normalised_url

    return optuna.load_study(study_name=name, storage=normalised_url(url))


def _shared_search(url: str, fresh_url: str) -> None:
    import optuna

    name = f"t-{uuid.uuid4().hex[:10]}"
    procs = [
        _start(
            *SEARCH,
            "--trials",
            str(TRIALS),
            "--seed",
            str(seed),
            "--storage",
            url,
            "--study-name",
            name,
        )
        for seed in (1, 2)
    ]
    # communicate() in order would misreport who finished last: poll instead
    finished: dict[int, float] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(finished) < 2 and time.monotonic() < deadline:
        for i, p in enumerate(procs):
            if i not in finished and p.poll() is not None:
                finished[i] = time.monotonic()
        time.sleep(0.05)
    results = _finish_all(procs)
    for _t, _out, err, rc in results:
        assert rc == 0, err
    trials = _study(url, name).get_trials(deepcopy=False)
    # nothing lost, nothing twice: both processes' trials, numbered 0..2N-1, all complete
    assert len(trials) == 2 * TRIALS
    assert sorted(t.number for t in trials) == list(range(2 * TRIALS))
    assert {t.state for t in trials} == {optuna.trial.TrialState.COMPLETE}
    last = max(finished, key=lambda i: finished[i])
    shared_front = _front_keys(results[last][1])
    assert shared_front, "the shared study has a front"
    # one fresh process given exactly these trials (enqueued into a new study) finds the same
    solo_name = f"solo-{uuid.uuid4().hex[:10]}"
    solo = optuna.create_study(
        study_name=solo_name,
        storage=fresh_url,
        directions=["minimize", "minimize", "minimize"],
    )
    for t in trials:
        solo.enqueue_trial(t.params)
    p = _start(
        *SEARCH, "--trials", str(2 * TRIALS), "--storage", fresh_url, "--study-name", solo_name
    )
    _t, stdout, stderr, rc = _finish_all([p])[0]
    assert rc == 0, stderr
    assert _front_keys(stdout) == shared_front


@pytest.mark.heavy  # several processes, minutes on a loaded machine
def test_two_searches_share_one_sqlite_study(tmp_path: Path) -> None:
    _shared_search(f"sqlite:///{tmp_path / 'shared.db'}", f"sqlite:///{tmp_path / 'solo.db'}")


def _pg_url() -> str:
    url = os.environ.get("FITPLAN_PG_URL")
    if not url:
        if os.environ.get("FITPLAN_PG_REQUIRED") == "1":
            pytest.fail(
                "FITPLAN_PG_REQUIRED=1 but FITPLAN_PG_URL is not set (tools/pg_throwaway.sh)"
            )
        pytest.skip("no PostgreSQL server: set FITPLAN_PG_URL (tools/pg_throwaway.sh run -- …)")
    return url


@pytest.mark.heavy
def test_two_searches_share_one_postgresql_study(tmp_path: Path) -> None:
    _shared_search(_pg_url(), f"sqlite:///{tmp_path / 'solo.db'}")


def _one_line_refusal(*argv: str) -> str:
    p = _start(*argv)
    _t, stdout, stderr, rc = _finish_all([p])[0]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert rc == 2, stderr
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert stdout == ""
    return lines[0]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_down_or_wrong_url_is_one_line(tmp_path: Path) -> None:
    if os.environ.get("FITPLAN_PG_REQUIRED") != "1":
        pytest.importorskip("psycopg")  # without the study extra the driver is what is missing
    port = _closed_port()
    down = f"postgresql://nobody:secret@127.0.0.1:{port}/fitplan"
    line = _one_line_refusal(*SEARCH, "--trials", "4", "--storage", down)
    assert "cannot open the optuna study" in line and "secret" not in line, line
    line = _one_line_refusal(*SEARCH, "--trials", "4", "--storage", "mongodb://x/y")
    assert "unknown database scheme" in line
    line = _one_line_refusal(
        *SEARCH, "--trials", "4", "--storage", "sqlite:///" + str(tmp_path / "no" / "x.db")
    )
    assert "does not exist" in line
    exhaustive = [a for a in SEARCH if a not in ("--strategy", "optuna")]
    line = _one_line_refusal(*exhaustive, "--storage", "sqlite:///x.db")
    assert "does nothing with the exhaustive strategy" in line


@pytest.mark.heavy
def test_wrong_database_on_a_live_server_is_one_line() -> None:
    url = _pg_url()
    wrong = url.rsplit("/", 1)[0] + "/no_such_database_here"
    line = _one_line_refusal(*SEARCH, "--trials", "4", "--storage", wrong)
    assert "cannot open the optuna study" in line and "does not exist" in line, line


AUTOTUNE_TRIALS = 3


def _shared_autotune(url: str) -> None:
    """Two ``autotune`` workers (CPU, the tiny Llama) on one study: every trial once."""
    import optuna

    pytest.importorskip("torch")
    name = f"a-{uuid.uuid4().hex[:10]}"
    argv = [
        "autotune",
        "--model",
        str(ROOT / "tests" / "data" / "tiny_llama_config.json"),
        "--device",
        "cpu",
        "--target-batch",
        "4",
        "--seq-len",
        "64",
        "--steps",
        "1",
        "--candidates",
        "6",
        "--trials",
        str(AUTOTUNE_TRIALS),
        "--storage",
        url,
        "--study-name",
        name,
        "--json",
    ]
    results = _finish_all([_start(*argv), _start(*argv)])
    numbers: list[int] = []
    for _t, stdout, stderr, rc in results:
        assert rc in (0, 1), stderr  # 1: no trial completed (not expected on the CPU)
        numbers += [t["trial"] for t in json.loads(stdout)["trials"]]
    trials = _study(url, name).get_trials(deepcopy=False)
    finished = {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    assert len(trials) == 2 * AUTOTUNE_TRIALS and {t.state for t in trials} <= finished
    assert sorted(numbers) == sorted(t.number for t in trials) == list(range(2 * AUTOTUNE_TRIALS))


@pytest.mark.heavy
def test_two_autotune_workers_share_one_sqlite_study(tmp_path: Path) -> None:
    _shared_autotune(f"sqlite:///{tmp_path / 'autotune.db'}")


@pytest.mark.heavy
def test_two_autotune_workers_share_one_postgresql_study() -> None:
    _shared_autotune(_pg_url())


def test_a_partial_stack_keeps_its_own_study(tmp_path: Path, capsys) -> None:
    """The in-stack search offers other choices per knob (sdpa for flash, no 8-bit optimizers):
    in the named study optuna would refuse them ("dynamic value space"); it gets a study of its
    own beside the named one."""
    import optuna

    from searcher.cli import main

    url = f"sqlite:///{tmp_path / 'study.db'}"
    argv = [a for a in SEARCH if a not in ("--stack", "all")]
    argv += ["--stack", "none", "--trials", "64", "--storage", url, "--study-name", "s"]
    assert main(argv) == 0, capsys.readouterr().err
    names = {s.study_name for s in optuna.get_all_study_summaries(storage=url)}
    assert "s" in names and any(n.startswith("s-stack-") for n in names), names
