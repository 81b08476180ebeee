"""What an input may be: the bounds every size is checked against, in one place, and strict readers.

A bound is far beyond anything published (so no real model or machine is refused) yet small
enough that the arithmetic stays exact and fast (a config with 10^12 layers is refused at once
instead of looping for ever). Each names its unit and the largest real value it was set against.

``read_text`` and ``strict_json`` are the one way a file becomes text and JSON becomes data:
UTF-8 only, size-capped, NaN/Infinity and duplicate keys refused, every failure one
:class:`FitplanError` line that quotes at most a short excerpt of the offending value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from constraints.errors import FitplanError
from constraints.frozen import frozen

#: longest excerpt of a user's value quoted in an error message, characters
EXCERPT_CHARS = 60


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """``repr`` of a value, cut to ``limit`` characters (an error never echoes a huge input)."""
    try:
        text = value if isinstance(value, str) else repr(value)
    except Exception:  # a hostile object whose repr fails
        text = f"<{type(value).__name__}>"
    if isinstance(value, str):
        text = repr(text[: limit + 1])
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


@frozen
class Bound:
    """An inclusive range with its unit; ``check`` refuses what lies outside, naming both."""

    low: float
    high: float
    unit: str
    largest_real: str = ""

    def check(self, name: str, value: float, where: str = "") -> float:
        prefix = f"{where}: " if where else ""
        if isinstance(value, float) and not math.isfinite(value):
            raise FitplanError(f"{prefix}{name} must be a finite number, got {value}")
        if not self.low <= value <= self.high:
            raise FitplanError(f"{prefix}{name} {self.complaint(value)}", self.largest_real or None)
        return value

    def complaint(self, value: float) -> str:
        """'0 must be positive (1 to 10000 layers)', '20000 is out of range: …'."""
        if value < self.low:
            least = "positive" if self.low == 1 else f"at least {_fmt(self.low)}"
            if self.low == 0:
                least = "zero or more"
            return f"{_fmt(value)} must be {least} ({self.describe()})"
        return f"{_fmt(value)} is absurdly large: the range is {self.describe()}"

    def describe(self) -> str:
        return f"{_fmt(self.low)} to {_fmt(self.high)} {self.unit}"


def _fmt(x: float) -> str:
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}".replace(",", "_") if abs(x) >= 100_000 else str(int(x))
    return f"{x:.4g}"


# ---- model shapes (config.json fields and raw flags) --------------------------------------
# Largest published values, for scale: Llama 3.1 405B (126 layers, hidden 16384, FFN 53248,
# 128 heads), PaLM 540B (118 layers, hidden 18432), Gemma 2 (vocab 256000), Kimi K2 (384
# experts), Llama 4 Scout (10M-token context).
LAYERS = Bound(1, 10_000, "layers", "the deepest published model has 126")
HIDDEN = Bound(1, 262_144, "elements", "the widest published model has hidden 18432")
INTERMEDIATE = Bound(0, 2_097_152, "elements", "the widest published MLP is 53248")
HEADS = Bound(1, 16_384, "heads", "published models have at most 128")
HEAD_DIM = Bound(1, 8_192, "elements", "published heads are at most 256 wide")
VOCAB = Bound(1, 16_777_216, "tokens", "the largest published vocabulary is 262144")
EXPERTS = Bound(0, 65_536, "experts", "published MoE models have at most 512")
#: a model's context (0: none stated, e.g. ALiBi models)
CONTEXT = Bound(0, 1 << 30, "tokens", "the longest published context is 10M")
LORA_RANK = Bound(0, 1 << 20, "elements")
PARAMS = Bound(1, 1e14, "parameters", "the largest published model has about 2e12")

# ---- training knobs (flags) ---------------------------------------------------------------
SEQ_LEN = Bound(1, 10_000_000, "tokens", "the longest published context is 10M")
MICRO_BATCH = Bound(1, 1_000_000, "sequences")
GRAD_ACCUM = Bound(1, 1_000_000, "steps")
TARGET_BATCH = Bound(
    1, 1_048_576, "sequences", "published runs use at most about 16k sequences per step"
)
PARALLEL_DEGREE = Bound(1, 1024, "GPUs")
GPU_COUNT = Bound(1, 1_048_576, "GPUs", "the largest training clusters have about 200k GPUs")
GPUS_PER_NODE = Bound(1, 1024, "GPUs", "an NVL72 rack is 72 GPUs in one NVLink domain")
TOKENS = Bound(1, 1e16, "tokens", "the largest published runs trained on about 4e13 tokens")
PRICE = Bound(0, 10_000, "$ per GPU-hour", "cloud prices are below $15 per GPU-hour")
FRACTION = Bound(0, 0.999, "(a fraction below 1)")
LORA_RANK_FLAG = Bound(1, 65_536, "(LoRA rank)")
LORA_ALPHA = Bound(1, 1_000_000, "(LoRA alpha)")

# ---- command knobs ------------------------------------------------------------------------
TRIALS = Bound(1, 1_000_000, "trials")
MEASURED_TRIALS = Bound(1, 10_000, "trials")
STEPS = Bound(1, 100_000, "optimizer steps")
CANDIDATES = Bound(1, 100_000, "candidates")
SEED = Bound(0, 2**32 - 1, "(a sampler seed)")
ROWS = Bound(1, 1_000_000, "rows")
#: front members ``search --verify`` traces: each trace takes seconds to a minute on a CPU
VERIFY_MEMBERS = Bound(1, 100, "front members", "each trace takes seconds to a minute")
VIRTUAL_STAGES = Bound(1, 128, "virtual pipeline stages per rank")
LINK_GB_S = Bound(0.001, 100_000, "GB/s", "NVLink 5 is 900 GB/s per GPU")
KV_BLOCK = Bound(1, 1_048_576, "tokens", "serving engines use blocks of 16 to 256 tokens")
#: the KV block sizes vLLM accepts, tokens (vllm/config/cache.py ``BlockSize = Literal[1, 8, 16,
#: 32, 64, 128, 256]``, vLLM 0.11–0.33): ``vllm serve`` refuses any other ``--block-size``.
KV_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
GPU_MEMORY_UTILIZATION = Bound(0.01, 1.0, "(a fraction of the GPU, vLLM semantics)")
WORKERS = Bound(1, 1024, "processes")
TRACE_LAYERS = Bound(1, 64, "layers")
TRACE_SEQ_LEN = Bound(1, 1_048_576, "tokens")

# ---- hardware sizes -----------------------------------------------------------------------
#: one accelerator's memory: the largest shipping is 288 GB (B300, MI355X)
GPU_MEMORY = Bound(256 << 20, 4 << 40, "bytes (256MiB to 4TiB)", "the largest GPU has 288GB")
#: one node's CPU RAM: the largest servers hold 32 TiB
CPU_RAM = Bound(1 << 30, 256 << 40, "bytes (1GiB to 256TiB)", "the largest servers hold 32TiB")

# ---- files --------------------------------------------------------------------------------
#: the largest text file read (config.json, plan, YAML, CSV): a config.json is a few KB
MAX_FILE_BYTES = 64 << 20


#: longest path quoted whole in a message, characters
PATH_CHARS = 160


def shown_path(p: str | Path) -> str:
    """A path as a message quotes it: whole unless absurdly long."""
    text = str(p)
    return text if len(text) <= PATH_CHARS else text[: PATH_CHARS - 1] + "…"


def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of a file, or one clear line: missing, a folder, empty, too big, binary,
    not UTF-8, unreadable. A leading byte-order mark is dropped."""
    p = Path(path)
    shown = shown_path(p)
    try:
        if p.is_dir():
            raise FitplanError(f"{shown} is a folder, not a {what}", f"give the {what}'s path")
        if not p.exists():
            raise FitplanError(
                f"no such {what}: {shown}" if "file" in what else f"no such file: {shown}"
            )
        if not p.is_file():
            raise FitplanError(f"{shown} is not a regular file", f"give the {what}'s path")
        size = p.stat().st_size
        if size > max_bytes:
            raise FitplanError(
                f"{shown} is {size / 2**20:.0f} MiB: too large for a {what}",
                f"the limit is {max_bytes >> 20} MiB",
            )
        with p.open("rb") as f:
            data = f.read(max_bytes + 1)
    except FitplanError:
        raise
    except OSError as err:
        raise FitplanError(f"cannot read {shown}: {err.strerror or err}") from None
    except ValueError as err:  # e.g. an embedded NUL in the path
        raise FitplanError(f"cannot read {shown}: {err}") from None
    if len(data) > max_bytes:
        raise FitplanError(f"{shown} is too large for a {what} (over {max_bytes >> 20} MiB)")
    if not data.strip():
        raise FitplanError(f"{shown} is empty", f"give a {what} with content")
    if b"\x00" in data:
        raise FitplanError(f"{shown} is a binary file, not a {what}", "give a UTF-8 text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise FitplanError(
            f"{shown}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x})",
            "save the file as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {excerpt(text)[1:-1]} is too large to be finite")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {excerpt(key)} appears twice")
        out[key] = value
    return out


class _NonFinite:
    """A NaN / Infinity literal, held until the key it sits under is known."""

    def __init__(self, name: str) -> None:
        self.name = name


#: config.json keys under which transformers' ``save_pretrained`` writes Python's non-finite
#: literals (``json.dumps`` allows them): Mamba-2's ``time_step_limit`` default ``(0.0, inf)``
#: (Mamba 2, Bamba, Granite 4, Falcon-H1, Nemotron-H); fitplan reads none of them
NONFINITE_CONFIG_KEYS = frozenset({"time_step_limit"})


def _placed_constants(value: Any, allowed: frozenset[str], key: str = "") -> Any:
    """``value`` with each held literal made a float where it sits under an allowed key (at any
    depth: a wrapper's text_config too), refused elsewhere."""
    if isinstance(value, _NonFinite):
        if key in allowed:
            return float(value.name)
        _refuse_constant(value.name)
    if isinstance(value, dict):
        return {k: _placed_constants(v, allowed, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_placed_constants(v, allowed, key) for v in value]
    return value


def strict_json(text: str, where: str, nonfinite_keys: frozenset[str] = frozenset()) -> Any:
    """JSON as the standard defines it: no NaN/Infinity (Python's reader accepts them) but under
    ``nonfinite_keys``, no duplicate keys (the last would silently win); nesting
    too deep for the parser is refused."""
    try:
        if nonfinite_keys:
            loose = json.loads(
                text,
                parse_constant=_NonFinite,
                parse_float=_finite_float,
                object_pairs_hook=_no_duplicates,
            )
            return _placed_constants(loose, nonfinite_keys)
        return json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            object_pairs_hook=_no_duplicates,
        )
    except json.JSONDecodeError as err:
        raise FitplanError(
            f"{where}:{err.lineno}: not valid JSON (column {err.colno}: {err.msg})"
        ) from None
    except RecursionError:
        raise FitplanError(f"{where}: JSON nested too deeply") from None
    except ValueError as err:
        reason = str(err)
        if "integer string conversion" in reason:
            reason = "an integer with thousands of digits"
        raise FitplanError(f"{where}: {excerpt(reason, 120)[1:-1]}") from None


def finite_number(value: Any, name: str, where: str = "") -> float:
    """A JSON/YAML value that must be a real, finite number (not a bool, not a string)."""
    prefix = f"{where}: " if where else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FitplanError(f"{prefix}{name} must be a number, got {excerpt(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise FitplanError(f"{prefix}{name} must be a finite number, got {value}")
    return float(value)
