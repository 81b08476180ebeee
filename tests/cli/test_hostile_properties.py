"""Generated hostile inputs for every command (issue 14), checked against the refusal contract
(tests/conftest.py: exit 2, one short line, no traceback, nothing on stdout, no file changed, no
hang). Derandomised: CI runs the same examples every time.

- flag values: for each bounded number flag of each command, values below and above its bound,
  non-finite spellings, and text that is not a number;
- config.json: the tiny Llama config with one field replaced by a value of the wrong type, out of
  range, or non-finite (written as JSON's NaN/Infinity, which Python's reader would accept);
- fleet YAML: the smallest fleet with one field replaced by a hostile YAML value;
- plan files: a plan with one knob replaced;
- CSVs: random bytes that are not UTF-8 text, for ``accuracy`` and for ``measure --json``'s append.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constraints import limits as L

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TINY = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "tiny_llama_config.json").read_text()
)

EXPLAIN = ["explain", "--model", "gpt2", "--gpu", "24GiB"]
SEARCH = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090"]
#: (argv prefix, flag, bound) for every bounded number flag worth attacking
NUMBER_FLAGS = [
    (EXPLAIN, "--micro-batch", L.MICRO_BATCH),
    (EXPLAIN, "--seq-len", L.SEQ_LEN),
    (EXPLAIN, "--grad-accum", L.GRAD_ACCUM),
    (EXPLAIN, "--rank", L.LORA_RANK_FLAG),
    (EXPLAIN, "--tp", L.PARALLEL_DEGREE),
    (EXPLAIN, "--gpus", L.GPU_COUNT),
    (EXPLAIN, "--headroom", L.FRACTION),
    (EXPLAIN, "--lora-dropout", L.FRACTION),
    (["explain", "--gpu", "24GiB", "--params"], None, L.PARAMS),
    (["explain", "--params", "7e9", "--layers"], None, L.LAYERS),
    (["explain", "--params", "7e9", "--hidden"], None, L.HIDDEN),
    (["explain", "--params", "7e9", "--vocab"], None, L.VOCAB),
    (SEARCH, "--target-batch", L.TARGET_BATCH),
    (SEARCH, "--tokens", L.TOKENS),
    (SEARCH, "--price", L.PRICE),
    (SEARCH, "--gpus-per-node", L.GPUS_PER_NODE),
    (SEARCH, "--top", L.ROWS),
    ([*SEARCH, "--strategy", "optuna"], "--trials", L.TRIALS),
    ([*SEARCH, "--strategy", "optuna"], "--seed", L.SEED),
    (["fits"], "--gpus", L.GPU_COUNT),
    (["fits"], "--seq-len", L.SEQ_LEN),
    (["fits"], "--target-batch", L.TARGET_BATCH),
    (["fleet", "x.yaml"], "--workers", L.WORKERS),
    (["measure", "--model", "gpt2"], "--steps", L.STEPS),
    (["autotune", "--model", "gpt2"], "--trials", L.MEASURED_TRIALS),
    (["autotune", "--model", "gpt2"], "--candidates", L.CANDIDATES),
    (["trace", "gpt2"], "--layers", L.TRACE_LAYERS),
    (["trace", "gpt2"], "--seq-len", L.TRACE_SEQ_LEN),
    (["launch", "p.json", "--emit", "hf", "--out", "o"], "--lora-alpha", L.LORA_ALPHA),
]
NON_FINITE = [
    "nan",
    "NaN",
    "-nan",
    "inf",
    "-inf",
    "+inf",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e999",
]


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e30 else repr(float(x))


@st.composite
def bad_number(draw: st.DrawFn, bound: L.Bound) -> str:
    kind = draw(st.sampled_from(["below", "above", "non-finite", "text"]))
    if kind == "below":
        return _fmt(draw(st.floats(-1e30, bound.low, exclude_max=True, allow_nan=False)))
    if kind == "above":
        return _fmt(draw(st.floats(bound.high, 1e300, exclude_min=True, allow_nan=False)))
    if kind == "non-finite":
        return draw(st.sampled_from(NON_FINITE))
    text = draw(st.text(min_size=0, max_size=300))
    try:
        float(text)
        return "x" + text  # a number after all: make it text
    except ValueError:
        return text


@SETTINGS
@given(data=st.data(), which=st.integers(0, len(NUMBER_FLAGS) - 1))
def test_hostile_flag_values_are_refused(data: st.DataObject, which: int, refuse, tmp_path) -> None:
    prefix, flag, bound = NUMBER_FLAGS[which]
    value = data.draw(bad_number(bound))
    refuse([*prefix, *([flag] if flag else []), value], folder=tmp_path)


# ---- config.json ---------------------------------------------------------------------------

INT_FIELDS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "num_key_value_heads",
    "max_position_embeddings",
]
BOOL_FIELDS = ["tie_word_embeddings", "attention_bias", "mlp_bias"]


@st.composite
def hostile_config(draw: st.DrawFn) -> str:
    cfg = dict(TINY)
    kind = draw(st.sampled_from(["int", "bool", "dropout", "type", "nonfinite", "shape"]))
    if kind == "int":
        key = draw(st.sampled_from(INT_FIELDS))
        cfg[key] = draw(
            st.one_of(
                st.integers(-(10**6), -1),
                st.integers(10**12, 10**30),
                st.text(max_size=20),
                st.floats(0.1, 1e6).filter(lambda x: not x.is_integer()),
                st.booleans(),
                st.lists(st.integers(), max_size=3),
            )
        )
    elif kind == "bool":
        cfg[draw(st.sampled_from(BOOL_FIELDS))] = draw(
            st.one_of(st.text(max_size=10), st.integers(), st.floats(allow_nan=False))
        )
    elif kind == "dropout":
        cfg["attention_dropout"] = draw(
            st.one_of(st.floats(1.0, 1e9), st.floats(-1e9, -1e-9), st.text(max_size=10))
        )
    elif kind == "type":
        cfg["model_type"] = draw(
            st.one_of(
                st.text(max_size=30).filter(lambda t: t.strip().lower() not in _SUPPORTED),
                st.integers(),
                st.none(),
            )
        )
        if cfg["model_type"] is None:
            del cfg["model_type"]
    elif kind == "shape":
        heads = draw(st.integers(3, 63).filter(lambda h: 64 % h))
        cfg.update(num_attention_heads=heads, num_key_value_heads=heads)
    else:
        key = draw(st.sampled_from([*INT_FIELDS, "attention_dropout"]))
        token = draw(st.sampled_from(["NaN", "Infinity", "-Infinity"]))
        return json.dumps({**cfg, key: "@@"}).replace('"@@"', token)
    return json.dumps(cfg)


from constraints.model_spec import SUPPORTED_TYPES as _SUPPORTED  # noqa: E402


@SETTINGS
@given(text=hostile_config(), command=st.sampled_from(["explain", "search", "fits"]))
def test_hostile_config_json_is_refused(text: str, command: str, refuse, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    argv = {
        "explain": ["explain", "--model", str(path), "--gpu", "24GiB"],
        "search": ["search", "--model", str(path), "--gpu", "24GiB"],
        "fits": ["fits", "--models", str(path)],
    }[command]
    refuse(argv, folder=tmp_path)


# ---- fleet YAML ----------------------------------------------------------------------------

FLEET = {
    "pools": [{"name": "h100", "gpu": "h100-sxm", "count": 8}],
    "jobs": [
        {
            "name": "a",
            "model": "llama-3.2-1b",
            "methods": ["lora"],
            "target_batch": 32,
            "seq_len": 2048,
            "tokens": 1e9,
        }
    ],
}
#: (field, value) pairs among the generated ones that are legitimate
VALID_YAML = {
    ("usd_per_gpu_hour", "0"),
    ("headroom", "0"),
    ("usd_per_gpu_hour", "8.5"),
    ("deadline_hours", "8.5"),
    ("budget_usd", "8.5"),
    ("inter_node_gb_s", "8.5"),
    ("tokens", '"8"'),
    ("tokens", "8.5"),
}
OPTIONAL_YAML = ("usd_per_gpu_hour", "deadline_hours", "budget_usd")
YAML_HOSTILE = st.sampled_from(
    [
        ".nan",
        ".inf",
        "-.inf",
        '"8"',
        "8.5",
        "-1",
        "0",
        "1e40",
        "true",
        "[]",
        "{}",
        "~",
        "!!python/object/apply:os.system ['true']",
        "&a [*a]",
        "!!binary aGVsbG8=",
        "'a\\x00b'",
    ]
)


@SETTINGS
@given(
    where=st.sampled_from(
        [
            ("pools", "count"),
            ("pools", "usd_per_gpu_hour"),
            ("pools", "gpus_per_node"),
            ("pools", "headroom"),
            ("pools", "inter_node_gb_s"),
            ("jobs", "target_batch"),
            ("jobs", "seq_len"),
            ("jobs", "tokens"),
            ("jobs", "deadline_hours"),
            ("jobs", "lora_rank"),
            ("jobs", "budget_usd"),
        ]
    ),
    value=YAML_HOSTILE,
)
def test_hostile_fleet_yaml_is_refused(
    where: tuple[str, str], value: str, refuse, tmp_path
) -> None:
    section, key = where
    if (key, value) in VALID_YAML or (value == "~" and key in OPTIONAL_YAML):
        return  # a legitimate value: the property is about the hostile ones
    doc = json.loads(json.dumps(FLEET))
    doc[section][0][key] = "@@"
    text = json.dumps(doc).replace('"@@"', value)
    path = tmp_path / "fleet.yaml"
    path.write_text(text, encoding="utf-8")
    refuse(["fleet", str(path)], folder=tmp_path)


# ---- plan files ----------------------------------------------------------------------------

VALID_NAMES = ("full", "lora", "qlora", "fp32", "bf16-pure", "bf16-master", "amp", "bf16-torch")
PLAN = {
    "model": "qwen2.5-0.5b",
    "gpu": "rtx-4090",
    "config": {"method": "lora", "micro_batch": 1, "grad_accum": 8, "seq_len": 512, "dp": 1},
}


@SETTINGS
@given(
    key=st.sampled_from(
        [
            "micro_batch",
            "grad_accum",
            "seq_len",
            "dp",
            "lora_rank",
            "tp",
            "zero",
            "lora_dropout",
            "optimizer_in_backward",
            "method",
            "recipe",
        ]
    ),
    value=st.one_of(
        st.text(max_size=12),
        st.integers(-(10**9), 0),
        st.integers(10**9, 10**20),
        st.lists(st.integers(), max_size=2),
        st.floats(allow_nan=False).filter(lambda x: not x.is_integer()),
    ),
)
def test_hostile_plan_is_refused(key: str, value: object, refuse, tmp_path: Path) -> None:
    if key == "lora_dropout" and isinstance(value, float) and 0 <= value < 1:
        return
    if key == "optimizer_in_backward" and isinstance(value, bool):
        return
    if (key == "zero" and value == 0) or (key in ("method", "recipe") and value in VALID_NAMES):
        return  # legitimate values
    plan = json.loads(json.dumps(PLAN))
    plan["config"][key] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    refuse(["launch", str(path), "--emit", "hf", "--out", str(tmp_path / "out")], folder=tmp_path)


# ---- CSVs ----------------------------------------------------------------------------------

NOT_UTF8 = st.binary(min_size=1, max_size=200).filter(lambda b: _not_text(b))


def _not_text(b: bytes) -> bool:
    if b"\x00" in b:
        return True
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@SETTINGS
@given(content=NOT_UTF8)
def test_binary_or_non_utf8_csv_is_refused(content: bytes, refuse, tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_bytes(content)
    refuse(["accuracy", str(path)], folder=tmp_path)


@SETTINGS
@given(
    content=st.one_of(NOT_UTF8, st.text(min_size=1, max_size=200).filter(lambda t: "," not in t))
)
def test_measure_json_append_target_checked_before_measuring(
    content: bytes | str, refuse, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    path = tmp_path / "rows.csv"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        if not content.strip():
            return  # an empty file is a new CSV
        path.write_text(content, encoding="utf-8")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY), encoding="utf-8")
    refuse(
        ["measure", "--model", str(cfg), "--device", "cpu", "--json", str(path)], folder=tmp_path
    )
