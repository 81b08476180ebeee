"""Released example configs of axolotl v0.18.0, LLaMA-Factory v0.9.5, torchtune v0.6.1 and
accelerate v1.14.0 (copied verbatim into tests/data/check, sources in each header and
SOURCES.md): the knobs ``fitplan check`` reads from them, and the files it must refuse.

Each expected value is read off the file by hand (the comment quotes the key) and, where the key
is absent, is the framework's own default, quoted from its source at that release — never from
the code under test."""

from __future__ import annotations

from pathlib import Path

import pytest

from searcher.check.load import read_configs, train_config
from searcher.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "check"


def knobs(*names: str, gpus: int | None = None):
    r = read_configs([str(DATA / n) for n in names])
    return r, train_config(r, {}, gpus)


def status(r, key: str) -> str:
    return next(u.status for u in r.uses if u.key == key)


def test_axolotl_attn_implementation():
    # attn_implementation: flash_attention_2 (axolotl's canonical key; the boolean flags are
    # deprecated aliases); adapter lora, lora_r 16, micro 2 × accumulation 2, sequence_len 2048
    r, c = knobs("axolotl-lora-1b.yml")
    assert c.attention == "flash"
    assert (c.method, c.lora_rank, c.micro_batch, c.grad_accum, c.seq_len) == (
        "lora",
        16,
        2,
        2,
        2048,
    )
    assert status(r, "attn_implementation") == "read"


def test_axolotl_qlora_fsdp_real_file():
    # fsdp: [full_shard, auto_wrap]; fsdp_sharding_strategy FULL_SHARD, fsdp_offload_params true;
    # adapter qlora + load_in_4bit with no bnb_config_kwargs: axolotl's BitsAndBytesConfig
    # double-quantises (v0.18.0 src/axolotl/loaders/model.py); bf16: auto on a bf16 GPU
    _r, c = knobs("axolotl-qlora-fsdp-70b.yaml")
    assert (c.zero, c.offload) == (3, "all")
    assert (c.method, c.quant, c.lora_rank, c.seq_len) == ("qlora", "nf4-dq", 8, 512)
    assert (c.attention, c.recipe) == ("flash", "bf16-torch")


def test_axolotl_no_bf16_key_is_auto():
    # no bf16 key: axolotl's schema default is "auto" (schemas/config.py), resolve_dtype turns it
    # into bf16 on a bf16-capable GPU; fp8: true and the Liger kernels are not modelled, and say so
    r, c = knobs("axolotl-fp8-fsdp2-3b.yaml")
    assert c.recipe == "bf16-torch"
    assert (c.micro_batch, c.seq_len, c.zero) == (16, 512, 3)  # reshard_after_forward: true
    assert c.attention == "sdpa"  # attn_implementation: flex_attention
    for key in ("fp8", "liger_rms_norm", "liger_glu_activation", "torch_compile"):
        assert status(r, key) == "unmapped", key


def test_axolotl_batch_size_and_int8_lora():
    # batch_size 2, micro_batch_size 1, no gradient_accumulation_steps: axolotl v0.18.0's schema
    # fills gradient_accumulation_steps with its default 1 (schemas/training.py) before
    # normalize_config's "gradient_accumulation_steps or batch_size // micro_batch_size", so the
    # accumulation is 1 — and batch_size is accounted for, not an unknown key;
    # load_in_8bit + adapter lora; attn_implementation: xformers (no score matrix)
    r, c = knobs("axolotl-falcon-7b-lora.yml")
    assert (c.micro_batch, c.grad_accum) == (1, 1)
    assert "gradient_accumulation_steps" in next(u.why for u in r.uses if u.key == "batch_size")
    assert (c.method, c.quant, c.attention) == ("qlora", "int8", "sdpa")


def test_llamafactory_full_tuning_upcasts_to_fp32():
    # finetuning_type full, bf16: true, no DeepSpeed, no pure_bf16: LLaMA-Factory v0.9.5
    # model/adapter.py casts every trainable parameter to fp32 → fp32 weights, bf16 autocast
    _r, c = knobs("llamafactory-full-sft.yaml")
    assert (c.method, c.recipe) == ("full", "amp")
    assert (c.micro_batch, c.grad_accum, c.seq_len) == (1, 8, 2048)


def test_llamafactory_dpo_stage_is_reported():
    # stage: dpo — a reference model and chosen+rejected pairs that fitplan does not count
    r, c = knobs("llamafactory-lora-dpo.yaml")
    assert status(r, "stage") == "unmapped"
    assert (c.method, c.lora_rank, c.lora_targets) == ("lora", 8, "all-linear")


def test_trl_dpo_keys_are_reported():
    # alignment-handbook gemma-7b dpo/config_qlora.yaml: beta and max_prompt_length are DPOConfig
    # fields (TRL trainer/dpo_config.py), not TrainingArguments ones
    r, _c = knobs("hf-trainer-qlora.yaml")
    assert status(r, "beta") == "unmapped"
    assert status(r, "max_prompt_length") == "unmapped"


def test_llamafactory_v1_config():
    # examples/v1: model Qwen/Qwen3-4B; peft_config name lora, r 16, lora_dropout 0.05,
    # target_modules all; dist_config fsdp2; micro_batch_size 1, cutoff_len 2048; bf16 default
    # True and checkpointing default True (v1/config/training_args.py)
    r, c = knobs("llamafactory-v1-lora-sft.yaml")
    assert r.format == "llamafactory-v1" and r.model == "Qwen/Qwen3-4B"
    assert (c.method, c.lora_rank, c.lora_dropout, c.lora_targets) == (
        "lora",
        16,
        0.05,
        "all-linear",
    )
    assert (c.zero, c.micro_batch, c.seq_len, c.checkpointing) == (3, 1, 2048, "full")
    assert c.recipe == "bf16-torch"


def test_torchtune_quantize_base_is_qlora():
    # lora_llama3_8b with quantize_base: True (what every qlora_* builder passes) and use_dora
    r, c = knobs("torchtune-8B-qdora-single-device.yaml")
    assert (c.method, c.quant, c.lora_rank) == ("qlora", "nf4-dq", 8)
    assert status(r, "model.use_dora") == "unmapped"


def test_accelerate_deepspeed_json_is_read():
    # distributed_type DEEPSPEED, deepspeed_config_file → zero_stage1_config.json: stage 1,
    # fp16 enabled; num_processes 2
    r, c = knobs("accelerate-deepspeed.yaml", gpus=None)
    assert (c.zero, c.compute_dtype, c.dp) == (1, "fp16", 2)
    assert r.fields["recipe"] == "bf16-master"  # DeepSpeed fp16: 16-bit weights, fp32 master


@pytest.mark.parametrize(
    "name,says",
    [
        ("torchtune-evaluation.yaml", "torchtune evaluation config"),
        ("torchtune-7B-full-ppo.yaml", "torchtune PPO config"),
        ("llamafactory-inference.yaml", "inference or export config"),
    ],
)
def test_non_training_configs_refused_in_one_line(capsys, name, says):
    code = main(["check", str(DATA / name), "--model", "llama-3.2-1b", "--gpu", "rtx-4090"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_torchtune_builder_is_named(capsys, tmp_path):
    src = (DATA / "torchtune-1B-lora-single-device.yaml").read_text()
    f = tmp_path / "tt.yaml"
    f.write_text(src.replace("lora_llama3_2_1b", "lora_phi3_mini"))
    code = main(["check", str(f), "--gpu", "rtx-4090"])
    err = capsys.readouterr().err
    assert code == 2 and "torchtune.models.llama3_2.lora_phi3_mini" in err
    assert err.count("\n") == 1


def test_axolotl_regex_target_modules():
    # lora_target_modules is one string: PEFT treats it as a regex, fully matched against module
    # names ('model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj');
    # it selects the seven projections of the language model's layers
    _r, c = knobs("axolotl-vision-lora-11b.yaml")
    assert set(c.lora_targets.split(",")) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }


def test_regex_target_modules_check_against_a_catalog_model(capsys):
    # before, the regex reached the model as one module name and was refused ("match no module")
    code = main(
        [
            "check",
            str(DATA / "axolotl-vision-lora-11b.yaml"),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
        ]
    )
    assert code in (0, 1), capsys.readouterr().err


def test_llamafactory_pure_bf16_without_bf16_key():
    # pure_bf16: true and no bf16 key: parser.py sets compute_dtype bf16 for pure_bf16 and
    # model/adapter.py keeps the trainable parameters in it (no fp32 upcast) → a bf16 model with
    # torch AdamW; use_galore: true is not modelled and says so
    r, c = knobs("llamafactory-galore-pure-bf16.yaml")
    assert (c.method, c.recipe) == ("full", "bf16-torch")
    assert status(r, "use_galore") == "unmapped"


def test_torchtune_paged_adamw_32bit():
    # optimizer bitsandbytes.optim.PagedAdamW (32-bit states, paged): modelled as AdamW and read
    r, c = knobs("torchtune-qwen2_5-1.5B-full-single-device.yaml")
    assert c.optimizer == "adamw" and c.method == "full"
    assert status(r, "optimizer._component_") == "read"


def test_deepspeed_autotuning_arg_mappings_are_not_counts(capsys):
    # "autotuning": {"arg_mappings": {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size"}}
    # maps a key to the script's flag (deepspeed/autotuning/config.py): not a micro-batch value
    code = main(
        ["check", str(DATA / "ds_config_tune.json"), "--model", "gpt2", "--gpu", "rtx-4090"]
    )
    assert code in (0, 1), capsys.readouterr().err


def test_deepspeed_json_alone_is_read_and_edited_in_its_own_keys():
    # zero_optimization.stage 2, bf16/fp16 enabled "auto", tensor_parallel.autotp_size 2
    r, c = knobs("ds_z2_autotp_config.json")
    assert c.zero == 2 and c.recipe == "bf16-master"
    assert status(r, "tensor_parallel.autotp_size") == "unmapped"
    # a change of method lives in the training config, not in the DeepSpeed JSON
    assert r.writer is not None
    assert r.writer(r, c, c.model_copy(update={"method": "lora"})) is None
    edits = r.writer(r, c, c.model_copy(update={"zero": 3}))
    assert [(e.key, e.value) for e in edits] == [("zero_optimization.stage", 3)]


def test_accelerate_distributed_no_is_one_process():
    # distributed_type "NO" with num_processes 8: accelerate v1.14.0 launch_command picks
    # simple_launcher (one process) for it; the TRL file still pairs with a training config
    r, c = knobs("accelerate-trl-single-gpu.yaml", "axolotl-lora-1b.yml")
    assert c.dp == 1 and r.gpus == 1


def test_torchtune_llama3_3_builder_reads_as_llama3_1_70b():
    # lora_llama3_3_70b: torchtune v0.6.1 models/llama3_3/_model_builders.py defines it as
    # lora_llama3_1_70b; lora_rank 16, batch_size 2, tokenizer.max_seq_len null
    r, c = knobs("torchtune-llama3_3-70B-lora.yaml")
    assert r.model == "llama-3.1-70b"
    assert (c.method, c.lora_rank, c.micro_batch) == ("lora", 16, 2)


def test_accelerate_inline_deepspeed_uses_deepspeed_precision():
    # the alignment-handbook's full SFT (torch_dtype bfloat16, bf16: true, batch 16) launched
    # with its deepspeed_zero3.yaml (zero_stage 3, mixed_precision bf16, 8 processes): DeepSpeed's
    # bf16 engine keeps an fp32 master of the 16-bit weights, whatever dtype the script loaded
    _r, c = knobs("hf-trainer-zephyr-sft-full.yaml", "accelerate-ah-deepspeed-zero3.yaml")
    assert (c.zero, c.dp, c.recipe, c.micro_batch) == (3, 8, "bf16-master", 16)


def test_hub_model_named_by_the_file_not_cached_is_one_line(capsys, monkeypatch, tmp_path):
    # base_model NousResearch/Llama-3.2-1B is not in the catalog; offline with an empty cache the
    # refusal names the file's key (the user gave no --model) in one line
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    code = main(["check", str(DATA / "axolotl-lora-1b.yml"), "--gpu", "rtx-4090"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "axolotl-lora-1b.yml: base_model names NousResearch/Llama-3.2-1B" in err


def test_llamafactory_v1_qlora():
    # quant_config name bnb, quantization_bit 4, no double_quantization key: v1's bnb plugin
    # (plugins/model_plugins/quantization.py) double-quantises unless told otherwise; peft r 16
    _r, c = knobs("llamafactory-v1-qlora.yaml")
    assert (c.method, c.quant, c.lora_rank) == ("qlora", "nf4-dq", 16)


def test_axolotl_load_in_4bit_without_qlora_is_said(tmp_path):
    # axolotl v0.18.0 loaders/model.py: the 4-bit BitsAndBytesConfig is built only for
    # adapter: qlora; with adapter: lora the flag does not quantise, and check says so
    src = (DATA / "axolotl-lora-1b.yml").read_text()
    f = tmp_path / "a.yml"
    f.write_text(src.replace("adapter: lora", "adapter: lora\nload_in_4bit: true", 1))
    r = read_configs([str(f)])
    assert status(r, "load_in_4bit") == "unmapped"
