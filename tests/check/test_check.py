"""fitplan check: real config files of each format, the OOM message, diffs that apply and fit,
and the round trip through fitplan's own emitted files.

Expected knob values are read off the files by hand (the comments say which key), not from the
code under test."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from constraints.config import TrainConfig
from searcher.check.load import read_configs, train_config
from searcher.check.oom import parse_oom
from searcher.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "check"
GiB = 2**30


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["check", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


# ---- the OOM message ----------------------------------------------------------------------


def test_oom_message_torch2():
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 23.64 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process "
        "has 22.43 GiB memory in use. Of the allocated memory 20.10 GiB is allocated by PyTorch, and "
        "1.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
        "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
    m = parse_oom(text)
    assert m.requested == 2 * GiB
    assert m.capacity == round(23.64 * GiB)
    assert m.free == round(1.2 * GiB)
    assert m.allocated == round(20.1 * GiB)
    assert m.reserved_unallocated == round(1.5 * GiB)
    assert not m.fragmentation  # 1.5 GiB reserved-free could not have held the 2 GiB asked
    frag = parse_oom(text.replace("1.50 GiB is reserved", "3.24 GiB is reserved"))
    assert frag.fragmentation  # 3.24 GiB reserved-unallocated would have held the 2 GiB request


def test_oom_message_old_torch():
    text = (
        "RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total "
        "capacity; 130.35 MiB already allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)"
    )
    m = parse_oom(text)
    assert m.requested == 36 * 2**20
    assert m.capacity == round(7.93 * GiB)
    assert m.reserved_unallocated == round(188.0 * 2**20) - round(130.35 * 2**20)


def test_oom_without_numbers_is_one_line(capsys):
    code = main(["check", str(DATA / "axolotl-qlora-1b.yml"), "--oom", "it crashed"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Tried to allocate" in err


# ---- each format from a real file ---------------------------------------------------------


def test_axolotl_qlora_real_file(capsys):
    code, out = run_json(
        capsys, str(DATA / "axolotl-qlora-1b.yml"), "--model", "llama-3.2-1b", "--gpu", "rtx-4090"
    )
    c = out["config"]
    assert out["format"] == "axolotl"
    # adapter: qlora, load_in_4bit: true, no bnb_config_kwargs: axolotl's own BitsAndBytesConfig
    # sets bnb_4bit_use_double_quant True (v0.18.0 src/axolotl/loaders/model.py); lora_r 32;
    # lora_dropout 0.05
    assert (c["method"], c["quant"], c["lora_rank"], c["lora_dropout"]) == (
        "qlora",
        "nf4-dq",
        32,
        0.05,
    )
    # micro_batch_size 2, gradient_accumulation_steps 4, sequence_len 2048
    assert (c["micro_batch"], c["grad_accum"], c["seq_len"]) == (2, 4, 2048)
    # optimizer adamw_bnb_8bit, gradient_checkpointing true, flash_attention true
    assert (c["optimizer"], c["checkpointing"], c["attention"]) == ("adamw-8bit", "full", "flash")
    keys = {u["key"]: u for u in out["keys"]}
    assert keys["learning_rate"]["status"] == "ignored"
    assert keys["lora_r"]["status"] == "read"
    assert code == 0 and out["fits"]


def test_torchtune_real_file(capsys):
    _code, out = run_json(
        capsys,
        str(DATA / "torchtune-1B-lora-single-device.yaml"),
        "--gpu",
        "rtx-4090",
        "--seq-len",
        "2048",
    )
    c = out["config"]
    assert out["format"] == "torchtune" and out["model"]["id"] == "llama-3.2-1b"  # lora_llama3_2_1b
    # lora_attn_modules q, v, output; apply_lora_to_mlp; lora_rank 64; batch_size 4; accumulation 4
    assert c["lora_targets"] == "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    assert (c["lora_rank"], c["micro_batch"], c["grad_accum"]) == (64, 4, 4)
    assert (c["loss"], c["recipe"], c["checkpointing"]) == ("chunked", "bf16-torch", "none")
    unmapped = [u["key"] for u in out["keys"] if u["status"] == "unmapped"]
    assert "tokenizer.max_seq_len" in unmapped  # null: no limit, so --seq-len is needed


def test_llamafactory_with_deepspeed_real_files(capsys):
    _code, out = run_json(
        capsys,
        str(DATA / "llamafactory-lora-sft-ds3.yaml"),
        str(DATA / "ds_z3_config.json"),
        "--model",
        "llama-3-8b",
        "--gpu",
        "rtx-4090",
        "--gpus",
        "2",
    )
    c = out["config"]
    # finetuning_type lora, lora_rank 8, lora_target all; cutoff_len 2048; batch 1 × accumulation 2
    assert (c["method"], c["lora_rank"], c["lora_targets"]) == ("lora", 8, "all-linear")
    assert (c["seq_len"], c["micro_batch"], c["grad_accum"]) == (2048, 1, 2)
    # DeepSpeed stage 3, bf16 "auto" with bf16: true → DeepSpeed bf16 (fp32 master); LLaMA-Factory
    # checkpoints by default
    assert (c["zero"], c["recipe"], c["checkpointing"], c["dp"]) == (3, "bf16-master", "full", 2)
    unmapped = {u["key"] for u in out["keys"] if u["status"] == "unmapped"}
    assert "zero_optimization.stage3_max_live_parameters" in unmapped


def test_trainer_args_with_peft_and_deepspeed_real_files(capsys):
    _code, out = run_json(
        capsys,
        str(DATA / "hf-trainer-qlora.yaml"),
        str(DATA / "ds_config_zero3_bf16.json"),
        "--model",
        "mistral-7b-v0.1",
        "--gpu",
        "a100-80gb",
        "--gpus",
        "4",
    )
    c = out["config"]
    # use_peft + load_in_4bit; lora_r 128; per_device_train_batch_size 4; max_length 1024
    assert (c["method"], c["lora_rank"], c["micro_batch"], c["seq_len"]) == ("qlora", 128, 4, 1024)
    # zero_optimization.stage 3 with offload_param cpu → everything offloaded
    assert (c["zero"], c["offload"]) == (3, "all")


def test_peft_adapter_config_real_file(capsys):
    _code, out = run_json(
        capsys, str(DATA / "adapter_config.json"), "--model", "llama-3.2-1b", "--gpu", "rtx-4090"
    )
    c = out["config"]
    # r 16, lora_dropout 0.05, the seven projections
    assert (c["method"], c["lora_rank"], c["lora_dropout"]) == ("lora", 16, 0.05)
    assert set(c["lora_targets"].split(",")) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }


def test_accelerate_fsdp_real_file(capsys):
    _code, out = run_json(
        capsys,
        str(DATA / "accelerate-fsdp.yaml"),
        str(DATA / "axolotl-qlora-1b.yml"),
        "--model",
        "llama-3.2-1b",
        "--gpu",
        "rtx-4090",
    )
    c = out["config"]
    # num_processes 2, FULL_SHARD, no offload
    assert (c["dp"], c["zero"], c["offload"]) == (2, 3, "none")


# ---- suggestions: the diffs apply and the result fits --------------------------------------


@pytest.mark.parametrize(
    "files,argv",
    [
        (["axolotl-fft-8b.yaml"], ["--model", "llama-3.1-8b", "--gpu", "rtx-4090"]),
        (["torchtune-1B-lora-single-device.yaml"], ["--gpu", "8GiB", "--seq-len", "4096"]),
        (
            ["llamafactory-lora-sft-ds3.yaml", "ds_z3_config.json"],
            ["--model", "llama-3-8b", "--gpu", "12GiB", "--gpus", "2"],
        ),
    ],
)
def test_suggested_diffs_apply_and_fit(tmp_path, capsys, monkeypatch, files, argv):
    for f in files:
        shutil.copy(DATA / f, tmp_path / f)
    monkeypatch.chdir(tmp_path)  # the diffs name the files as given, relative to here
    code, out = run_json(capsys, *files, *argv)
    assert code == 1 and not out["fits"]
    assert out["suggestions"], "a config that does not fit gets at least one suggestion"
    for i, s in enumerate(out["suggestions"][:3]):
        work = tmp_path / f"s{i}"
        work.mkdir()
        for f in files:
            shutil.copy(tmp_path / f, work / f)
        subprocess.run(["patch", "-p0", "-s"], input=s["diff"], text=True, cwd=work, check=True)
        again, out2 = run_json(capsys, *[str(work / f) for f in files], *argv)
        assert again == 0 and out2["fits"], s["changes"]
        assert out2["config"] == s["config"]


def test_oom_names_the_gpu_and_suggests(capsys):
    msg = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of "
        "which 1.20 GiB is free. Of the allocated memory 20.10 GiB is allocated by PyTorch, and 3.50 "
        "GiB is reserved by PyTorch but unallocated."
    )
    _code, out = run_json(
        capsys, str(DATA / "axolotl-fft-8b.yaml"), "--model", "llama-3.1-8b", "--oom", msg
    )
    # 23.64 GiB is what CUDA reports of any 24 GB card (RTX 3090, 4090, A5000): memory is
    # checked at exactly that size, and the note asks which card it was
    assert out["explain"]["gpu"]["capacity_bytes"] == round(23.64 * GiB)
    assert any("could be any of" in n and "--gpu" in n for n in out["notes"])
    assert out["oom"]["fragmentation"]
    assert out["suggestions"]
    _code, named = run_json(
        capsys,
        str(DATA / "axolotl-fft-8b.yaml"),
        "--model",
        "llama-3.1-8b",
        "--oom",
        msg,
        "--gpu",
        "rtx-4090",
    )
    assert named["explain"]["gpu"]["id"] == "rtx-4090"


# ---- round trip: what fitplan emits, read back --------------------------------------------

ROUND_TRIP = [
    TrainConfig(
        method="lora",
        lora_rank=32,
        recipe="bf16-torch",
        micro_batch=2,
        grad_accum=8,
        checkpointing="full",
    ),
    TrainConfig(
        method="qlora",
        quant="nf4-dq",
        lora_rank=16,
        recipe="bf16-torch",
        optimizer="adamw-8bit",
        loss="fused",
    ),
    TrainConfig(
        method="full",
        recipe="bf16-master",
        zero=2,
        dp=4,
        micro_batch=1,
        grad_accum=4,
        attention="flash",
    ),
    TrainConfig(
        method="lora", lora_rank=8, recipe="bf16-master", zero=2, offload="optimizer", dp=2
    ),
    TrainConfig(method="full", recipe="amp", optimizer="sgd-momentum", micro_batch=4),
    TrainConfig(method="lora", lora_rank=8, adapter_dtype="fp32", recipe="bf16-torch"),
    TrainConfig(
        method="qlora",
        quant="nf4",
        recipe="bf16-torch",
        lora_targets="q_proj,v_proj",
        lora_dropout=0.05,
    ),
    TrainConfig(
        method="full",
        recipe="bf16-master",
        zero=3,
        offload="all",
        dp=2,
        loss="chunked",
        checkpointing="full",
    ),
    # FSDP with accumulation: the emitted sync_each_batch reads back as the plan's grad_sync
    *(
        TrainConfig(method="full", recipe="bf16-torch", zero=3, dp=2, grad_accum=4, grad_sync=sync)
        for sync in ("each-micro-batch", "last-micro-batch")
    ),
]


@pytest.mark.parametrize("cfg", ROUND_TRIP)
@pytest.mark.parametrize("fmt", ["axolotl", "hf", "deepspeed", "accelerate", "torchrun", "plan"])
def test_emit_then_check_round_trip(tmp_path, cfg, fmt):
    from constraints.errors import FitplanError
    from searcher.emitters import get_emitter
    from searcher.emitters.base import EmitOptions
    from searcher.emitters.plan import make_plan

    plan = make_plan(cfg, "llama-3.2-1b", gpu="a100-80gb")
    try:
        emission = get_emitter("axolotl" if fmt == "plan" else fmt).emit(
            plan, EmitOptions(out=str(tmp_path))
        )
    except FitplanError as err:  # the format cannot express this plan (a refusal names the knob)
        pytest.skip(str(err))
    for f in emission.files:
        (tmp_path / f.name).write_text(f.text)
    # the format's own files only: plan.json is read only when it is named alone
    files = [str(tmp_path / "plan.json")] if fmt == "plan" else [str(tmp_path)]
    r = read_configs(files)
    assert r.format == {"plan": "fitplan", "axolotl": "axolotl"}.get(fmt, "fitplan-script")
    back = train_config(r, {}, cfg.gpus)
    # a pin equal to the stack's default reads back as the default: the same modelled plan
    assert back.as_planned() == cfg.as_planned()


# LoRA as torchtune builds it: adapters in the model's dtype (what search --emit torchtune pins)
TORCHTUNE_ROUND_TRIP = [
    TrainConfig(
        method="lora",
        lora_rank=8,
        recipe="bf16-torch",
        adapter_dtype="bf16",
        checkpointing="full",
        loss="chunked",
    ),
    TrainConfig(
        method="qlora",
        quant="nf4-dq",
        lora_rank=16,
        recipe="bf16-torch",
        adapter_dtype="bf16",
        loss="chunked",
    ),
    TrainConfig(method="full", recipe="bf16-torch", zero=3, dp=4, checkpointing="full"),
    TrainConfig(method="full", recipe="bf16-torch", optimizer_in_backward=True),
]


@pytest.mark.parametrize("cfg", TORCHTUNE_ROUND_TRIP)
def test_emit_torchtune_then_check_round_trip(tmp_path, cfg):
    from searcher.emitters import get_emitter
    from searcher.emitters.base import EmitOptions
    from searcher.emitters.plan import make_plan

    emission = get_emitter("torchtune").emit(
        make_plan(cfg, "llama-3.2-1b", gpu="a100-80gb"), EmitOptions(out=str(tmp_path))
    )
    for f in emission.files:
        (tmp_path / f.name).write_text(f.text)
    r = read_configs([str(tmp_path)])
    assert r.format == "torchtune-command"
    assert train_config(r, {}, cfg.gpus) == cfg


@pytest.mark.parametrize("fmt", ["hf", "deepspeed", "torchtune", "axolotl"])
def test_suggested_edits_to_emitted_files_apply_and_fit(tmp_path, capsys, monkeypatch, fmt):
    """A plan that fits an H100 does not fit a 16 GiB card: the edits to its emitted files do."""
    from searcher.emitters import get_emitter
    from searcher.emitters.base import EmitOptions
    from searcher.emitters.plan import make_plan

    cfg = TrainConfig(
        method="full", recipe="bf16-torch", micro_batch=8, grad_accum=2, zero=2, dp=2, seq_len=2048
    )
    if fmt == "deepspeed":
        cfg = cfg.model_copy(update={"recipe": "bf16-master"})
    out = tmp_path / "run"
    out.mkdir()
    emission = get_emitter(fmt).emit(
        make_plan(cfg, "llama-3.2-1b", gpu="h100-sxm"), EmitOptions(out=str(out))
    )
    for f in emission.files:
        if f.name != "plan.json":
            (out / f.name).write_text(f.text)
    monkeypatch.chdir(tmp_path)
    # the plan's two GPUs (an axolotl file does not say how many GPUs it is launched on)
    code, first = run_json(capsys, "run", "--gpu", "16GiB", "--gpus", "2")
    assert code == 1 and first["suggestions"], first["notes"]
    s = first["suggestions"][0]
    subprocess.run(["patch", "-p0", "-s"], input=s["diff"], text=True, cwd=tmp_path, check=True)
    again, second = run_json(capsys, "run", "--gpu", "16GiB", "--gpus", "2")
    assert again == 0 and second["config"] == s["config"]


def test_an_oom_fitplan_under_predicts_keeps_the_difference_free(capsys):
    """The QLoRA example fits by the model (≈ 8.9 GiB); an OOM at 23 GiB says the run needs more:
    every suggestion then fits with that difference kept free."""
    msg = (
        "CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 23.64 GiB of "
        "which 0.50 GiB is free. Of the allocated memory 19.00 GiB is allocated by PyTorch, and 1.00 "
        "GiB is reserved by PyTorch but unallocated."
    )
    code, out = run_json(
        capsys, str(DATA / "axolotl-qlora-1b.yml"), "--model", "llama-3.2-1b", "--oom", msg
    )
    reserve = round(19.0 * GiB) + round(1.0 * GiB) + 3 * GiB - out["explain"]["needed_bytes"]
    assert code == 0  # the model says it fits; the message says the run did not
    assert reserve > 0 and out["suggestions"]
    for s in out["suggestions"]:
        assert s["needed_bytes"] + reserve <= s["usable_bytes"]


def test_trainer_defaults_fill_what_the_file_leaves_out(tmp_path, capsys):
    """TRL's own example config (huggingface/trl examples/cli_configs/example_config.yaml) names
    only the model, data and schedule: the Trainer's defaults fill the rest."""
    cfg = tmp_path / "example_config.yaml"
    cfg.write_text(
        "model_name_or_path:\n  Qwen/Qwen2.5-0.5B\ndataset_name:\n  stanfordnlp/imdb\nreport_to:\n  none\n"
        "learning_rate:\n  0.0001\nlr_scheduler_type:\n  cosine\n"
    )
    _code, out = run_json(capsys, str(cfg), "--gpu", "rtx-4090", "--seq-len", "1024")
    c = out["config"]
    assert out["format"] == "hf-trainer" and out["model"]["id"] == "qwen2.5-0.5b"
    # TrainingArguments: per_device_train_batch_size=8, gradient_accumulation_steps=1, no
    # checkpointing, AdamW; no bf16 flag: fp32
    assert (c["micro_batch"], c["grad_accum"], c["checkpointing"], c["optimizer"]) == (
        8,
        1,
        "none",
        "adamw",
    )
    assert c["recipe"] == "fp32"


def test_torchtune_custom_sharded_layers(capsys):
    """recipes/configs/llama3_1/70B_full.yaml at pytorch/torchtune 30b8519e8 (copied as is):
    ``custom_sharded_layers: ['tok_embeddings', 'output']`` and ``fsdp_cpu_offload: True``."""
    _code, out = run_json(
        capsys,
        str(DATA / "torchtune-70B-full.yaml"),
        "--gpu",
        "a100-80gb",
        "--gpus",
        "8",
        "--seq-len",
        "2048",
    )
    c = out["config"]
    assert out["model"]["id"] == "llama-3.1-70b"  # llama3_1_70b
    assert c["fsdp_embedding_units"] is True and c["offload"] == "all"
    keys = {u["key"]: u["status"] for u in out["keys"]}
    assert keys["custom_sharded_layers"] == "read"
