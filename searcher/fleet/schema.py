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
        nvlink_domain: 72          # optional: GPUs per NVLink domain when it spans nodes (NVL72)
        usd_per_gpu_hour: 2.2      # default: the catalog's price
        cpu_ram_per_node: 2TiB     # for CPU offload (default 256GiB)
    jobs:
      - name: sft                  # unique
        model: llama-3.1-8b        # catalog id (fitplan models) or a config.json path
        family: llama              # optional, as --family: read a config.json whose model_type
                                   #   is missing or unknown as this family
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

This module holds what the file may say (the pydantic input models) and what it becomes (the
resolved :class:`Pool`, :class:`Job`, :class:`Fleet`). Reading and resolving a file is
:mod:`searcher.fleet.fleet_file`; errors name their line (:mod:`searcher.fleet.yaml_lines`):
``fleet.yaml:12: jobs[1].target_batch: must be ≥ 1 (got -4)``.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from constraints import limits as L
from constraints.config import METHODS
from constraints.constants import DEFAULT_HEADROOM
from constraints.frozen import frozen
from constraints.gpus import GpuSpec
from constraints.models import ModelSpec
from constraints.throughput import DEFAULT_INTER_NODE_GB_S
from searcher.fleet.buy_rent import OwnershipIn
from searcher.fleet.yaml_lines import Lines

#: fleet fields are what YAML typed: "8" is not 8, .nan and .inf are refused
_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
#: the most TFLOPS, GB/s, hours or dollars a fleet field may state (far beyond any real value)
_HUGE = 1e9
_TOKEN_SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKENS_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def parse_tokens(value: Any) -> float:
    """2e9, '2e9', '2B', '500M' → tokens."""
    if isinstance(value, bool):
        raise ValueError("must be a number of tokens such as 2e9 or 2B")
    if isinstance(value, int | float):
        return float(value)
    m = _TOKENS_RE.match(value) if isinstance(value, str) and len(value) <= 40 else None
    if not m:
        raise ValueError(
            f"cannot read {L.excerpt(value)} as a number of tokens (write 2e9, 2B or 500M)"
        )
    return float(m.group(1)) * _TOKEN_SUFFIX.get(m.group(2).lower(), 1.0)


class CustomGpuIn(BaseModel):
    """A card not in the catalog: enough figures to plan memory, time and cost."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=200)
    memory: str = Field(description="driver-reported capacity, e.g. 48GiB")
    bf16_tflops: float = Field(gt=0, le=_HUGE, description="dense bf16/fp16 tensor TFLOPS")
    bandwidth_gb_s: float = Field(gt=0, le=_HUGE, description="HBM/GDDR bandwidth, GB/s")
    fp16_tflops: float | None = Field(default=None, gt=0, le=_HUGE)
    fp8_tflops: float = Field(default=0.0, ge=0, le=_HUGE)
    fp32_tflops: float = Field(default=0.0, ge=0, le=_HUGE)
    compute_capability: str = "8.0"
    pcie_gb_s: float = Field(default=32.0, gt=0, le=_HUGE)
    supports_bf16: bool = True
    supports_fp8: bool = False
    supports_flash_attention: bool = True


class PoolIn(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1, max_length=200)
    gpu: str | dict[str, Any]
    count: int = Field(ge=1, le=int(L.GPU_COUNT.high))
    gpus_per_node: int = Field(default=8, ge=1, le=int(L.GPUS_PER_NODE.high))
    link: Literal["nvlink", "pcie"] | None = None
    link_gb_s: float | None = Field(default=None, gt=0, le=_HUGE)
    inter_node_gb_s: float = Field(default=DEFAULT_INTER_NODE_GB_S, gt=0, le=_HUGE)
    nvlink_domain: int | None = Field(default=None, ge=1, le=L.GPUS_PER_NODE.high)
    usd_per_gpu_hour: float | None = Field(default=None, ge=0, le=L.PRICE.high)
    cpu_ram_per_node: str | None = None
    headroom: float = Field(default=DEFAULT_HEADROOM, ge=0, lt=1)
    purchase_usd: float | None = Field(default=None, gt=0)  # buy vs rent: per GPU
    power_w: float | None = Field(default=None, gt=0)


class JobIn(BaseModel):
    model_config = _STRICT

    name: str = Field(min_length=1, max_length=200)
    model: str = Field(min_length=1, max_length=4096)
    #: --family's meaning and checks: a config.json's missing or unknown model_type read as it
    family: str | None = Field(default=None, min_length=1, max_length=200)
    methods: list[Literal["full", "lora", "qlora"]] = Field(
        default_factory=lambda: list(METHODS), min_length=1
    )
    lora_rank: int = Field(default=16, ge=1, le=4096)
    target_batch: int = Field(ge=1, le=int(L.TARGET_BATCH.high))
    seq_len: int = Field(ge=1, le=int(L.SEQ_LEN.high))
    tokens: float = Field(gt=0, le=L.TOKENS.high)
    deadline_hours: float | None = Field(default=None, gt=0, le=_HUGE)
    budget_usd: float | None = Field(default=None, gt=0, le=_HUGE)
    pools: list[str] | None = Field(default=None, min_length=1, max_length=1000)

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v: Any) -> float:
        return parse_tokens(v)


class FleetIn(BaseModel):
    model_config = _STRICT

    title: str = ""
    source: str = ""
    notes: str = ""
    pools: list[PoolIn] = Field(min_length=1)
    jobs: list[JobIn] = Field(min_length=1)
    expect: list[dict[str, Any]] = Field(default_factory=list)
    ownership: OwnershipIn = Field(default_factory=OwnershipIn)


# ---------------------------------------------------------------- the resolved fleet


@frozen
class Pool:
    name: str
    gpu: GpuSpec  # with the pool's price and intra-node link
    count: int
    gpus_per_node: int
    inter_node_gb_s: float
    cpu_ram_per_node: int
    headroom: float
    link: str  # 'NVLink 450 GB/s', 'PCIe 32 GB/s'
    nvlink_domain: int | None = None  # GPUs per NVLink domain beyond a node (None: the GPU's)
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


@frozen
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
    #: the optional packages its plans may use (fleet --stack; searcher/search/stack.py);
    #: None: any
    stack: frozenset[str] | None = None


@frozen
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
