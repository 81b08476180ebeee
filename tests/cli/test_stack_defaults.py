"""explain's defaults are what the user's stack does, and the screen names them.

With no knob but model, GPU and method, the plan is the HF Trainer + PEFT run a user gets: the
model in its checkpoint's 16-bit dtype (transformers 5 ``from_pretrained(dtype="auto")``), torch
AdamW, PEFT's fp32 adapters, SDPA attention, one GPU without DeepSpeed. Each default is pinned to
the released library where it is installed (heavy tests), and the memory equals the one fitplan
gives when those settings are passed by hand."""

from __future__ import annotations

import json

import pytest

from constraints.gpus import resolve_gpu
from searcher.cli import main
from searcher.search.stack_profile import StackProfile, sdpa_kernel

BASE = ["explain", "--model", "llama-3.2-1b", "--micro-batch", "2", "--seq-len", "1024", "--json"]


def explain_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    main([*BASE, *argv])
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("gpu", "method", "by_hand"),
    [
        # a T4 has no bf16: the model loads in fp16 (what a T4 user passes), fp16 autocast
        ("t4", "lora", ["--recipe", "bf16-torch", "--compute-dtype", "fp16"]),
        ("t4", "qlora", ["--recipe", "bf16-torch", "--compute-dtype", "fp16", "--quant", "nf4"]),
        ("a100-80gb", "lora", ["--recipe", "bf16-torch"]),
        ("a100-80gb", "full", ["--recipe", "bf16-torch"]),
    ],
)
def test_defaults_equal_the_stacks_settings_passed_by_hand(
    capsys: pytest.CaptureFixture[str], gpu: str, method: str, by_hand: list[str]
) -> None:
    default = explain_json(capsys, "--gpu", gpu, "--method", method)
    adapters = ["--adapter-dtype", "fp32"] if method != "full" else []
    hand = explain_json(
        capsys,
        "--gpu",
        gpu,
        "--method",
        method,
        *by_hand,
        *adapters,
        "--attention",
        "sdpa",
        "--backend",
        "single",
    )
    assert default["needed_bytes"] == hand["needed_bytes"]
    assert default["config"]["backend"] == "single"
    assert default["config"]["attention"] == "sdpa"
    assumed = "; ".join(default["assumed"])
    assert "HF Trainer + PEFT" in assumed and "backend single" in assumed
    if method != "full":
        assert "adapters fp32 (PEFT's autocast_adapter_dtype=True)" in assumed
    if method == "qlora":
        assert "prepare_model_for_kbit_training" in assumed


def test_given_knobs_are_not_listed_as_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    out = explain_json(
        capsys,
        "--gpu",
        "a100-80gb",
        "--method",
        "lora",
        "--recipe",
        "bf16-master",
        "--adapter-dtype",
        "bf16",
        "--attention",
        "flash",
        "--loss",
        "standard",
    )
    assumed = "; ".join(out["assumed"])
    assert "adapters" not in assumed and "attention" not in assumed and "loss" not in assumed
    assert "bf16-master" not in assumed  # the recipe was given
    assert out["config"]["backend"] == "deepspeed"  # bf16-master is DeepSpeed's mixed precision


def test_sharding_keeps_the_engines_mixed_precision(capsys: pytest.CaptureFixture[str]) -> None:
    """--zero names a distributed engine: no recipe given means its bf16 + fp32 master."""
    out = explain_json(capsys, "--gpu", "a100-80gb", "--gpus", "2", "--zero", "3")
    assert out["config"]["recipe"] == "bf16-master"


def test_the_text_output_names_the_defaults_once(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "--model", "llama-3.2-1b", "--gpu", "t4", "--method", "lora"])
    out = capsys.readouterr().out
    assert out.count("assumed:") == 1
    paragraph = " ".join(out.split("assumed:", 1)[1].split("Llama-3.2-1B ·", 1)[0].split())
    assert "memory-efficient kernel on T4 (sm 7.5, fp16, head_dim 64)" in paragraph
    assert "adapters fp32" in paragraph and "backend single" in paragraph


@pytest.mark.parametrize(
    ("gpu", "dtype", "head_dim", "kernel"),
    [
        ("t4", "fp16", 64, "memory-efficient"),  # sm75: no flash kernel
        ("v100", "fp16", 128, "memory-efficient"),  # sm70
        ("a100-80gb", "bf16", 128, "flash"),
        ("a100-80gb", "fp32", 128, "memory-efficient"),  # flash takes 16-bit only
        ("h100-sxm", "bf16", 512, "memory-efficient"),  # flash: head_dim <= 256
    ],
)
def test_sdpa_dispatch(gpu: str, dtype: str, head_dim: int, kernel: str) -> None:
    """torch's sdp_utils.cpp: flash needs sm80+, fp16/bf16 and head_dim <= 256."""
    assert sdpa_kernel(resolve_gpu(gpu), dtype, head_dim) == kernel


def test_transformers_4_loads_fp32_and_autocasts() -> None:
    v4 = StackProfile(
        framework="hf", versions={"transformers": "4.46.3", "peft": "0.13.2", "torch": "2.5.1"},
        installed=(),
    )  # fmt: skip
    assert v4.default_recipe() == "amp"
    assert StackProfile.resolve("torchtune").default_recipe() == "bf16-torch"


@pytest.mark.heavy
def test_transformers_loads_the_checkpoint_dtype_and_sdpa(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The installed transformers, as fitplan reads it: a bf16 checkpoint loaded without a dtype
    stays bf16 (5.x: dtype="auto"), and attention is SDPA unless another is asked for."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=128,
    )  # fmt: skip
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    profile = StackProfile.resolve()
    expected = torch.bfloat16 if profile.loads_checkpoint_dtype() else torch.float32
    assert next(model.parameters()).dtype == expected
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "llama-3.1-8b", "--gpu", "rtx-4090"],
        ["--model", "qwen2.5-7b", "--gpu", "t4", "--method", "lora"],
        ["--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--gpus", "4", "--seq-len", "4096"],
    ],
)
def test_levers_on_default_plans_run_as_printed(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A lever that names an engine (--zero, --offload) keeps the recipe the stack filled in:
    its flags, added to the command line, give the total it was costed at."""
    main(["explain", *argv, "--json"])
    base = json.loads(capsys.readouterr().out)
    assert base["levers"]
    for lever in base["levers"]:
        main(["explain", *argv, *lever["flags"].split(), "--json"])
        again = json.loads(capsys.readouterr().out)
        assert again["memory_bytes"]["total"] == lever["total_bytes"], lever["flags"]


def test_search_names_what_its_pick_assumed(capsys: pytest.CaptureFixture[str]) -> None:
    """The search chooses recipe and backend (not assumptions); the stack, the adapters' dtype
    and the attention kernel of the pick are."""
    # --stack all: the pick is the front's first member whatever this machine has installed
    main(["search", "--model", "qwen2.5-0.5b", "--gpu", "t4", "--method", "lora", "--json",
          "--stack", "all"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assumed = "; ".join(out["assumed"])
    assert "HF Trainer + PEFT" in assumed and "backend" not in assumed
    pick = out["front"][0]["config"]
    assert pick["backend"] == "single" or pick["offload"] != "none"  # no engine for nothing
    assert f"adapters {'fp32' if pick['backend'] != 'deepspeed' else 'fp16'}" in assumed


def test_fits_names_the_cpu_ram_it_plans_offload_against(
    capsys: pytest.CaptureFixture[str],
) -> None:
    main(["fits", "--gpu", "rtx-4090", "--models", "gpt2"])
    text = " ".join(capsys.readouterr().out.split())
    assert "assumed: HF Trainer + PEFT" in text
    assert "256 GiB of CPU RAM per node for offload (--cpu-ram to change)" in text
    main(["fits", "--gpu", "rtx-4090", "--models", "gpt2", "--cpu-ram", "64GiB"])
    assert "CPU RAM per node" not in capsys.readouterr().out


def test_check_names_what_the_files_leave_to_the_stack(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    """An emitted single-GPU LoRA script: the files launch it (no backend assumed); the
    adapters are PEFT's default, since the script leaves autocast_adapter_dtype alone."""
    out = tmp_path / "run"
    main(["search", "--model", "qwen2.5-0.5b", "--gpu", "a100-80gb", "--method", "lora",
          "--backend", "single", "--emit", "hf", "--out", str(out)])  # fmt: skip
    capsys.readouterr()
    main(["check", str(out), "--gpu", "a100-80gb", "--json"])
    assumed = "; ".join(json.loads(capsys.readouterr().out)["assumed"])
    assert "HF Trainer + PEFT" in assumed and "backend" not in assumed


def test_a_missing_gpu_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    main(["explain", "--model", "gpt2", "--json"])
    assert "GPU A100 80GB SXM4 (no --gpu given)" in json.loads(capsys.readouterr().out)["assumed"]
    main(["explain", "--model", "gpt2", "--gpu", "a100-80gb", "--json"])
    assumed = "; ".join(json.loads(capsys.readouterr().out)["assumed"])
    assert "no --gpu given" not in assumed


def test_an_ambiguous_oom_capacity_names_the_cards_and_asks_for_gpu() -> None:
    """23.65 GiB is what CUDA reports for an RTX 3090, 4090 or A5000 alike: their speeds differ."""
    from searcher.cli.check import gpu_for_capacity

    card, note = gpu_for_capacity(int(23.65 * 2**30))
    assert card.custom and note is not None
    assert "GeForce RTX 4090" in note and "GeForce RTX 3090" in note and "--gpu" in note
    t4, none = gpu_for_capacity(int(14.58 * 2**30))  # what CUDA reports for a T4's 15,360 MiB
    assert t4.name.startswith("T4") and none is None


def test_method_qlora_searches_every_qlora_base(capsys: pytest.CaptureFixture[str]) -> None:
    """--method qlora alone explores nf4 and nf4-dq as the unpinned search does; --quant pins."""
    from searcher.cli.parser import build_parser
    from searcher.inputs import search_problem
    from searcher.search.space import knob_values

    base = ["search", "--model", "qwen2.5-7b", "--gpu", "rtx-4090", "--method", "qlora"]
    problem = search_problem(build_parser().parse_args(base))
    assert set(knob_values(problem)["quant"]) == {"nf4", "nf4-dq"}
    pinned = search_problem(build_parser().parse_args([*base, "--quant", "nf4"]))
    assert knob_values(pinned)["quant"] == ("nf4",)


def test_the_pick_is_explained_on_the_searched_network(capsys: pytest.CaptureFixture[str]) -> None:
    """One GPU per node: the table's tokens/s and the pick's explanation are the same figure."""
    main(["search", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--gpus", "16",
          "--gpus-per-node", "1", "--method", "full", "--rank-by", "speed", "--stack", "all"])  # fmt: skip
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if "▶" in ln)
    tokens = row.split("│")[-3].strip()
    assert f"{tokens} in all" in out


def test_qlora_takes_the_checkpointing_prepare_model_for_kbit_training_turns_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """PEFT's prepare_model_for_kbit_training(model) enables gradient checkpointing unless told
    otherwise (use_gradient_checkpointing=True): a QLoRA plan that names none has it, and says so;
    one that names it keeps what it names."""
    peft = pytest.importorskip("peft")
    import inspect

    default = inspect.signature(peft.prepare_model_for_kbit_training).parameters
    assert default["use_gradient_checkpointing"].default is True
    argv = ["explain", "--model", "llama-3.2-1b", "--gpu", "t4", "--method", "qlora", "--json"]
    main(argv)
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["checkpointing"] == "full"
    assert any("use_gradient_checkpointing=True" in a for a in out["assumed"])
    main([*argv, "--checkpointing", "none"])
    pinned = json.loads(capsys.readouterr().out)
    assert pinned["config"]["checkpointing"] == "none"
    assert not any("use_gradient_checkpointing" in a for a in pinned["assumed"])
    # LoRA without quantisation is not prepared: the Trainer's default (off) stays
    main(["explain", "--model", "llama-3.2-1b", "--gpu", "t4", "--method", "lora", "--json"])
    assert json.loads(capsys.readouterr().out)["config"]["checkpointing"] == "none"


def test_a_named_transformers_release_takes_its_loss_chain(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """4.46-4.48 hold 16-bit logits + fp32 upcast + shifted fp32 copy + log-softmax at the loss
    forward (14 B per token per vocabulary entry, traced in tests/constraints/test_loss_chain.py)
    where 4.49+ peak at the backward's 12 B: 2 B more per entry, nothing else changes."""
    pins = ["--gpu", "a100-80gb", "--method", "lora", "--recipe", "bf16-torch"]
    new = explain_json(capsys, *pins, "--transformers", "4.49.0")
    old = explain_json(capsys, *pins, "--transformers", "4.46.3")
    entries = 2 * 1024 * 128_256  # micro-batch × sequence × Llama-3.2's vocabulary
    gained = old["memory_bytes"]["logits_and_loss"] - new["memory_bytes"]["logits_and_loss"]
    assert gained == pytest.approx(2 * entries)
    assert old["config"]["loss_chain"] == "shifted-upcast"
    assert any("4.46.3" in line and "shifted" in line for line in old["assumed"])


def test_a_transformers_version_that_is_not_a_release_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--gpu", "t4", "--transformers", "latest"]) == 2
    err = capsys.readouterr().err
    assert "--transformers must be a release" in err and "Traceback" not in err


def test_a_named_bitsandbytes_release_keeps_the_4bit_inputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bitsandbytes 0.42.0 keeps each 4-bit linear's input (a ctx attribute, which checkpointing
    cannot drop): with PEFT's fp32 stream each linear's fp16 cast copy, on a T4 that is every
    layer's q, k, v, o, gate, up (2048 wide) and down (8192 wide) inputs of Llama-3.2-1B."""
    pins = ["--gpu", "t4", "--method", "qlora"]
    new = explain_json(capsys, *pins)
    old = explain_json(capsys, *pins, "--bitsandbytes", "0.42.0")
    tokens = 2 * 1024
    per_layer = (6 * 2048 + 8192) * 2  # fp16 copies, bytes per token
    gained = old["memory_bytes"]["saved_activations"] - new["memory_bytes"]["saved_activations"]
    assert gained == pytest.approx(16 * tokens * per_layer)
    assert old["config"]["kbit_saves_input"] is True
    assert any(
        "bitsandbytes 0.42.0" in line and "keeps its input" in line for line in old["assumed"]
    )


def test_a_bitsandbytes_version_that_is_not_a_release_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*BASE, "--gpu", "t4", "--method", "qlora", "--bitsandbytes", "new"]) == 2
    err = capsys.readouterr().err
    assert "--bitsandbytes must be a release" in err and "Traceback" not in err


def test_launch_files_are_not_written_for_an_old_bitsandbytes(
    capsys: pytest.CaptureFixture[str], tmp_path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    argv = ["search", "--model", "llama-3.2-1b", "--gpu", "t4", "--method", "qlora"]
    code = main([*argv, "--bitsandbytes", "0.42.0", "--emit", "hf", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "kbit_saves_input" in err and "0.43.2" in err
    assert not out.exists()


def test_the_gated_deltanet_path_is_said(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Qwen 3.5's DeltaNet layers are costed as transformers' torch path: the screen says so
    (and whether flash-linear-attention, whose kernel keeps less, is installed)."""
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "qwen3_5_text",
                "hidden_size": 1024,
                "intermediate_size": 3072,
                "num_hidden_layers": 8,
                "num_attention_heads": 8,
                "num_key_value_heads": 2,
                "vocab_size": 32000,
            }
        )
    )
    main(["explain", "--model", str(config), "--gpu", "a100-80gb", "--method", "lora", "--json"])
    assumed = "; ".join(json.loads(capsys.readouterr().out)["assumed"])
    assert "gated DeltaNet (6 of 8 layers): transformers' torch path" in assumed
    main(
        [
            "explain",
            "--model",
            str(config),
            "--gpu",
            "a100-80gb",
            "--method",
            "lora",
            "--json",
            "--stack",
            "flash-linear-attention",
        ]
    )
    fla = json.loads(capsys.readouterr().out)
    assert "flash-linear-attention's chunk kernel" in "; ".join(fla["assumed"])
