"""bitsandbytes before 0.43.2 keeps each 4-bit linear's input for the backward
(``TrainConfig.kbit_saves_input``; constraints/activation_coefficients.py
``ActivationCoefficients.quantized_inputs``).

The rule is held to the released code: ``MatMul4Bit.forward`` of bitsandbytes 0.43.1 and 0.43.2
(bitsandbytes/autograd/_functions.py in the PyPI wheels, MIT licence), copied below with only the
empty-input branch left out, run on CPU tensors with ``dequantize_4bit`` stubbed. The arithmetic
(which inputs, shared or cast per linear, how long they live) is held to fitplan's step tracer
running its bitsandbytes emulation with the same rule (searcher/truth/fake_quant.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from constraints.config import TrainConfig
from constraints.models import resolve_model
from searcher.search.stack_profile import HF, TORCHTUNE, StackProfile

torch = pytest.importorskip("torch")


def _forward_0_43_1(ctx, A, B, out=None, bias=None, quant_state=None):
    """bitsandbytes 0.43.1 ``MatMul4Bit.forward`` (0.42.0 is the same)."""
    output = torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
    ctx.state = quant_state
    ctx.dtype_A, ctx.dtype_B, ctx.dtype_bias = (
        A.dtype,
        B.dtype,
        None if bias is None else bias.dtype,
    )
    if any(ctx.needs_input_grad[:2]):
        ctx.tensors = (A, B)
    else:
        ctx.tensors = (None, None)
    return output


def _forward_0_43_2(ctx, A, B, out=None, bias=None, quant_state=None):
    """bitsandbytes 0.43.2 ``MatMul4Bit.forward``."""
    output = torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
    ctx.state = quant_state
    ctx.dtype_A, ctx.dtype_B, ctx.dtype_bias = (
        A.dtype,
        B.dtype,
        None if bias is None else bias.dtype,
    )
    if any(ctx.needs_input_grad[:2]):
        ctx.tensors = (None, B)
    else:
        ctx.tensors = (None, None)
    return output


#: ``bitsandbytes.functional`` as the copied code calls it: the weight as (in, out)
F = SimpleNamespace(dequantize_4bit=lambda B, state: state.weight)


def _released(forward: Any) -> Any:
    class MatMul4Bit(torch.autograd.Function):
        @staticmethod
        def forward(ctx, A, B, out=None, bias=None, quant_state=None):
            return forward(ctx, A, B, out, bias, quant_state)

        @staticmethod
        def backward(ctx, grad):
            return grad @ ctx.state.weight.t(), None, None, None, None

    return MatMul4Bit


@pytest.mark.parametrize(("forward", "keeps"), [(_forward_0_43_1, True), (_forward_0_43_2, False)])
def test_the_released_matmul_keeps_its_input_before_0_43_2(forward: Any, keeps: bool) -> None:
    weight = torch.randn(8, 16)
    state = SimpleNamespace(weight=weight.t().contiguous())
    packed = torch.zeros(64, 1, dtype=torch.uint8)
    x = torch.randn(4, 16, requires_grad=True)
    out = _released(forward).apply(x, packed, None, None, state)
    kept = out.grad_fn.tensors[0]
    assert (kept is x) is keeps
    out.sum().backward()
    assert (out.grad_fn.tensors[0] is x) is keeps  # backward does not release a ctx attribute


@pytest.mark.parametrize(
    ("version", "keeps"), [("0.42.0", True), ("0.43.1", True), ("0.43.2", False), ("0.50.2", False)]
)
def test_the_stack_profile_reads_the_boundary(version: str, keeps: bool) -> None:
    versions = {"transformers": "5.25.0", "peft": "0.21.2", "torch": "2.13.0"}
    hf = StackProfile(HF, {**versions, "bitsandbytes": version}, ())
    assert hf.kbit_saves_input() is keeps
    assert (
        StackProfile(TORCHTUNE, {**versions, "bitsandbytes": version}, ()).kbit_saves_input()
        is False
    )


def test_the_emulation_keeps_what_the_release_keeps() -> None:
    from searcher.truth.fake_quant import linear4bit_class

    cls = linear4bit_class()
    base = torch.nn.Linear(16, 8, bias=False)
    for saves in (True, False):
        layer = cls(base, torch.float32, False, saves)
        x = torch.randn(4, 16, requires_grad=True)
        out = layer(x)
        ctx = out.grad_fn
        while type(ctx).__name__ != "MatMul4BitEmulationBackward":
            ctx = ctx.next_functions[0][0]
        assert (getattr(ctx, "tensors", (None,))[0] is x) is saves


def _saved(spec: Any, **kw: Any) -> float:
    from constraints.config_batch import ConfigBatch
    from constraints.gpus import resolve_gpu
    from constraints.memory import memory_arrays

    cfg = TrainConfig(method="qlora", quant="nf4", seq_len=512, attention="sdpa", **kw)
    arrays = memory_arrays(spec, ConfigBatch.from_configs([cfg]), resolve_gpu("a10g"))
    return float(arrays["saved_activations"][0])


def test_llama_2_7b_keeps_two_hidden_and_one_intermediate_per_token_per_layer() -> None:
    """litgpt's QLoRA (bf16 stream, bitsandbytes compute bf16, LoRA with dropout: every adapter
    reads a dropped copy) without checkpointing: per layer the q/k/v input, the gate/up input and
    the down projection's input (the out projection reads SDPA's own output), 2 bytes each."""
    spec = resolve_model("llama-2-7b")
    kw = dict(recipe="bf16-torch", adapter_dtype="bf16", micro_batch=2, lora_dropout=0.05)
    added = _saved(spec, kbit_saves_input=True, **kw) - _saved(spec, **kw)
    by_hand = 32 * 2 * 512 * (2 * 4096 + 11008) * 2
    assert added == pytest.approx(by_hand, rel=1e-9)


TINY = json.loads((Path(__file__).parents[1] / "data" / "tiny_llama_config.json").read_text())
TRACED = {
    **TINY,
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
}


@pytest.mark.heavy
@pytest.mark.parametrize(
    "kw",
    [
        # PEFT's stack: fp32 stream after prepare_model_for_kbit_training, fp16 compute: a cast
        # copy per linear, kept through non-reentrant checkpointing (a ctx attribute)
        {"recipe": "bf16-torch", "compute_dtype": "fp16"},
        {"recipe": "bf16-torch", "compute_dtype": "fp16", "checkpointing": "full"},
        # a bf16 stream into bf16 linears: the inputs themselves
        {"recipe": "bf16-torch", "adapter_dtype": "bf16", "lora_dropout": 0.05},
        {"recipe": "bf16-torch", "adapter_dtype": "bf16", "lora_targets": "attention"},
    ],
)
def test_the_trace_and_the_model_add_the_same_inputs(kw: dict[str, Any]) -> None:
    """What the old matmul adds, traced and modelled, agree within one layer's worth: the
    first layer's q/k/v input does not require grad where nothing enables the input's grad
    (bitsandbytes skips it, the model counts it) and the moment of the traced peak moves."""
    from constraints.activation_coefficients import activation_coefficients
    from constraints.breakdown import explain
    from constraints.gpus import resolve_gpu
    from constraints.models import spec_from_hf_config
    from searcher.truth.step_trace import trace_step

    spec = spec_from_hf_config(TRACED, id="traced", name="traced")
    gpu = resolve_gpu("h100")
    base = {"method": "qlora", "quant": "nf4", "micro_batch": 2, "seq_len": 256}
    base.update(attention="sdpa", backend="single", **kw)
    traced, modelled = [], []
    for saves in (False, True):
        cfg = TrainConfig(**base, kbit_saves_input=saves)
        traced.append(trace_step(spec, cfg, hf_config_dict=TRACED).peak_bytes)
        b = explain(spec, cfg, gpu).breakdown
        modelled.append(b.allocated - b.parts["workspace"])
    targets = base.get("lora_targets", "all-linear")
    q = activation_coefficients(spec, "lora", targets, "flash", False, True)
    tokens = 2 * 256
    whole = max(q.quantized_input_copies, sum(q.quantized_inputs.values()))
    one_layer = tokens * whole / spec.layers * 2
    traced_added, modelled_added = traced[1] - traced[0], modelled[1] - modelled[0]
    assert traced_added > one_layer
    assert abs(modelled_added - traced_added) <= one_layer
