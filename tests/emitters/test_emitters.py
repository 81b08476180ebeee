"""Launch-config emitters: every format expresses every knob of a set of representative plans, or
refuses naming the knob; the files parse (JSON, YAML, Python, bash); the batch arithmetic holds;
writing is all-or-nothing; bad input is one line and exit code 2.

The heavy group (``-m heavy``; .ci/run installs torch 2.13.0 CPU and the ``launch`` extra) checks
the files with the tools themselves: DeepSpeed's own config validation (deepspeed installs on a
CPU machine here, so this is DeepSpeed's DeepSpeedConfig, not a list of keys — the light test
``test_deepspeed_keys_are_documented`` additionally checks the keys against DeepSpeed's documented
ones, because DeepSpeedConfig ignores unknown top-level keys), transformers' TrainingArguments,
PEFT's LoraConfig, BitsAndBytesConfig, accelerate's config loader and launch plugins, and an
end-to-end run of the emitted hf script (one real step of a tiny random Llama with LoRA on the CPU,
on one process and on two under the emitted torchrun command).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import yaml

from constraints.config import TrainConfig
from constraints.errors import FitplanError
from constraints.precision import optimizer as optimizer_spec
from searcher.cli import main
from searcher.emitters import format_names, get_emitter
from searcher.emitters.base import KNOB_NAMES, Emission, EmitOptions
from searcher.emitters.formats.torchtune import torchtune_run
from searcher.emitters.plan import load_plan, make_plan
from searcher.files import atomic_write_files

FORMATS = ("accelerate", "axolotl", "deepspeed", "hf", "torchrun", "torchtune")
MODEL = "llama-3.1-8b"

# representative plans: name -> knobs (micro 2, accumulation 4, 1024 tokens unless set)
PLANS: dict[str, dict[str, Any]] = {
    "full-1gpu-bf16torch": dict(method="full", recipe="bf16-torch"),
    "full-z3-8gpu-master-ckpt": dict(
        method="full", recipe="bf16-master", zero=3, dp=8, checkpointing="full"
    ),
    "full-z2-offload-optimizer": dict(
        method="full", recipe="bf16-master", zero=2, offload="optimizer", dp=4
    ),
    "full-z3-offload-all-torch": dict(
        method="full", recipe="bf16-torch", zero=3, offload="all", dp=8
    ),
    "full-z1-amp": dict(method="full", recipe="amp", zero=1, dp=2),
    "full-z0-ddp-fp32-sgd": dict(method="full", recipe="fp32", optimizer="sgd-momentum", dp=2),
    "full-z2-fsdp-torch-lion": dict(
        method="full", recipe="bf16-torch", optimizer="lion", zero=2, dp=4
    ),
    "full-pure-offload": dict(method="full", recipe="bf16-pure", zero=2, offload="optimizer", dp=2),
    "full-master-fp16": dict(
        method="full", recipe="bf16-master", compute_dtype="fp16", zero=2, dp=2
    ),
    "full-opt-in-bwd": dict(
        method="full", recipe="bf16-torch", optimizer_in_backward=True, grad_accum=1
    ),
    "full-tp2": dict(method="full", recipe="bf16-torch", zero=3, tp=2, dp=4),
    "full-pp2": dict(method="full", recipe="bf16-torch", zero=3, pp=2, dp=4),
    "full-fused-ce": dict(method="full", recipe="bf16-torch", loss="fused"),
    "full-chunked-ce": dict(method="full", recipe="bf16-torch", loss="chunked"),
    "full-selective-eager": dict(
        method="full", recipe="bf16-torch", checkpointing="selective", attention="eager"
    ),
    "full-adafactor": dict(method="full", recipe="bf16-torch", optimizer="adafactor"),
    "full-16gpu-2nodes": dict(method="full", recipe="bf16-master", zero=3, dp=16),
    "lora-8bit-ckpt": dict(
        method="lora",
        lora_rank=16,
        recipe="bf16-torch",
        optimizer="adamw-8bit",
        checkpointing="full",
    ),
    "lora-attention-dropout": dict(
        method="lora", lora_rank=8, lora_targets="attention", lora_dropout=0.05, recipe="bf16-torch"
    ),
    "lora-qv-amp": dict(method="lora", lora_rank=32, lora_targets="q_proj,v_proj", recipe="amp"),
    "lora-master-z3": dict(method="lora", lora_rank=64, recipe="bf16-master", zero=3, dp=4),
    "lora-fp32-adapters-torch": dict(method="lora", recipe="bf16-torch", adapter_dtype="fp32"),
    "qlora-nf4dq-paged": dict(
        method="qlora",
        quant="nf4-dq",
        lora_rank=64,
        recipe="bf16-torch",
        optimizer="paged-adamw-8bit",
        checkpointing="full",
    ),
    "qlora-nf4-z3": dict(method="qlora", quant="nf4", recipe="bf16-torch", zero=3, dp=2),
    "lora-int8-fp32-adapters": dict(
        method="qlora", quant="int8", recipe="bf16-torch", adapter_dtype="fp32"
    ),
    "fp8": dict(method="full", recipe="bf16-master", compute_dtype="fp8"),
    # knobs that describe measured torchtune runs (constraints/config.py): refused by every format
    "z3-embedding-units": dict(
        method="full", recipe="bf16-torch", zero=3, offload="all", dp=8, fsdp_embedding_units=True
    ),
    "z3-held-logits": dict(
        method="full", recipe="bf16-torch", zero=3, offload="all", dp=8, loss="standard-held"
    ),
    # gradients reduced on the last micro-batch only (FSDP no_sync): the HF Trainer formats write
    # sync_each_batch false; torchtune's recipes cannot skip the reduction
    "fsdp-last-micro-batch": dict(
        method="full", recipe="bf16-torch", zero=3, dp=4, grad_sync="last-micro-batch"
    ),
}

# (plan, format) -> the knob the refusal names (the first one checked). Every other pair emits.
DS_BF16_TORCH_AT_ZERO_0 = "recipe"  # DeepSpeed drops the fp32 master only under ZeRO 1-3
REFUSE: dict[tuple[str, str], str] = {
    ("full-1gpu-bf16torch", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("full-z3-8gpu-master-ckpt", "torchtune"): "recipe",
    ("full-z2-offload-optimizer", "torchtune"): "recipe",
    ("full-z1-amp", "axolotl"): "recipe",
    ("full-z1-amp", "torchtune"): "recipe",
    ("full-z2-fsdp-torch-lion", "torchtune"): "optimizer",
    # torchtune 0.6.1's distributed recipes always shard (no DDP)
    ("full-z0-ddp-fp32-sgd", "torchtune"): "zero",
    # torchtune 0.6.1 has no LinearCrossEntropyLoss
    ("full-fused-ce", "torchtune"): "loss",
    ("full-pure-offload", "torchtune"): "recipe",
    ("full-master-fp16", "torchtune"): "recipe",
    **{("full-opt-in-bwd", f): "optimizer_in_backward" for f in FORMATS if f != "torchtune"},
    **{("full-tp2", f): "tp" for f in FORMATS if f != "torchtune"},
    **{("full-pp2", f): "pp" for f in FORMATS},
    ("full-fused-ce", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    **{("full-chunked-ce", f): "loss" for f in ("accelerate", "deepspeed", "hf", "torchrun")},
    **{("full-selective-eager", f): "checkpointing" for f in FORMATS},
    ("full-adafactor", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("full-16gpu-2nodes", "torchtune"): "recipe",
    ("lora-8bit-ckpt", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("lora-attention-dropout", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("lora-qv-amp", "axolotl"): "recipe",
    ("lora-qv-amp", "torchtune"): "recipe",
    ("lora-master-z3", "torchtune"): "recipe",
    ("lora-fp32-adapters-torch", "torchtune"): "adapter_dtype",
    ("lora-fp32-adapters-torch", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("qlora-nf4dq-paged", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("qlora-nf4-z3", "torchtune"): "quant",
    # planned on FSDP with PEFT's fp32 adapters, which DeepSpeed's bf16 engine would cast
    ("qlora-nf4-z3", "deepspeed"): "adapter_dtype",
    # planned with PEFT's fp32 adapters, which torchtune's recipes do not build
    ("lora-8bit-ckpt", "torchtune"): "adapter_dtype",
    ("lora-attention-dropout", "torchtune"): "adapter_dtype",
    ("qlora-nf4dq-paged", "torchtune"): "adapter_dtype",
    ("lora-int8-fp32-adapters", "deepspeed"): DS_BF16_TORCH_AT_ZERO_0,
    ("lora-int8-fp32-adapters", "torchtune"): "quant",
    **{("fp8", f): "compute_dtype" for f in FORMATS},
    **{("z3-embedding-units", f): "fsdp_embedding_units" for f in FORMATS},
    **{("z3-held-logits", f): "loss" for f in FORMATS},
    ("fsdp-last-micro-batch", "torchtune"): "grad_sync",
}


def plan_of(name: str, model: str = MODEL, **extra: Any):
    knobs = {"micro_batch": 2, "grad_accum": 4, "seq_len": 1024, **PLANS[name], **extra}
    return make_plan(TrainConfig(**knobs), model, gpu="h100-sxm")


def emit(name: str, fmt: str, out: str = "out", **options: Any) -> Emission:
    return get_emitter(fmt).emit(plan_of(name), EmitOptions(out=out, **options))


def load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"emitted_{abs(hash(path))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(emission: Emission, folder: Path) -> Path:
    atomic_write_files(folder, [(f.name, f.text, f.executable) for f in emission.files], force=True)
    return folder


# ----------------------------------------------------------------------------------------------
# The contract: every knob accounted for, expressed or refused by name
# ----------------------------------------------------------------------------------------------


def test_formats_are_discovered() -> None:
    assert tuple(format_names()) == FORMATS


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_emitter_accounts_for_every_knob(fmt: str) -> None:
    assert set(KNOB_NAMES) == set(TrainConfig.model_fields)
    emitter = get_emitter(fmt)
    assert emitter.name == fmt
    assert set(emitter.knobs) == set(KNOB_NAMES), set(KNOB_NAMES) ^ set(emitter.knobs)
    assert all(emitter.knobs[k].strip() for k in KNOB_NAMES)


@pytest.mark.parametrize("name", PLANS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_expresses_or_refuses_by_name(name: str, fmt: str, tmp_path: Path) -> None:
    expected = REFUSE.get((name, fmt))
    try:
        emission = emit(name, fmt, out=str(tmp_path))
    except FitplanError as err:
        assert expected is not None, f"{fmt} refused {name}: {err}"
        text = str(err)
        assert "\n" not in text
        assert text.startswith(f"--emit {fmt} cannot express {expected}="), text
        return
    assert expected is None, f"{fmt} should refuse {name} ({expected}) but emitted"
    CHECKS[fmt](plan_of(name), emission, tmp_path)


# ----------------------------------------------------------------------------------------------
# What each file must say, knob by knob
# ----------------------------------------------------------------------------------------------


def check_ds(cfg: TrainConfig, ds: dict[str, Any]) -> None:
    assert ds["train_batch_size"] == cfg.micro_batch * cfg.grad_accum * cfg.dp
    assert ds["train_micro_batch_size_per_gpu"] == cfg.micro_batch
    assert ds["gradient_accumulation_steps"] == cfg.grad_accum
    z = ds["zero_optimization"]
    assert z["stage"] == cfg.zero
    assert ("offload_optimizer" in z) == (cfg.offload in ("optimizer", "all"))
    assert ("offload_param" in z) == (cfg.offload == "all")
    bf16, fp16, autocast = ds.get("bf16", {}), ds.get("fp16", {}), ds.get("torch_autocast", {})
    if cfg.recipe == "fp32":
        assert not (bf16 or fp16 or autocast)
    elif cfg.recipe == "amp":
        assert autocast == {"enabled": True, "dtype": "bfloat16"} and not bf16 and not fp16
    elif cfg.recipe == "bf16-master":
        if cfg.compute_dtype == "fp16":
            assert fp16["enabled"] and not bf16
        else:
            assert bf16 == {"enabled": True}
    elif cfg.recipe == "bf16-pure":
        assert bf16 == {"enabled": True, "bf16_master_weights_and_grads": True}
    elif cfg.recipe == "bf16-torch":
        assert bf16["bf16_master_weights_and_grads"] and bf16["bf16_optimizer_states"]
    opt = ds.get("optimizer")
    expected = {"adamw": "AdamW", "lion": "Lion", "sgd": "SGD", "sgd-momentum": "SGD"}.get(
        cfg.optimizer
    )
    assert (opt or {}).get("type") == expected
    if cfg.optimizer == "sgd-momentum":
        assert opt and opt["params"]["momentum"] == 0.9
    if expected is None:
        assert ds["zero_allow_untested_optimizer"] is True


def check_script(plan, path: Path, *, sharding_in_script: bool = True) -> ModuleType:
    cfg = plan.config
    text = path.read_text()
    compile(text, str(path), "exec")
    m = load_script(path)
    assert m.MODEL == "meta-llama/Llama-3.1-8B"
    assert (
        cfg.method,
        cfg.seq_len,
        cfg.micro_batch,
        cfg.grad_accum,
        cfg.dp,
    ) == (m.METHOD, m.SEQ_LEN, m.MICRO_BATCH, m.GRAD_ACCUM, m.WORLD_SIZE)
    assert optimizer_spec(cfg.optimizer).hf_name == m.OPTIM
    assert ("momentum=0.9" if cfg.optimizer == "sgd-momentum" else None) == m.OPTIM_ARGS
    assert (0.99 if cfg.optimizer == "lion" else 0.999) == m.ADAM_BETA2
    load = {"fp32": "fp32", "amp": "fp32"}.get(
        cfg.recipe, "fp16" if cfg.compute_dtype == "fp16" else "bf16"
    )
    assert load == m.LOAD_DTYPE
    assert {"flash": "flash_attention_2", "sdpa": "sdpa", "eager": "eager"}[
        cfg.attention
    ] == m.ATTN_IMPLEMENTATION
    assert (cfg.loss == "fused") == m.FUSED_CROSS_ENTROPY
    ckpt = cfg.checkpointing == "full"
    assert (m.GRADIENT_CHECKPOINTING or m.ACTIVATION_CHECKPOINTING_BY_SHARDING) == ckpt
    if cfg.method == "full":
        assert m.LORA is None and m.lora_config_kwargs() is None
    else:
        assert m.LORA["r"] == cfg.lora_rank
        assert m.LORA["lora_alpha"] == 2 * cfg.lora_rank
        assert m.LORA["lora_dropout"] == cfg.lora_dropout
        targets = {
            "all-linear": "all-linear",
            "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
        }
        assert m.LORA["target_modules"] == targets.get(
            cfg.lora_targets, cfg.lora_targets.split(",")
        )
        assert "2 x rank" in text
        # PEFT builds fp32 adapters (autocast_adapter_dtype=True) unless pinned; the recipes
        # with a master copy run under DeepSpeed, whose bf16 mode casts them back
        peft_default = "fp32" if cfg.recipe in ("bf16-torch", "amp", "fp32") else load
        assert (cfg.adapter_dtype or peft_default) == m.ADAPTER_DTYPE
    quant = m.QUANT or {}
    assert bool(quant) == (cfg.quant != "none")
    if cfg.quant == "int8":
        assert quant == {"load_in_8bit": True}
    elif cfg.quant in ("nf4", "nf4-dq"):
        assert quant["load_in_4bit"] and quant["bnb_4bit_quant_type"] == "nf4"
        assert quant["bnb_4bit_use_double_quant"] == (cfg.quant == "nf4-dq")
    if sharding_in_script:
        if cfg.zero in (2, 3) and m.DEEPSPEED is None:
            words = m.FSDP["fsdp"].split()
            assert words[0] == ("full_shard" if cfg.zero == 3 else "shard_grad_op")
            assert ("offload" in words) == (cfg.offload == "all")
        if m.DEEPSPEED:
            check_ds(cfg, json.loads((path.parent / m.DEEPSPEED).read_text()))
        if (
            cfg.zero == 1
            or cfg.offload == "optimizer"
            or cfg.recipe in ("bf16-master", "bf16-pure")
        ):
            assert m.DEEPSPEED == "ds_config.json"
    else:
        assert m.DEEPSPEED is None and m.FSDP is None
    return m


def check_plan_file(plan, folder: Path) -> None:
    back = load_plan(str(folder / "plan.json"))
    assert back.config == plan.config
    assert back.model.id == plan.model.id


def check_hf(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    check_script(plan, tmp / "train.py")
    check_plan_file(plan, tmp)
    if plan.gpus == 1 and "ds_config.json" not in {f.name for f in emission.files}:
        assert emission.command == f"python {tmp}/train.py"
    else:
        assert f"--nproc_per_node {plan.procs_per_node}" in emission.command


def check_deepspeed(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    check_ds(plan.config, json.loads((tmp / "ds_config.json").read_text()))
    m = check_script(plan, tmp / "train.py")
    assert m.DEEPSPEED == "ds_config.json"
    assert f"--num_gpus {plan.procs_per_node}" in emission.command
    if plan.nodes > 1:
        assert f"--num_nodes {plan.nodes}" in emission.command


def check_torchrun(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    check_script(plan, tmp / "train.py")
    sh = tmp / "launch_torchrun.sh"
    assert os.access(sh, os.X_OK)
    subprocess.run(["bash", "-n", str(sh)], check=True)
    text = sh.read_text()
    assert f"--nproc_per_node {plan.procs_per_node}" in text
    assert (f"--nnodes {plan.nodes}" in text) == (plan.nodes > 1)


def check_accelerate(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    cfg = plan.config
    acc = yaml.safe_load((tmp / "accelerate_config.yaml").read_text())
    assert acc["num_processes"] == plan.gpus and acc["num_machines"] == plan.nodes
    m = check_script(plan, tmp / "train.py", sharding_in_script=False)
    kind = acc["distributed_type"]
    if kind == "DEEPSPEED":
        assert "mixed_precision" not in acc
        # relative to the YAML, so the folder can move
        ds_path = Path(acc["deepspeed_config"]["deepspeed_config_file"])
        assert not ds_path.is_absolute()
        check_ds(cfg, json.loads((tmp / ds_path).read_text()))
    elif kind == "FSDP":
        f = acc["fsdp_config"]
        assert f["fsdp_reshard_after_forward"] == (cfg.zero == 3)
        assert f["fsdp_offload_params"] == (cfg.offload == "all")
        assert f["fsdp_activation_checkpointing"] == (cfg.checkpointing == "full")
        assert not m.GRADIENT_CHECKPOINTING
    else:
        assert kind == ("MULTI_GPU" if plan.gpus > 1 else "NO")
        assert cfg.zero == 0
    if kind != "DEEPSPEED":
        half = "fp16" if cfg.compute_dtype == "fp16" else "bf16"
        assert acc["mixed_precision"] == ("no" if cfg.recipe == "fp32" else half)


def check_axolotl(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    cfg = plan.config
    text = (tmp / "axolotl.yaml").read_text()
    ax = yaml.safe_load(text)
    assert ax["base_model"] == "meta-llama/Llama-3.1-8B"
    assert (ax["micro_batch_size"], ax["gradient_accumulation_steps"], ax["sequence_len"]) == (
        cfg.micro_batch,
        cfg.grad_accum,
        cfg.seq_len,
    )
    assert ax["sample_packing"] is True
    assert ax["optimizer"] == optimizer_spec(cfg.optimizer).hf_name
    assert ax["bf16"] == (cfg.recipe != "fp32" and cfg.compute_dtype != "fp16")
    ckpt = ax["gradient_checkpointing"] or ax.get("fsdp_config", {}).get("activation_checkpointing")
    assert bool(ckpt) == (cfg.checkpointing == "full")
    attn = {"flash": "flash_attention", "sdpa": "sdp_attention", "eager": "eager_attention"}
    assert ax[attn[cfg.attention]] is True
    assert ax.get("liger_fused_linear_cross_entropy", False) == (cfg.loss == "fused")
    assert ax.get("chunked_cross_entropy", False) == (cfg.loss == "chunked")
    if cfg.method == "full":
        assert "adapter" not in ax
    else:
        assert ax["adapter"] == ("qlora" if cfg.quant in ("nf4", "nf4-dq") else "lora")
        assert ax["lora_r"] == cfg.lora_rank and ax["lora_alpha"] == 2 * cfg.lora_rank
        assert "2 x rank" in text
        assert ax["lora_dropout"] == cfg.lora_dropout
        if cfg.lora_targets == "all-linear":
            assert ax["lora_target_linear"] is True
        else:
            assert ax["lora_target_modules"]
        assert ax["peft_autocast_adapter_dtype"] == (cfg.trainable_dtype() == "fp32")
    assert ax.get("load_in_8bit", False) == (cfg.quant == "int8")
    assert ax.get("load_in_4bit", False) == (cfg.quant in ("nf4", "nf4-dq"))
    if cfg.quant in ("nf4", "nf4-dq"):
        assert ax["bnb_config_kwargs"]["bnb_4bit_use_double_quant"] == (cfg.quant == "nf4-dq")
    if "deepspeed" in ax:
        # inline: no path axolotl would read relative to wherever it is started
        assert isinstance(ax["deepspeed"], dict)
        check_ds(cfg, ax["deepspeed"])
    elif cfg.zero in (2, 3):
        assert ax["fsdp_config"]["reshard_after_forward"] == (cfg.zero == 3)
        assert ax["fsdp_config"]["offload_params"] == (cfg.offload == "all")
    assert f"--nproc_per_node {plan.procs_per_node}" in emission.command


def check_torchtune(plan, emission: Emission, tmp: Path) -> None:
    write(emission, tmp)
    cfg = plan.config
    sh = tmp / "torchtune.sh"
    subprocess.run(["bash", "-n", str(sh)], check=True)
    recipe, config, o, _removals = torchtune_run(plan, EmitOptions(out=str(tmp)))
    text = sh.read_text()
    assert f" {recipe} --config {config} " in text
    for k, v in o.items():
        assert f"{k}={v}" in text or f"'{k}={v}'" in text, k
    kind = "lora" if cfg.method != "full" else "full"
    distributed = plan.gpus > 1 or cfg.offload == "all"
    assert recipe == f"{kind}_finetune_{'distributed' if distributed else 'single_device'}"
    assert o["batch_size"] == str(cfg.micro_batch)
    assert o["gradient_accumulation_steps"] == str(cfg.grad_accum)
    assert o["tokenizer.max_seq_len"] == str(cfg.seq_len) and o["dataset.packed"] == "True"
    assert o["dtype"] == ("fp32" if cfg.recipe == "fp32" else "bf16")
    assert o["enable_activation_checkpointing"] == str(cfg.checkpointing == "full")
    loss = {
        "standard": "CrossEntropyLoss",
        "chunked": "CEWithChunkedOutputLoss",
        "fused": "LinearCrossEntropyLoss",
    }
    assert o["loss._component_"].endswith(loss[cfg.loss])
    if cfg.method != "full":
        assert o["model.lora_rank"] == str(cfg.lora_rank)
        assert o["model.lora_alpha"] == str(2 * cfg.lora_rank)
        assert "2 x rank" in text
        assert (
            o["model._component_"]
            .rsplit(".", 1)[-1]
            .startswith("qlora_" if cfg.quant != "none" else "lora_")
        )
    if distributed:
        assert f"--nproc_per_node {plan.procs_per_node}" in text
        assert o["fsdp_cpu_offload"] == str(cfg.offload == "all")
        # torchtune 0.6.1 reads no data-parallel dims: its recipes shard over every process
        assert cfg.zero in (2, 3)
        assert o["fsdp_reshard_after_forward"] == str(cfg.zero == 3)
        assert not any(k.startswith("data_parallel") for k in o)
    if cfg.tp > 1:
        assert o["tensor_parallel_dim"] == str(cfg.tp)
    if cfg.optimizer_in_backward:
        assert o["optimizer_in_bwd"] == "True"


CHECKS = {
    "hf": check_hf,
    "deepspeed": check_deepspeed,
    "torchrun": check_torchrun,
    "accelerate": check_accelerate,
    "axolotl": check_axolotl,
    "torchtune": check_torchtune,
}

#: DeepSpeed's documented config keys (https://www.deepspeed.ai/docs/config-json/ and
#: deepspeed/runtime/{config,precision_config,zero/config}.py): top level and zero_optimization
DS_TOP_KEYS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "steps_per_print",
    "wall_clock_breakdown",
    "optimizer",
    "bf16",
    "fp16",
    "torch_autocast",
    "zero_optimization",
    "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer",
}
DS_ZERO_KEYS = {
    "stage",
    "overlap_comm",
    "contiguous_gradients",
    "offload_optimizer",
    "offload_param",
    "stage3_gather_16bit_weights_on_model_save",
    # bucket sizes, written out so the memory model budgets what runs
    # (deepspeed/runtime/zero/config.py DeepSpeedZeroConfig field names)
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
}
DS_BF16_KEYS = {"enabled", "bf16_master_weights_and_grads", "bf16_optimizer_states"}


def ds_configs() -> list[tuple[str, dict[str, Any], int]]:
    out = []
    for name in PLANS:
        try:
            emission = emit(name, "deepspeed")
        except FitplanError:
            continue
        out.append(
            (name, json.loads(emission.file("ds_config.json").text), plan_of(name).config.dp)
        )
    return out


def test_deepspeed_keys_are_documented() -> None:
    configs = ds_configs()
    assert len(configs) >= 8
    for name, ds, _dp in configs:
        assert set(ds) <= DS_TOP_KEYS, (name, set(ds) - DS_TOP_KEYS)
        assert set(ds["zero_optimization"]) <= DS_ZERO_KEYS, name
        assert set(ds.get("bf16", {})) <= DS_BF16_KEYS, name


def test_lora_alpha_override() -> None:
    emission = emit("lora-8bit-ckpt", "axolotl", lora_alpha=7)
    ax = yaml.safe_load(emission.file("axolotl.yaml").text)
    assert ax["lora_alpha"] == 7
    # torchtune builds the adapters in the model's dtype: the plan pins it
    tt_plan = plan_of("lora-8bit-ckpt", adapter_dtype="bf16")
    _recipe, _config, o, _ = torchtune_run(tt_plan, EmitOptions(lora_alpha=7))
    assert o["model.lora_alpha"] == "7"
    with pytest.raises(FitplanError, match="--lora-alpha must be positive"):
        emit("lora-8bit-ckpt", "hf", lora_alpha=0)


def test_backend_choice(tmp_path: Path) -> None:
    # ZeRO-3 without a master copy: FSDP by default, DeepSpeed on request; ZeRO-1 needs DeepSpeed
    auto = emit("full-z3-offload-all-torch", "hf")
    assert "ds_config.json" not in {f.name for f in auto.files}
    ds = emit("full-z3-offload-all-torch", "hf", backend="deepspeed")
    check_ds(
        plan_of("full-z3-offload-all-torch").config, json.loads(ds.file("ds_config.json").text)
    )
    with pytest.raises(FitplanError, match="cannot express backend=fsdp: ZeRO-1"):
        emit("full-z1-amp", "hf", backend="fsdp")


def test_torchtune_lora_targets() -> None:
    ok = plan_of(
        "lora-8bit-ckpt",
        lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        adapter_dtype="bf16",
    )
    _r, _c, o, _ = torchtune_run(ok, EmitOptions())
    assert o["model.lora_attn_modules"] == "[q_proj,k_proj,v_proj,output_proj]"
    assert o["model.apply_lora_to_mlp"] == "True"
    partial = plan_of("lora-8bit-ckpt", lora_targets="q_proj,gate_proj", adapter_dtype="bf16")
    with pytest.raises(FitplanError, match="cannot express lora_targets=q_proj,gate_proj"):
        torchtune_run(partial, EmitOptions())
    with pytest.raises(FitplanError, match="cannot express model=gpt2"):
        get_emitter("torchtune").emit(
            make_plan(TrainConfig(recipe="bf16-torch"), "gpt2"), EmitOptions()
        )


def test_gpt2_attention_targets_are_unambiguous() -> None:
    plan = make_plan(
        TrainConfig(method="lora", lora_targets="attention", recipe="bf16-torch"), "gpt2"
    )
    emission = get_emitter("hf").emit(plan, EmitOptions())
    assert "'target_modules': ['c_attn', 'attn.c_proj']" in emission.file("train.py").text


def test_encoder_models_are_refused() -> None:
    plan = make_plan(TrainConfig(recipe="bf16-torch"), "t5-small")
    with pytest.raises(FitplanError, match=r"cannot express model=t5-small: .*encoder-decoder"):
        get_emitter("hf").emit(plan, EmitOptions())


# ----------------------------------------------------------------------------------------------
# Writing: all or nothing, never overwrite without --force
# ----------------------------------------------------------------------------------------------


def test_write_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "new" / "deeper"
    real = os.fdopen
    calls = {"n": 0}

    def flaky(fd: int, *a: Any, **k: Any):
        calls["n"] += 1
        if calls["n"] == 2:
            os.close(fd)
            raise OSError(28, "No space left on device")
        return real(fd, *a, **k)

    monkeypatch.setattr(os, "fdopen", flaky)
    with pytest.raises(FitplanError, match=r"cannot write in .*No space left"):
        atomic_write_files(out, [("a.txt", "a", False), ("b.txt", "b", False), ("c.sh", "c", True)])
    assert not (tmp_path / "new").exists()  # the folders it created are gone too


def test_write_rename_failure_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("old a")
    real = os.replace
    calls = {"n": 0}

    def flaky(src: Any, dst: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:  # backup a, replace a, then fail on b
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(FitplanError, match="Input/output error"):
        atomic_write_files(tmp_path, [("a.txt", "new a", False), ("b.txt", "b", False)], force=True)
    monkeypatch.undo()
    assert (tmp_path / "a.txt").read_text() == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_write_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_text("keep")
    with pytest.raises(
        FitplanError, match=r"b.txt exists \(pass --force to overwrite it\)|b.txt exists"
    ):
        atomic_write_files(tmp_path, [("a.txt", "a", False), ("b.txt", "b", False)])
    assert not (tmp_path / "a.txt").exists()
    assert (tmp_path / "b.txt").read_text() == "keep"
    paths = atomic_write_files(tmp_path, [("a.txt", "a", False), ("b.txt", "b", True)], force=True)
    assert [p.read_text() for p in paths] == ["a", "b"]
    assert os.access(paths[1], os.X_OK) and not os.access(paths[0], os.X_OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


# ----------------------------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------------------------


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "searcher.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def plan_json(tmp_path: Path, name: str = "lora-8bit-ckpt") -> Path:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan_of(name).to_json()))
    return p


def test_launch_writes_files_and_prints_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_json(tmp_path)
    out = tmp_path / "run"
    assert main(["launch", str(plan), "--emit", "axolotl", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("axolotl.yaml", "plan.json"):
        assert f"wrote {out / name}" in printed
    assert f"launch: axolotl train {out}/axolotl.yaml" in printed
    # again: refuses to overwrite, then --force
    assert main(["launch", str(plan), "--emit", "axolotl", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["launch", str(plan), "--emit", "axolotl", "--out", str(out), "--force"]) == 0
    # the written plan re-emits in another format
    assert (
        main(["launch", str(out / "plan.json"), "--emit", "hf", "--out", str(tmp_path / "hf")]) == 0
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json at all", "is not a fitplan plan: not JSON"),
        ('{"front": []}', "nothing that fits"),
        ('{"config": {"method": "full"}, "model": "llama-3.1-8b"}', "config lacks micro_batch"),
        ('{"model": "llama-3.1-8b"}', "no 'config' object"),
        ("[1, 2]", "it holds no JSON object"),
        (
            '{"config": {"method": "full", "micro_batch": 0, "grad_accum": 1, "seq_len": 8, "dp": 1},'
            ' "model": "llama-3.1-8b"}',
            "config.micro_batch",
        ),
        (
            '{"config": {"method": "full", "micro_batch": 1, "grad_accum": 1, "seq_len": 8, "dp": 1,'
            ' "colour": 3}, "model": "llama-3.1-8b"}',
            "unknown config key(s) colour",
        ),
        (
            '{"config": {"method": "full", "micro_batch": 1, "grad_accum": 1, "seq_len": 8, "dp": 1},'
            ' "model": "no-such-model"}',
            "not in the catalog",
        ),
    ],
)
def test_launch_bad_plan(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "plan.json"
    p.write_text(content)
    r = run("launch", str(p), "--emit", "hf", "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_launch_refusal_writes_nothing(tmp_path: Path) -> None:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(plan_of("full-tp2").to_json()))
    r = run("launch", str(p), "--emit", "deepspeed", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    # a tensor-parallel plan runs under FSDP2 (torchtune 2-D), which the DeepSpeed format does not write
    assert r.stderr.startswith("fitplan: error: --emit deepspeed cannot express backend=fsdp2")
    assert r.stderr.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_launch_unknown_format_and_unwritable_out(tmp_path: Path) -> None:
    p = plan_json(tmp_path)
    r = run("launch", str(p), "--emit", "megatron", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown launch format 'megatron'" in r.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = run("launch", str(p), "--emit", "hf", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot create folder" in r.stderr and "Traceback" not in r.stderr
    r = run("launch", str(p), "--emit", "hf", "--out", str(blocker))
    assert r.returncode == 2 and "is a file, not a folder" in r.stderr
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        r = run("launch", str(p), "--emit", "hf", "--out", str(locked))
        assert r.returncode == 2 and "cannot write in" in r.stderr


def test_search_emit_top_pick(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "8"]
    args += ["--seq-len", "512", "--method", "lora", "--recipe", "bf16-torch", "--loss", "standard"]
    args += ["--stack", "all"]  # the pick is the front's first member on any machine
    r = run(*args, "--json", "--emit", "hf", "--out", str(out))
    assert r.returncode == 0, r.stderr
    front = json.loads(r.stdout)["front"]  # stdout stays JSON; the paths go to stderr
    assert f"wrote {out / 'train.py'}" in r.stderr and "launch: " in r.stderr
    written = load_plan(str(out / "plan.json"))
    assert written.config.model_dump() == {
        k: v for k, v in front[0]["config"].items() if k not in ("gpus", "rank")
    }
    m = load_script(out / "train.py")
    assert m.MODEL == "Qwen/Qwen2.5-0.5B" and front[0]["config"]["micro_batch"] == m.MICRO_BATCH
    # launch from the whole search output with --pick
    (tmp_path / "front.json").write_text(r.stdout)
    r2 = run(
        "launch",
        str(tmp_path / "front.json"),
        "--pick",
        "2",
        "--emit",
        "accelerate",
        "--out",
        str(tmp_path / "second"),
    )
    assert r2.returncode == 0, r2.stderr
    assert load_plan(str(tmp_path / "second" / "plan.json")).config.model_dump() == {
        k: v for k, v in front[1]["config"].items() if k not in ("gpus", "rank")
    }


def test_search_emit_bad_input(tmp_path: Path) -> None:
    base = ["search", "--model", "qwen2.5-0.5b", "--gpu", "rtx-4090", "--target-batch", "8"]
    r = run(*base, "--emit", "hf")
    assert r.returncode == 2 and "--emit hf needs --out DIR" in r.stderr
    r = run(*base, "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "--out needs --emit" in r.stderr
    # a pick the format cannot express: refused with the members that can be
    r = run(
        *base,
        "--method",
        "full",
        "--recipe",
        "bf16-master",
        "--emit",
        "torchtune",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 2
    # an fp32 master of bf16 weights runs under DeepSpeed, which torchtune does not write
    assert "cannot express backend=deepspeed" in r.stderr
    assert "no front member can be" in r.stderr or "--pick" in r.stderr
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------------------------
# Heavy: the tools themselves
# ----------------------------------------------------------------------------------------------


def need(module: str) -> ModuleType:
    """Import a heavy dependency; skip without it, unless FITPLAN_HEAVY_REQUIRED=1 (.ci/run)."""
    if os.environ.get("FITPLAN_HEAVY_REQUIRED") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.mark.heavy
def test_deepspeed_validates_the_json() -> None:
    need("deepspeed")
    import deepspeed.runtime.config as dsc

    def validate(ds: dict[str, Any], dp: int):
        with (
            mock.patch.object(dsc.dist, "get_rank", lambda *a, **k: 0),
            mock.patch.object(dsc.dist, "get_world_size", lambda *a, **k: dp),
        ):
            return dsc.DeepSpeedConfig(ds)

    configs = ds_configs()
    for name, ds, dp in configs:
        c = validate(ds, dp)
        assert c.world_size == dp, name
        assert (
            c.train_batch_size
            == c.train_micro_batch_size_per_gpu * c.gradient_accumulation_steps * dp
        )
        assert c.zero_optimization_stage == ds["zero_optimization"]["stage"]
    # the validator can fail: a wrong batch, a misspelt ZeRO key
    name, ds, dp = configs[1]
    with pytest.raises(AssertionError, match="train_batch_size"):
        validate(dict(ds, train_batch_size=ds["train_batch_size"] + 1), dp)
    with pytest.raises(Exception, match="offload_optimiser"):
        validate(
            dict(ds, zero_optimization={**ds["zero_optimization"], "offload_optimiser": {}}), dp
        )


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("lora-8bit-ckpt", "hf"),
        ("lora-qv-amp", "hf"),
        ("qlora-nf4dq-paged", "hf"),
        ("lora-int8-fp32-adapters", "hf"),
        ("full-z3-offload-all-torch", "hf"),
        ("full-z2-fsdp-torch-lion", "hf"),
        ("full-z0-ddp-fp32-sgd", "hf"),
        ("full-fused-ce", "hf"),
        ("full-z3-8gpu-master-ckpt", "deepspeed"),
        ("full-z2-offload-optimizer", "deepspeed"),
        ("full-z1-amp", "deepspeed"),
        ("lora-master-z3", "deepspeed"),
        ("full-pure-offload", "deepspeed"),
        ("full-adafactor", "hf"),
    ],
)
def test_training_arguments_lora_and_bnb_configs_construct(
    name: str, fmt: str, tmp_path: Path
) -> None:
    need("torch")
    transformers = need("transformers")
    peft = need("peft")
    if fmt == "deepspeed":
        need("deepspeed")
    plan = plan_of(name)
    folder = write(emit(name, fmt, out=str(tmp_path)), tmp_path)
    m = load_script(folder / "train.py")
    args = m.parse_args(["--output-dir", str(tmp_path / "run")])
    kw = m.training_arguments_kwargs(args)
    with mock.patch.object(
        transformers.TrainingArguments,
        "world_size",
        new_callable=mock.PropertyMock,
        return_value=plan.config.dp,
    ):
        ta = transformers.TrainingArguments(**kw)
        assert ta.per_device_train_batch_size == plan.config.micro_batch
        assert ta.gradient_accumulation_steps == plan.config.grad_accum
        assert ta.optim == optimizer_spec(plan.config.optimizer).hf_name
        if m.DEEPSPEED:
            # transformers' own check that the JSON and TrainingArguments agree
            assert ta.hf_deepspeed_config.mismatches == []
            assert ta.hf_deepspeed_config.config["train_batch_size"] == plan.global_batch
    if m.FSDP:
        assert ta.fsdp_config["reshard_after_forward"] == (plan.config.zero == 3)
    lora = m.lora_config_kwargs()
    if lora:
        lc = peft.LoraConfig(**lora)
        assert lc.r == plan.config.lora_rank and lc.lora_alpha == 2 * plan.config.lora_rank
    q = m.bnb_config_kwargs()
    if q:
        bnb = transformers.BitsAndBytesConfig(**q)
        assert bnb.load_in_4bit == (plan.config.quant != "int8")
        if plan.config.quant != "int8":
            assert bnb.bnb_4bit_use_double_quant == (plan.config.quant == "nf4-dq")


@pytest.mark.heavy
@pytest.mark.parametrize(
    "name",
    [
        "full-z3-offload-all-torch",
        "full-z2-fsdp-torch-lion",
        "full-z2-offload-optimizer",
        "lora-master-z3",
        "full-z0-ddp-fp32-sgd",
        "full-1gpu-bf16torch",
        "full-16gpu-2nodes",
    ],
)
def test_accelerate_loads_the_config(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("torch")
    need("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    plan = plan_of(name)
    folder = write(emit(name, "accelerate", out=str(tmp_path)), tmp_path)
    config_file = str(folder / "accelerate_config.yaml")
    loaded = load_config_from_file(config_file)
    assert loaded.num_processes == plan.gpus and loaded.num_machines == plan.nodes
    args = launch_command_parser().parse_args(
        ["--config_file", config_file, str(folder / "train.py")]
    )
    with (
        mock.patch("torch.cuda.device_count", return_value=8),
        mock.patch("torch.cuda.is_available", return_value=True),
    ):
        args, defaults, mp_from_config = _validate_launch_command(args)
    if args.use_fsdp:
        need("accelerate.utils")
        from accelerate.utils import FullyShardedDataParallelPlugin

        with mock.patch.dict(os.environ, prepare_multi_gpu_env(args)):
            fsdp = FullyShardedDataParallelPlugin()
        assert fsdp.fsdp_version == 2
        assert fsdp.reshard_after_forward == (plan.config.zero == 3)
        # FSDP2: CPUOffloadPolicy when offloading, the base OffloadPolicy (no offload) otherwise
        offloads = type(fsdp.cpu_offload).__name__ == "CPUOffloadPolicy"
        assert offloads == (plan.config.offload == "all")
        assert fsdp.activation_checkpointing == (plan.config.checkpointing == "full")
    elif args.use_deepspeed:
        need("deepspeed")
        from accelerate.utils import DeepSpeedPlugin

        fields = list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else [])
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _cmd, env = prepare_deepspeed_cmd_env(args)
        # deepspeed_config_file is relative to the YAML: read from the folder (as train.py
        # resolves it)
        monkeypatch.chdir(folder)
        with mock.patch.dict(os.environ, env):
            ds = DeepSpeedPlugin()  # raises if the YAML sets what the JSON must hold
        assert ds.zero_stage == plan.config.zero
        check_ds(plan.config, ds.deepspeed_config)
    else:
        assert plan.config.zero == 0


TINY_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
LOSS_LINE = re.compile(r"fitplan: step (\d+) loss ([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")


def tiny_plan(tmp_path: Path, fmt: str, **knobs: Any) -> tuple[Emission, Path]:
    model_dir = tmp_path / "tiny-llama"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(TINY_LLAMA))
    cfg = TrainConfig(
        **{
            "method": "lora",
            "lora_rank": 8,
            "lora_dropout": 0.05,
            "optimizer": "adamw",
            "micro_batch": 2,
            "grad_accum": 2,
            "seq_len": 32,
            "attention": "sdpa",
            **knobs,
        }
    )
    plan = make_plan(cfg, str(model_dir / "config.json"))
    out = tmp_path / f"emit-{fmt}"
    emission = get_emitter(fmt).emit(plan, EmitOptions(out=str(out)))
    return emission, write(emission, out)


def losses(stdout: str) -> list[float]:
    return [float(v) for _step, v in LOSS_LINE.findall(stdout)]


@pytest.mark.heavy
@pytest.mark.parametrize(
    "knobs",
    [
        {"recipe": "amp", "checkpointing": "full"},
        {"recipe": "bf16-torch", "checkpointing": "none", "lora_targets": "attention"},
    ],
    ids=["amp-ckpt", "bf16torch-attention"],
)
def test_hf_script_trains_one_step(tmp_path: Path, knobs: dict[str, Any]) -> None:
    need("torch")
    need("transformers")
    need("peft")
    emission, folder = tiny_plan(tmp_path, "hf", **knobs)
    assert emission.command == f"python {folder}/train.py"
    r = subprocess.run(
        [
            sys.executable,
            str(folder / "train.py"),
            "--random-init",
            "--synthetic-data",
            "--max-steps",
            "1",
            "--output-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = losses(r.stdout)
    assert len(seen) == 1 and math.isfinite(seen[0]) and 0 < seen[0] < 20, r.stdout[-2000:]
    print(f"hf script, {knobs}: loss after one step {seen[0]:.4f}")


@pytest.mark.heavy
def test_torchrun_command_trains_on_two_processes(tmp_path: Path) -> None:
    need("torch")
    need("transformers")
    need("peft")
    if shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists():
        pytest.fail("torchrun is not on PATH")
    emission, folder = tiny_plan(tmp_path, "torchrun", recipe="fp32", dp=2, grad_accum=1)
    assert emission.command == f"bash {folder}/launch_torchrun.sh"
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": "",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    r = subprocess.run(
        [
            "bash",
            str(folder / "launch_torchrun.sh"),
            "--random-init",
            "--synthetic-data",
            "--max-steps",
            "1",
            "--output-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = losses(r.stdout)
    assert len(seen) == 1 and math.isfinite(seen[0]), r.stdout[-2000:]
    print(f"torchrun, 2 processes: loss after one step {seen[0]:.4f}")


@pytest.mark.heavy
def test_hf_script_refuses_the_wrong_world_size(tmp_path: Path) -> None:
    need("torch")
    _emission, folder = tiny_plan(tmp_path, "hf", recipe="fp32", dp=2)
    r = subprocess.run(
        [
            sys.executable,
            str(folder / "train.py"),
            "--random-init",
            "--synthetic-data",
            "--max-steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    assert "this plan runs on 2 process(es)" in r.stderr and "torchrun" in r.stderr


def test_a_users_config_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model_dir = tmp_path / "gpt2"  # a folder named like a catalog model: the plan's path wins
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(TINY_LLAMA))
    monkeypatch.chdir(tmp_path)
    plan = make_plan(TrainConfig(method="lora", recipe="bf16-torch"), "gpt2/config.json")
    assert plan.model_ref == str(model_dir) and plan.model.family == "llama"
    folder = write(get_emitter("hf").emit(plan, EmitOptions(out="run")), tmp_path / "run")
    loaded = load_script(folder / "train.py").MODEL
    assert loaded == str(model_dir)
    monkeypatch.chdir(folder)
    back = load_plan("plan.json")
    assert back.model.family == "llama" and back.model_ref == str(model_dir)
    assert back.config == plan.config


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_read_for_an_older_transformers_loss_is_refused(fmt: str) -> None:
    """The files pin transformers 5.x (versions.json), whose loss pads the labels: a plan made
    with ``--transformers 4.46.3`` holds 2 B per vocabulary entry more than the run would."""
    plan = plan_of("full-1gpu-bf16torch", loss_chain="shifted-upcast")
    with pytest.raises(FitplanError) as err:
        get_emitter(fmt).emit(plan, EmitOptions(out="out"))
    assert str(err.value).startswith(f"--emit {fmt} cannot express loss_chain=shifted-upcast")
