"""The fleet file: pools of GPUs and training jobs, validated, with errors that name the line.

    pools:
      - name: h100                 # unique
        gpu: h100-sxm              # a catalog id (fitplan gpus), or a mapping for a custom card:
                                   #   {name, memory: 48GiB, bf16_tflops, bandwidth_gb_s, ...}
        count: 16                  # GPUs in the pool, whole nodes
        gpus_per_node: 8           # default 8 (a pool smaller than that is one node)
        link: nvlink               # intra-node: nvlink | pcie (default: the catalog's)
        link_gb_s: 450             # optional: intra-node bus bandwidth per GPU, GB/s
        inter_node_gb_s: 50        # per GPU between nodes, GB/s (400 Gb/s InfiniBand = 50)
        usd_per_gpu_hour: 2.2      # default: the catalog's price
        cpu_ram_per_node: 2TiB     # for CPU offload (default 256GiB)
    jobs:
      - name: sft                  # unique
        model: llama-3.1-8b        # catalog id (fitplan models) or a config.json path
        methods: [lora, qlora]     # the methods you accept (default all); the cheapest wins
        lora_rank: 16              # the adapter rank of LoRA / QLoRA (default 16)
        target_batch: 64           # effective batch in sequences
        seq_len: 4096
        tokens: 2B                 # token budget: 2e9, 2B, 500M
        deadline_hours: 48         # optional
        budget_usd: 5000           # optional
        pools: [h100]              # optional: only these pools

A file may also hold ``title``, ``source``, ``notes`` and ``expect`` (checks run by
``fitplan scenario run``; see :mod:`searcher.scenarios.fleet`).

Every error is one line: ``fleet.yaml:12: jobs[1].target_batch: must be ≥ 1 (got -4)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from constraints.config import METHODS
from constraints.constants import DEFAULT_HEADROOM
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.throughput import DEFAULT_INTER_NODE_GB_S
from searcher.fleet.buy_rent import OwnershipIn
from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE

_TOKEN_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKENS_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def parse_tokens(value: Any) -> float:
    """2e9, '2e9', '2B', '500M' → tokens."""
    if isinstance(value, bool):
        raise ValueError("must be a number of tokens such as 2e9 or 2B")
    if isinstance(value, int | float):
        return float(value)
    m = _TOKENS_RE.match(str(value))
    if not m:
        raise ValueError(f"cannot read {value!r} as a number of tokens (write 2e9, 2B or 500M)")
    return float(m.group(1)) * _TOKEN_SUFFIX.get(m.group(2).lower(), 1.0)


class CustomGpuIn(BaseModel):
    """A card not in the catalog: enough figures to plan memory, time and cost."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    memory: str = Field(description="driver-reported capacity, e.g. 48GiB")
    bf16_tflops: float = Field(gt=0, description="dense bf16/fp16 tensor TFLOPS")
    bandwidth_gb_s: float = Field(gt=0, description="HBM/GDDR bandwidth, GB/s")
    fp16_tflops: float | None = Field(default=None, gt=0)
    fp8_tflops: float = Field(default=0.0, ge=0)
    fp32_tflops: float = Field(default=0.0, ge=0)
    compute_capability: str = "8.0"
    pcie_gb_s: float = Field(default=32.0, gt=0)
    supports_bf16: bool = True
    supports_fp8: bool = False
    supports_flash_attention: bool = True


class PoolIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    gpu: str | dict[str, Any]
    count: int = Field(ge=1)
    gpus_per_node: int = Field(default=8, ge=1)
    link: Literal["nvlink", "pcie"] | None = None
    link_gb_s: float | None = Field(default=None, gt=0)
    inter_node_gb_s: float = Field(default=DEFAULT_INTER_NODE_GB_S, gt=0)
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    cpu_ram_per_node: str | None = None
    headroom: float = Field(default=DEFAULT_HEADROOM, ge=0, lt=1)
    purchase_usd: float | None = Field(default=None, gt=0)  # buy vs rent: per GPU
    power_w: float | None = Field(default=None, gt=0)


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    methods: list[Literal["full", "lora", "qlora"]] = Field(
        default_factory=lambda: list(METHODS), min_length=1
    )
    lora_rank: int = Field(default=16, ge=1, le=4096)
    target_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    tokens: float = Field(gt=0)
    deadline_hours: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    pools: list[str] | None = Field(default=None, min_length=1)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v: Any) -> float:
        return parse_tokens(v)


class FleetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = ""
    source: str = ""
    notes: str = ""
    pools: list[PoolIn] = Field(min_length=1)
    jobs: list[JobIn] = Field(min_length=1)
    expect: list[dict[str, Any]] = Field(default_factory=list)
    ownership: OwnershipIn = Field(default_factory=OwnershipIn)


# ---------------------------------------------------------------- the resolved fleet


@dataclass(frozen=True)
class Pool:
    name: str
    gpu: GpuSpec  # with the pool's price and intra-node link
    count: int
    gpus_per_node: int
    inter_node_gb_s: float
    cpu_ram_per_node: int
    headroom: float
    link: str  # 'NVLink 450 GB/s', 'PCIe 32 GB/s'
    purchase_usd: float | None = None
    power_w: float | None = None

    @property
    def nodes(self) -> int:
        return self.count // self.gpus_per_node

    @property
    def price(self) -> float:
        assert self.gpu.usd_per_gpu_hour is not None  # resolve_pool guarantees it
        return self.gpu.usd_per_gpu_hour

    def gpu_counts(self) -> tuple[int, ...]:
        """GPU counts a job may take: inside one node a divisibility chain (1, 2, 4 … dividing
        the node, and the node), across nodes whole nodes. Sizes that divide each other pack
        into nodes whenever their sum fits (first-fit decreasing never strands a GPU), so the
        placement's 'Σ GPUs ≤ pool size' is exact."""
        g = self.gpus_per_node
        inside = {g} | {2**k for k in range(g.bit_length()) if g % 2**k == 0}
        return tuple(sorted(inside | {k * g for k in range(2, self.nodes + 1)}))

    def describe(self) -> str:
        nodes = f"{self.nodes} nodes × {self.gpus_per_node}" if self.nodes > 1 else "1 node"
        return (
            f"{self.count} × {self.gpu.name} ({nodes}, {self.link}"
            f"{f', {self.inter_node_gb_s:g} GB/s between nodes' if self.nodes > 1 else ''}"
            f", ${self.price:g}/GPU-h)"
        )


@dataclass(frozen=True)
class Job:
    name: str
    model: ModelSpec
    methods: tuple[str, ...]
    lora_rank: int
    target_batch: int
    seq_len: int
    tokens: float
    deadline_hours: float | None
    budget_usd: float | None
    pools: tuple[str, ...]  # the pools it may use


@dataclass(frozen=True)
class Fleet:
    path: str
    title: str
    source: str
    notes: str
    pools: tuple[Pool, ...]
    jobs: tuple[Job, ...]
    expect: tuple[dict[str, Any], ...]
    lines: Lines
    ownership: dict[str, float] = field(default_factory=dict)

    def pool(self, name: str) -> Pool:
        return next(p for p in self.pools if p.name == name)


# ---------------------------------------------------------------- YAML with line numbers


class Lines:
    """Where each value of a YAML document sits, for errors that name the line."""

    def __init__(self, path: str, root: Any) -> None:
        self.path = path
        self.root = root

    def line(self, loc: tuple[str | int, ...]) -> int | None:
        import yaml

        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for key in loc:
            if isinstance(node, yaml.MappingNode):
                hit = next((v for k, v in node.value if k.value == key), None)
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
                hit = node.value[key] if 0 <= key < len(node.value) else None
            else:
                hit = None
            if hit is None:
                break
            node, line = hit, hit.start_mark.line + 1
        return line

    def error(self, loc: tuple[str | int, ...], message: str, hint: str | None = None):
        line = self.line(loc)
        where = f"{self.path}:{line}" if line else self.path
        field = f" {field_name(loc)}:" if loc else ""
        return FitplanError(f"{where}:{field} {message}", hint)


def field_name(loc: tuple[str | int, ...]) -> str:
    out = ""
    for k in loc:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


def _pydantic_message(err: dict[str, Any], model: type[BaseModel] | None) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "missing (required)"
    if kind == "extra_forbidden":
        known = ", ".join(model.model_fields) if model else ""
        return f"unknown field{f' (known: {known})' if known else ''}"
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ")
    msg = msg.replace("Input should be greater than or equal to", "must be ≥")
    msg = msg.replace("Input should be greater than", "must be >")
    msg = msg.replace("Input should be less than", "must be <")
    return f"{msg} (got {err.get('input')!r})" if "input" in err and kind != "missing" else msg


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The schema class that holds the field at ``loc`` (for 'known fields' hints)."""
    names = [k for k in loc[:-1] if isinstance(k, str)]
    if not names:
        return FleetIn
    holders: dict[str, type[BaseModel]] = {"pools": PoolIn, "jobs": JobIn}
    return holders.get(names[0])


def read_yaml(path: str | Path) -> tuple[Any, Lines]:
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FitplanError(f"no such fleet file: {p}") from None
    except IsADirectoryError:
        raise FitplanError(f"{p} is a directory, not a fleet file") from None
    except UnicodeDecodeError:
        raise FitplanError(f"{p} is not a UTF-8 text file") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise FitplanError(
            f"{where}: not valid YAML ({getattr(err, 'problem', None) or err})"
        ) from None
    return data, Lines(str(p), root)


def looks_like_fleet(data: Any) -> bool:
    return isinstance(data, dict) and "pools" in data and "jobs" in data


def load_fleet(path: str | Path) -> Fleet:
    data, lines = read_yaml(path)
    if not looks_like_fleet(data):
        raise lines.error((), "a fleet file is a mapping with 'pools' and 'jobs'")
    return parse_fleet(data, lines)


def parse_fleet(data: dict[str, Any], lines: Lines) -> Fleet:
    try:
        raw = FleetIn(**data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first.get("loc", ()))
        raise lines.error(loc, _pydantic_message(dict(first), _model_at(loc))) from None
    _unique([p.name for p in raw.pools], "pools", lines)
    _unique([j.name for j in raw.jobs], "jobs", lines)
    pools = tuple(resolve_pool(p, i, lines) for i, p in enumerate(raw.pools))
    names = [p.name for p in pools]
    jobs = tuple(resolve_job(j, i, names, lines) for i, j in enumerate(raw.jobs))
    return Fleet(
        path=lines.path,
        title=raw.title or Path(lines.path).stem,
        source=raw.source,
        notes=raw.notes,
        pools=pools,
        jobs=jobs,
        expect=tuple(raw.expect),
        lines=lines,
        ownership={k: v for k, v in raw.ownership.model_dump().items() if v is not None},
    )


def _unique(names: list[str], key: str, lines: Lines) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise lines.error(
                (key, i, "name"), f"'{name}' is already the name of {key}[{seen[name]}]"
            )
        seen[name] = i


def _custom_gpu(spec: dict[str, Any], loc: tuple[str | int, ...], lines: Lines) -> GpuSpec:
    from constraints.units import parse_size

    try:
        c = CustomGpuIn(**spec)
    except ValidationError as err:
        first = err.errors()[0]
        sub = (*loc, *first.get("loc", ()))
        raise lines.error(sub, _pydantic_message(dict(first), CustomGpuIn)) from None
    try:
        memory = parse_size(c.memory)
    except FitplanError as err:
        raise lines.error((*loc, "memory"), err.message, err.hint) from None
    slug = re.sub(r"[^a-z0-9]+", "-", c.name.lower()).strip("-") or "custom"
    return GpuSpec(
        id=f"custom-{slug}",
        name=c.name,
        compute_capability=c.compute_capability,
        memory_bytes=memory,
        memory_reported_as=c.memory,
        bandwidth_gb_s=c.bandwidth_gb_s,
        fp32_tflops=c.fp32_tflops,
        tf32_tflops=c.fp32_tflops,
        bf16_tflops=c.bf16_tflops,
        fp16_tflops=c.fp16_tflops or c.bf16_tflops,
        fp8_tflops=c.fp8_tflops,
        pcie_gb_s=c.pcie_gb_s,
        supports_bf16=c.supports_bf16,
        supports_fp8=c.supports_fp8,
        supports_flash_attention=c.supports_flash_attention,
        source="fleet file",
        notes="custom card from a fleet file",
    )


def _with_link(
    gpu: GpuSpec, p: PoolIn, loc: tuple[str | int, ...], lines: Lines
) -> tuple[GpuSpec, str]:
    """The pool's intra-node link over the catalog's (a GpuSpec copy), and its description.

    The throughput model reads ``interconnect_gb_s`` (0 = PCIe at 80 % of ``pcie_gb_s``)."""
    native = gpu.interconnect_gb_s > gpu.pcie_gb_s  # NVLink / NVSwitch / Infinity Fabric
    if p.link == "pcie":
        bus = p.link_gb_s or gpu.pcie_gb_s * 0.8
        name = "PCIe"
    elif p.link == "nvlink":
        if p.link_gb_s is None and not native:
            raise lines.error(
                (*loc, "link"),
                f"{gpu.name} has no NVLink in the catalog",
                "give its bandwidth with link_gb_s, or use link: pcie",
            )
        bus = p.link_gb_s or gpu.interconnect_gb_s
        name = gpu.interconnect if native else "NVLink"
    else:  # the catalog's link, at the pool's bandwidth if given
        bus = p.link_gb_s or gpu.interconnect_gb_s or gpu.pcie_gb_s * 0.8
        name = gpu.interconnect if gpu.interconnect_gb_s > 0 else "PCIe"
    if p.link is not None or p.link_gb_s is not None:
        gpu = gpu.model_copy(update={"interconnect": name, "interconnect_gb_s": bus})
    short = name.split(" (")[0]
    if short.lower().startswith("none"):
        short = "PCIe"
    return gpu, f"{short} {bus:g} GB/s"


def resolve_pool(p: PoolIn, i: int, lines: Lines) -> Pool:
    from constraints.gpus import resolve_gpu
    from constraints.units import parse_size

    loc: tuple[str | int, ...] = ("pools", i)
    if isinstance(p.gpu, dict):
        gpu = _custom_gpu(p.gpu, (*loc, "gpu"), lines)
    else:
        try:
            gpu = resolve_gpu(p.gpu)
        except FitplanError as err:
            raise lines.error((*loc, "gpu"), err.message, err.hint) from None
        if gpu.custom:
            raise lines.error(
                (*loc, "gpu"),
                f"'{p.gpu}' gives the memory only; planning time and cost needs compute figures",
                "name a catalog GPU (fitplan gpus) or give a mapping "
                "{name, memory, bf16_tflops, bandwidth_gb_s}",
            )
    if p.usd_per_gpu_hour is not None:
        gpu = gpu.with_price(p.usd_per_gpu_hour)
    if gpu.usd_per_gpu_hour is None:
        raise lines.error(
            (*loc, "usd_per_gpu_hour"),
            f"{gpu.name} has no catalog price; the pool needs one to plan cost",
            "add usd_per_gpu_hour: 1.5",
        )
    gpu, link = _with_link(gpu, p, loc, lines)
    per_node = min(p.gpus_per_node, p.count)
    if p.count % per_node:
        raise lines.error(
            (*loc, "count"),
            f"{p.count} GPUs is not a whole number of {per_node}-GPU nodes",
            f"use a multiple of gpus_per_node ({per_node}) or set gpus_per_node",
        )
    try:
        cpu_ram = parse_size(p.cpu_ram_per_node) if p.cpu_ram_per_node else DEFAULT_CPU_RAM_PER_NODE
    except FitplanError as err:
        raise lines.error((*loc, "cpu_ram_per_node"), err.message, err.hint) from None
    return Pool(
        name=p.name,
        gpu=gpu,
        count=p.count,
        gpus_per_node=per_node,
        inter_node_gb_s=p.inter_node_gb_s,
        cpu_ram_per_node=cpu_ram,
        headroom=p.headroom,
        link=link,
        purchase_usd=p.purchase_usd,
        power_w=p.power_w,
    )


def resolve_job(j: JobIn, i: int, pool_names: list[str], lines: Lines) -> Job:
    from constraints.models import resolve_model

    loc: tuple[str | int, ...] = ("jobs", i)
    model_ref = j.model
    if not Path(model_ref).is_absolute() and ("/" in model_ref or model_ref.endswith(".json")):
        # a config.json path is relative to the fleet file
        candidate = Path(lines.path).parent / model_ref
        if candidate.exists():
            model_ref = str(candidate)
    try:
        model = resolve_model(model_ref)
    except FitplanError as err:
        raise lines.error((*loc, "model"), err.message, err.hint) from None
    if model.max_position and j.seq_len > model.max_position:
        raise lines.error(
            (*loc, "seq_len"),
            f"{j.seq_len} is longer than {model.name}'s context ({model.max_position} tokens)",
        )
    methods = tuple(m for m in METHODS if m in j.methods)
    allowed = tuple(pool_names)
    if j.pools is not None:
        for k, name in enumerate(j.pools):
            if name not in pool_names:
                from constraints.errors import closest

                near = closest(name, pool_names)
                raise lines.error(
                    (*loc, "pools", k),
                    f"no pool named '{name}'",
                    f"did you mean {', '.join(near)}?"
                    if near
                    else f"pools: {', '.join(pool_names)}",
                )
        allowed = tuple(n for n in pool_names if n in j.pools)
    if not math.isfinite(j.tokens):
        raise lines.error((*loc, "tokens"), "must be a finite number of tokens")
    return Job(
        name=j.name,
        model=model,
        methods=methods,
        lora_rank=j.lora_rank,
        target_batch=j.target_batch,
        seq_len=j.seq_len,
        tokens=j.tokens,
        deadline_hours=j.deadline_hours,
        budget_usd=j.budget_usd,
        pools=allowed,
    )
