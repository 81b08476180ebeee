"""Storage-exact emulations of bitsandbytes for a step traced on fake tensors.

``Params4bit`` cannot wrap a fake tensor, so the 4-bit layers of a QLoRA model are replaced by
:class:`Linear4bitEmulation`, which holds exactly the tensors bitsandbytes 0.50 keeps and
allocates exactly its transients (bitsandbytes/functional.py ``quantize_4bit`` /
``dequantize_4bit``, autograd/_functions.py ``MatMul4Bit``, backends/cuda/ops.py
``_dequant_linear_fallback``; tests/truth/test_step_trace.py holds the sizes to bitsandbytes' own
``quantize_4bit`` on the CPU):

- storage: the packed weight, uint8, ``ceil(numel / 2)`` bytes; NF4's 16-entry fp32 code; the
  absmax, fp32 per 64-element block, or with double quantisation uint8 per block plus, per 256
  blocks, an fp32 absmax, the 256-entry fp32 dynamic code and the fp32 offset (the mean absmax);
- forward (training has M = tokens > 1536, so the CUDA backend takes the dequantise + F.linear
  fallback): nested absmax dequantised to fp32 (two block-count fp32 tensors: the result and
  ``+ offset``), the weight dequantised to the input's dtype, ``F.linear``; nothing is saved but
  the packed weight (bitsandbytes < 0.43.2 keeps the input too: ``saves_input``);
- backward: the absmax again (nested), the weight dequantised to the quant state's dtype (the
  dtype the model was loaded in), cast to the gradient's dtype when different, one matmul.

The 8-bit optimizers: :class:`AdamW8bitEmulation` keeps bitsandbytes ``Optimizer2State``'s state
(optim/optimizer.py ``init_state``): two uint8 states and two fp32 absmax per 256-element block,
fp32 states for tensors under ``min_8bit_size`` = 4096 elements; the paged variant puts states of
≥ 1e5 elements in CUDA unified memory (``get_paged``), outside torch's allocator. The update runs
in one fused kernel, in place.
"""

from __future__ import annotations

from typing import Any

#: bitsandbytes Linear4bit / quantize_4bit default block size
NF4_BLOCK = 64
#: nested (double) quantisation of the absmax: blockwise 8-bit, 256 per block
NF4_NESTED_BLOCK = 256
#: NF4's code book: 16 fp32 values (functional.get_4bit_type)
NF4_CODE_ENTRIES = 16
#: the dynamic 8-bit map of the nested absmax: 256 fp32 values (create_dynamic_map)
DYNAMIC_CODE_ENTRIES = 256
#: bitsandbytes 8-bit optimizers: absmax block (optim/optimizer.py init_state, since 0.44)
BNB_OPTIM_BLOCK = 256
#: tensors smaller than this keep fp32 states (min_8bit_size default)
BNB_MIN_8BIT_SIZE = 4096
#: paged states below this many elements stay in device memory (get_state_buffer)
BNB_PAGED_MIN_NUMEL = 100_000


def _blocks(n: int, block: int) -> int:
    return -(-n // block)


def nf4_storage_bytes(shape: tuple[int, int], double_quant: bool) -> dict[str, int]:
    """Bytes of each tensor bitsandbytes keeps for one NF4 weight of ``shape`` (unrounded)."""
    numel = shape[0] * shape[1]
    blocks = _blocks(numel, NF4_BLOCK)
    out = {"weight": (numel + 1) // 2, "code": NF4_CODE_ENTRIES * 4}
    if double_quant:
        out["absmax"] = blocks  # uint8
        out["absmax2"] = _blocks(blocks, NF4_NESTED_BLOCK) * 4
        out["code2"] = DYNAMIC_CODE_ENTRIES * 4
        out["offset"] = 4
    else:
        out["absmax"] = blocks * 4
    return out


def _matmul_4bit() -> Any:
    import torch

    class MatMul4BitEmulation(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, packed: Any, layer: Any) -> Any:
            layer.dequantised_absmax()
            w = torch.empty(layer.out_features, layer.in_features, dtype=x.dtype, device=x.device)
            out = torch.nn.functional.linear(x, w)
            del w
            ctx.layer = layer
            ctx.save_for_backward(packed)
            if layer.saves_input and ctx.needs_input_grad[0]:
                ctx.tensors = (x, packed)  # bitsandbytes < 0.43.2: ``ctx.tensors = (A, B)``
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            layer = ctx.layer
            layer.dequantised_absmax()
            w = torch.empty(
                layer.out_features, layer.in_features, dtype=layer.quant_dtype, device=grad.device
            )
            if w.dtype != grad.dtype:
                w = w.to(grad.dtype)
            grad_x = torch.matmul(grad, w)
            return grad_x, None, None

    return MatMul4BitEmulation


def _linear4bit_base() -> type:
    """bnb.nn.Linear4bit where bitsandbytes installs (so that PEFT wraps the layer with its
    bitsandbytes LoRA class, as it does a real QLoRA model), else nn.Linear."""
    try:
        import bitsandbytes as bnb

        return bnb.nn.Linear4bit
    except ImportError:  # pragma: no cover - depends on the environment
        from torch import nn

        return nn.Linear


def linear4bit_class() -> type:
    import torch
    from torch import nn

    matmul = _matmul_4bit()
    base = _linear4bit_base()

    class Linear4bitEmulation(base):  # type: ignore[valid-type, misc]
        """bnb.nn.Linear4bit's storage and transients (see the module docstring)."""

        def __init__(
            self, linear: Any, compute_dtype: Any, double_quant: bool, saves_input: bool = False
        ) -> None:
            nn.Module.__init__(self)
            self.saves_input = saves_input
            self.in_features = linear.in_features
            self.out_features = linear.out_features
            self.compute_dtype = compute_dtype
            self.quant_dtype = linear.weight.dtype
            self.double_quant = double_quant
            sizes = nf4_storage_bytes((self.out_features, self.in_features), double_quant)
            dev = linear.weight.device
            u8 = torch.uint8

            def buf(n: int, dtype: Any) -> Any:
                return torch.empty(n, dtype=dtype, device=dev)

            self.register_buffer("packed", buf(sizes["weight"], u8).view(-1, 1))
            self.register_buffer("code", buf(NF4_CODE_ENTRIES, torch.float32))
            if double_quant:
                self.register_buffer("absmax", buf(sizes["absmax"], u8))
                self.register_buffer("absmax2", buf(sizes["absmax2"] // 4, torch.float32))
                self.register_buffer("code2", buf(DYNAMIC_CODE_ENTRIES, torch.float32))
                self.register_buffer("offset", buf(1, torch.float32).view(()))
            else:
                self.register_buffer("absmax", buf(sizes["absmax"] // 4, torch.float32))
            self.bias = linear.bias  # bnb keeps the bias as a plain parameter

        @property
        def weight(self) -> Any:
            """The packed weight, with the attributes PEFT reads off a Params4bit."""
            w = self.packed
            w.compress_statistics = self.double_quant
            w.quant_type = "nf4"
            w.quant_state = None
            return w

        def dequantised_absmax(self) -> None:
            if self.double_quant:
                dq = torch.empty(self.absmax.shape[0], dtype=torch.float32, device=self.code.device)
                shifted = dq + self.offset
                del dq, shifted

        def forward(self, x: Any) -> Any:
            inp_dtype = x.dtype
            if self.compute_dtype is not None:
                x = x.to(self.compute_dtype)
            out = matmul.apply(x, self.packed, self)
            if self.bias is not None:
                out = out + self.bias.to(out.dtype)
            return out.to(inp_dtype)

    return Linear4bitEmulation


def quantise_linears(
    model: Any, compute_dtype: Any, double_quant: bool, skip: Any, saves_input: bool = False
) -> int:
    """Replace every nn.Linear and Conv1D (but ``skip``: the head) by the NF4 emulation, as
    transformers' bitsandbytes integration does (``llm_int8_skip_modules`` defaults to the head);
    ``saves_input``: as bitsandbytes < 0.43.2, whose ``MatMul4Bit`` keeps its input.
    Returns the number replaced."""
    from types import SimpleNamespace

    from torch import nn
    from transformers.pytorch_utils import Conv1D

    cls = linear4bit_class()
    n = 0
    for _name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child is skip:
                continue
            if isinstance(child, Conv1D):
                # GPT-2's Conv1D (weight in × out): transformers' bitsandbytes integration
                # quantises it too (integrations/bitsandbytes.py: ``isinstance(module, Conv1D)
                # or type(module) is nn.Linear``, in/out features from the transposed shape)
                fan_in, fan_out = child.weight.shape
                child = SimpleNamespace(
                    in_features=fan_in, out_features=fan_out, weight=child.weight, bias=child.bias
                )
            elif not isinstance(child, nn.Linear):
                continue
            setattr(module, child_name, cls(child, compute_dtype, double_quant, saves_input))
            n += 1
    return n


def adamw8bit_class() -> type:
    import torch

    class AdamW8bitEmulation(torch.optim.Optimizer):
        """bitsandbytes AdamW8bit / PagedAdamW8bit state layout; the update is in place."""

        def __init__(self, params: Any, lr: float = 1e-4, paged: bool = False) -> None:
            super().__init__(params, {"lr": lr})
            self.paged = paged
            self.paged_bytes = 0

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        self._init_state(state, p)
            return None

        def _init_state(self, state: dict[str, Any], p: Any) -> None:
            n = p.numel()
            eight_bit = n >= BNB_MIN_8BIT_SIZE
            dtype = torch.uint8 if eight_bit else torch.float32
            state["step"] = 0
            if self.paged and n >= BNB_PAGED_MIN_NUMEL:
                # cudaMallocManaged: not in torch's allocator; count the bytes beside it
                self.paged_bytes += 2 * n * (1 if eight_bit else 4)
            else:
                state["state1"] = torch.zeros_like(p, dtype=dtype)
                state["state2"] = torch.zeros_like(p, dtype=dtype)
            if eight_bit:
                blocks = _blocks(n, BNB_OPTIM_BLOCK)
                state["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                state["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)

    return AdamW8bitEmulation


def lion_class() -> type:
    import torch

    class Lion(torch.optim.Optimizer):
        """Lion (Chen et al. 2023) as HF Trainer's ``lion_32bit`` runs it: bitsandbytes' Lion with
        ``optim_bits=32`` (transformers trainer_optimizer.py). One fp32 state per parameter,
        whatever the parameter's dtype (``Optimizer1State.init_state``), and the update in one
        fused kernel (``optimizer_update_32bit``) that writes the state and the parameter in place
        and allocates nothing."""

        def __init__(self, params: Any, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99)):
            super().__init__(params, {"lr": lr, "betas": betas})

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                    # the fused kernel's in-place writes (values are irrelevant: fake tensors)
                    state["exp_avg"].mul_(group["betas"][1])
                    p.mul_(1.0)
            return None

    return Lion
