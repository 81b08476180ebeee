"""The step tracer: extrapolation, optimizer state, eager attention, LoRA dtypes, NF4 storage.

Golden values come from the definitions of the thing measured (Adam keeps two fp32 moments and a
step counter per parameter; eager attention keeps b·h·s² scores), from bitsandbytes' own
quantize_4bit, or from a full-depth trace of the same model; never from the tracer's constants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from constraints.config import TrainConfig
from constraints.models import spec_from_hf_config

pytestmark = pytest.mark.heavy

TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())


def _spec(cfg: dict) -> object:
    return spec_from_hf_config(cfg, id="tiny-llama", name="tiny-llama")


def _trace(cfg: dict | None = None, **kw: object) -> object:
    from searcher.truth.step_trace import trace_step

    cfg = cfg or TINY
    opts = {k: kw.pop(k) for k in ("full_depth", "steps", "adamw_impl") if k in kw}
    tc = TrainConfig(**{"micro_batch": 2, "seq_len": 64, **kw})
    return trace_step(_spec(cfg), tc, hf_config_dict=cfg, **opts)


def _round(n: int) -> int:
    """The CUDA caching allocator's block: 512 bytes (independent of the tracer's constant)."""
    return 0 if n == 0 else (n + 511) // 512 * 512


@pytest.mark.parametrize(
    "kw",
    [
        {"recipe": "bf16-torch", "attention": "sdpa"},
        {"method": "lora", "attention": "eager", "checkpointing": "full"},
        {"method": "qlora", "quant": "nf4-dq", "checkpointing": "full"},
    ],
)
def test_extrapolation_equals_a_full_trace_to_the_block(kw: dict) -> None:
    deep = {**TINY, "num_hidden_layers": 7}
    full = _trace(deep, full_depth=True, **kw)
    extrapolated = _trace(deep, **kw)
    assert extrapolated.traced_layers == (3, 4)
    assert extrapolated.peak_bytes == full.peak_bytes
    assert extrapolated.composition == full.composition
    assert extrapolated.moment == full.moment


#: a Falcon-style layer (parallel attention and MLP from one layer norm, multi-query): layer 0's
#: MLP needs no backward when the embedding is frozen (no checkpointing), and a layer's first
#: parameter to accumulate (LoRA on the attention) comes after its MLP's backward
TINY_FALCON = {
    "model_type": "falcon", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 12,
    "vocab_size": 128, "ffn_hidden_size": 4096, "multi_query": True, "parallel_attn": True,
    "new_decoder_architecture": False, "alibi": False, "bias": False,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}  # fmt: skip
#: tied embeddings larger than 3–4 layers but smaller than 12
TINY_TIED = {**TINY, "num_hidden_layers": 12, "vocab_size": 4096, "tie_word_embeddings": True}


@pytest.mark.parametrize(
    ("model", "kw"),
    [
        # the layer's backward segment started at its first accumulated gradient, so at 3 layers
        # the second-to-last layer's segment held layer 0's (absent) MLP backward and at 4 a real
        # one: a dequantised MLP weight per layer extrapolated over 8 layers (+55 %; Falcon-7B
        # QLoRA 1 × 512 traced 9.67 GiB at 3/4 layers, 6.93 at all 32)
        (TINY_FALCON, {"method": "qlora", "quant": "nf4-dq", "lora_targets": "attention"}),
        (TINY_FALCON, {"method": "lora", "lora_targets": "attention"}),
        # the master cast's peak: the first (embedding) parameter's fp32 gradient beside every
        # 16-bit one at 3/4 layers, the last layer's with every gradient fp32 at 12 (−5.3 %;
        # Qwen2.5-1.5B bf16-master 12.37 GiB at 3/4 layers vs weights + master + fp32 gradients)
        (TINY_TIED, {"method": "full", "recipe": "bf16-master", "seq_len": 8, "micro_batch": 1}),
    ],
)
def test_extrapolated_segments_match_a_full_trace(model: dict, kw: dict) -> None:
    base = {"micro_batch": 1, "seq_len": 16, "optimizer": "sgd", "lora_rank": 4}
    base.update(recipe="bf16-torch", attention="flash")
    cfg = {**base, **kw}
    full = _trace(model, full_depth=True, **cfg)
    extrapolated = _trace(model, **cfg)
    assert extrapolated.peak_bytes == full.peak_bytes
    assert extrapolated.moment == full.moment


def test_second_step_adds_exactly_adams_state() -> None:
    """fp32 full fine-tune, activations dominant so both peaks sit in backward: the second step
    carries AdamW's exp_avg and exp_avg_sq (fp32, one per parameter) and its fused step counter
    (an fp32 scalar tensor on the device) per parameter."""
    import torch

    from searcher.truth.hf_build import build_model, hf_config

    kw = {"recipe": "fp32", "micro_batch": 4, "seq_len": 256, "attention": "eager"}
    one = _trace(steps=1, **kw)
    two = _trace(steps=2, **kw)
    assert one.moment == two.moment == "backward"
    model = build_model(
        hf_config(TINY), device="meta", dtype=torch.float32, attn_implementation="eager"
    )
    adam = sum(2 * _round(p.numel() * 4) + _round(4) for p in model.parameters())
    assert two.peak_bytes - one.peak_bytes == adam
    assert two.composition["optimizer_state"] == adam


def test_eager_extra_over_sdpa_scales_with_batch_heads_seq_squared() -> None:
    def extra(b: int, s: int) -> int:
        kw = {"recipe": "bf16-torch", "micro_batch": b, "seq_len": s}
        return (
            _trace(attention="eager", **kw).peak_bytes - _trace(attention="sdpa", **kw).peak_bytes
        )

    base = extra(1, 128)
    heads, layers = TINY["num_attention_heads"], TINY["num_hidden_layers"]
    per_score = base / (heads * 128**2 * layers)
    # bf16 scores, their fp32 softmax and its bf16 copy: several bytes per score, per layer
    assert 4 <= per_score <= 12
    assert extra(2, 128) / base == pytest.approx(2.0, rel=0.05)
    assert extra(1, 256) / base == pytest.approx(4.0, rel=0.10)


TINY_OPT = {
    "model_type": "opt", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
    "ffn_dim": 128, "vocab_size": 512, "word_embed_proj_dim": 64, "max_position_embeddings": 256,
}  # fmt: skip
TINY_GPT2 = {
    "model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 512,
    "n_positions": 256,
}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "adapted"),
    [
        # the attention projections of each modeling file (modeling_falcon.py FalconAttention:
        # query_key_value, dense; modeling_opt.py OPTAttention: q/k/v/out_proj; modeling_gpt2.py
        # GPT2Attention: c_attn, c_proj): the out projection was left without an adapter
        (TINY_FALCON, {"self_attention.query_key_value", "self_attention.dense"}),
        (
            TINY_OPT,
            {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"},
        ),
        (TINY_GPT2, {"attn.c_attn", "attn.c_proj"}),
    ],
)
def test_attention_targets_adapt_every_attention_projection(model: dict, adapted: set) -> None:
    """``--lora-targets attention`` traces the adapters the emitted script builds: every
    attention projection, the MLP's none (GPT-2's mlp.c_proj shares the leaf name)."""
    from searcher.truth.step_build import build as _build

    cfg = TrainConfig(method="lora", lora_targets="attention", lora_rank=4)
    peft_model, _ = _build(model, cfg)
    found = {  # layer 0's adapted modules: "….layers.0.self_attn.q_proj.lora_A.default.weight"
        name.split(".0.", 1)[1].split(".lora_A")[0]
        for name, _p in peft_model.named_parameters()
        if ".lora_A." in name and ".0." in name
    }
    assert found == adapted


def test_lora_adapters_are_fp32_on_a_bf16_base() -> None:
    from searcher.truth.step_build import build as _build

    cfg = TrainConfig(method="lora", recipe="bf16-torch", lora_rank=8)
    model, _ = _build(TINY, cfg)
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert lora and all(str(p.dtype) == "torch.float32" for p in lora.values())
    base = [p for n, p in model.named_parameters() if "lora_" not in n]
    assert all(str(p.dtype) == "torch.bfloat16" and not p.requires_grad for p in base)
    traced = _trace(method="lora", recipe="bf16-torch", lora_rank=8)
    adam = sum(2 * _round(p.numel() * 4) + _round(4) for p in lora.values())
    assert traced.composition["optimizer_state"] == adam


def test_qlora_wraps_the_emulated_layers_with_peft_bitsandbytes_class() -> None:
    pytest.importorskip("bitsandbytes")
    from searcher.truth.step_build import build as _build

    model, _ = _build(TINY, TrainConfig(method="qlora", quant="nf4", checkpointing="full"))
    kinds = {type(m).__name__ for m in model.modules()}
    assert "Linear4bit" in kinds  # peft.tuners.lora.bnb.Linear4bit
    non_quant = [p for n, p in model.named_parameters() if "lora_" not in n]
    assert all(str(p.dtype) == "torch.float32" for p in non_quant)  # prepare_model_for_kbit


def test_qlora_with_16bit_adapters_is_the_emitted_stack_without_the_fp32_upcast() -> None:
    # fitplan's emitted HF script never calls prepare_model_for_kbit_training (nor does
    # torchtune): with bf16 adapters pinned, the non-quantised parameters stay bf16
    pytest.importorskip("bitsandbytes")
    from searcher.truth.step_build import build as _build

    cfg = TrainConfig(method="qlora", quant="nf4", checkpointing="full", adapter_dtype="bf16")
    model, _ = _build(TINY, cfg)
    assert "Linear4bit" in {type(m).__name__ for m in model.modules()}
    params = dict(model.named_parameters())
    assert all(str(p.dtype) == "torch.bfloat16" for p in params.values() if p.is_floating_point())
    assert any("lora_" in n for n in params)


def test_gpt2_conv1d_linears_are_quantised_as_transformers_does() -> None:
    # transformers' bitsandbytes integration replaces Conv1D as well as nn.Linear
    pytest.importorskip("bitsandbytes")
    from searcher.truth.hf_build import config_of
    from searcher.truth.step_build import build as _build

    hf, _spec = config_of("gpt2")
    model, _ = _build({**hf, "n_layer": 1}, TrainConfig(method="qlora", quant="nf4"))
    names = {type(m).__name__ for m in model.modules()}
    assert "Conv1D" not in names
    assert "Linear4bit" in names


@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_storage_equals_bitsandbytes(double_quant: bool) -> None:
    bnb_f = pytest.importorskip("bitsandbytes.functional")
    import torch

    from searcher.truth.fake_quant import nf4_storage_bytes

    shape = (96, 200)  # 19200 elements: 300 blocks of 64, not a multiple of 256 blocks
    w = torch.randn(shape, dtype=torch.bfloat16)
    packed, state = bnb_f.quantize_4bit(
        w, blocksize=64, compress_statistics=double_quant, quant_type="nf4"
    )
    ours = nf4_storage_bytes(shape, double_quant)
    assert ours["weight"] == packed.numel() * packed.element_size()
    assert ours["absmax"] == state.absmax.numel() * state.absmax.element_size()
    assert ours["code"] == state.code.numel() * state.code.element_size()
    if double_quant:
        s2 = state.state2
        assert ours["absmax2"] == s2.absmax.numel() * s2.absmax.element_size()
        assert ours["code2"] == s2.code.numel() * s2.code.element_size()
        assert ours["offset"] == state.offset.numel() * state.offset.element_size()


def test_paged_8bit_states_leave_the_allocator() -> None:
    plain = _trace(recipe="bf16-torch", optimizer="adamw-8bit")
    paged = _trace(recipe="bf16-torch", optimizer="paged-adamw-8bit")
    # the tiny model has no tensor of >= 1e5 elements, so nothing is paged here
    assert paged.paged_bytes == 0 and paged.peak_bytes == plain.peak_bytes


def test_nothing_but_weights_and_state_survives_a_step() -> None:
    """After zero_grad(set_to_none=True) only parameters, optimizer state and the input ids are
    alive: every activation, gradient and temporary was freed (no leak in the tracking)."""
    from searcher.truth.step_trace import _run

    cfg = TrainConfig(method="lora", micro_batch=2, seq_len=64, checkpointing="full")
    raw = _run(TINY, cfg, "fused", 2)
    _bytes, _phase, comp = raw.segments["between steps"]
    alive = {k for k, v in comp.items() if v}
    assert alive == {"parameters", "optimizer_state", "inputs"}
