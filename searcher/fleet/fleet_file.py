"""Reading a fleet file: YAML → the input schema (:mod:`searcher.fleet.schema`) → a resolved
:class:`Fleet` (catalog GPUs and models looked up, defaults filled), every error naming its line."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from constraints import limits as L
from constraints.config import METHODS
from constraints.errors import FitplanError
from constraints.gpus import GpuSpec
from constraints.limits import excerpt
from searcher.fleet.schema import CustomGpuIn, Fleet, FleetIn, Job, JobIn, Pool, PoolIn
from searcher.fleet.yaml_lines import Lines, pydantic_message, read_yaml
from searcher.search.space import DEFAULT_CPU_RAM_PER_NODE
from searcher.validate import check_size, family_in_file


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The schema class that holds the field at ``loc`` (for 'known fields' hints)."""
    names = [k for k in loc[:-1] if isinstance(k, str)]
    if not names:
        return FleetIn
    holders: dict[str, type[BaseModel]] = {"pools": PoolIn, "jobs": JobIn}
    return holders.get(names[0])


def looks_like_fleet(data: Any) -> bool:
    return isinstance(data, dict) and "pools" in data and "jobs" in data


def load_fleet(path: str | Path) -> Fleet:
    data, lines = read_yaml(path)
    if not looks_like_fleet(data):
        raise lines.error((), "a fleet file is a mapping with 'pools' and 'jobs'")
    return parse_fleet(data, lines)


def parse_fleet(data: dict[str, Any], lines: Lines) -> Fleet:
    try:
        raw = FleetIn.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = tuple(first.get("loc", ()))
        raise lines.error(loc, pydantic_message(dict(first), _model_at(loc))) from None
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
                (key, i, "name"), f"{excerpt(name)} is already the name of {key}[{seen[name]}]"
            )
        seen[name] = i


def _custom_gpu(spec: dict[str, Any], loc: tuple[str | int, ...], lines: Lines) -> GpuSpec:

    try:
        c = CustomGpuIn.model_validate(spec)
    except ValidationError as err:
        first = err.errors()[0]
        sub = (*loc, *first.get("loc", ()))
        raise lines.error(sub, pydantic_message(dict(first), CustomGpuIn)) from None
    try:
        memory = check_size(c.memory, L.GPU_MEMORY, "memory")
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
                f"{excerpt(p.gpu)} gives the memory only; planning time and cost needs compute figures",
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
        cpu_ram = (
            check_size(p.cpu_ram_per_node, L.CPU_RAM, "cpu_ram_per_node")
            if p.cpu_ram_per_node
            else DEFAULT_CPU_RAM_PER_NODE
        )
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
        nvlink_domain=p.nvlink_domain,
        purchase_usd=p.purchase_usd,
        power_w=p.power_w,
    )


def resolve_job(j: JobIn, i: int, pool_names: list[str], lines: Lines) -> Job:
    from constraints.models import resolve_model

    loc: tuple[str | int, ...] = ("jobs", i)
    model_ref = j.model
    if "\x00" in model_ref:
        raise lines.error((*loc, "model"), f"{excerpt(model_ref)} is not a model name or a path")
    if not Path(model_ref).is_absolute() and ("/" in model_ref or model_ref.endswith(".json")):
        # a config.json path is relative to the fleet file
        candidate = Path(lines.path).parent / model_ref
        if candidate.exists():
            model_ref = str(candidate)
    try:
        model = resolve_model(model_ref, family=j.family)
    except FitplanError as err:
        if j.family is not None and "--family" in err.message:  # the field's own refusal
            err = family_in_file(err)
            raise lines.error((*loc, "family"), err.message, err.hint) from None
        err = family_in_file(err)  # "add family: NAME" where the model_type is unknown
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
                    f"no pool named {excerpt(name)}",
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
