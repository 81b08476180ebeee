"""Bytes per value: dtypes, precision recipes, optimizers and quantised bases, each with its source.

Everything here is a named constant in one place; the memory model only multiplies.
"""

from __future__ import annotations

from constraints.errors import unknown_name
from constraints.frozen import frozen

#: Storage bytes per element. int4 is the idealised 4-bit store (no scales) the source documents
#: use ("7e9 × 0.5 bytes ≈ 3.5 GB"); real NF4 adds its block constants (see QUANTS).
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
FLOAT_DTYPES = ("fp32", "bf16", "fp16")
COMPUTE_DTYPES = ("bf16", "fp16", "fp32", "fp8")


def dtype_bytes(name: str) -> float:
    key = name.strip().lower()
    if key not in DTYPE_BYTES:
        raise unknown_name("dtype", name, DTYPE_BYTES, "fitplan explain --help")
    return DTYPE_BYTES[key]


@frozen
class Recipe:
    """A precision recipe: what dtype each copy of the model is held in.

    ``state_dtype`` None means the optimizer states take the parameter's dtype (plain torch
    optimizers create them with ``zeros_like(p)``). ``autocast``: weights are held in fp32 and
    cast to the 16-bit compute dtype per op (torch.autocast), so the residual stream stays fp32
    and each matmul keeps a 16-bit copy of its weight until its backward.
    """

    name: str
    weight: str
    grad: str
    master: str | None
    state_dtype: str | None
    compute: str
    autocast: bool
    description: str


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "fp32",
            "fp32",
            "fp32",
            None,
            "fp32",
            "fp32",
            False,
            "Case A of the source document: everything fp32 (4+4+8 B/param with AdamW)",
        ),
        Recipe(
            "bf16-pure",
            "bf16",
            "bf16",
            None,
            "fp32",
            "bf16",
            False,
            "Case B: bf16 weights and grads, fp32 optimizer states, no master copy (2+2+8)",
        ),
        Recipe(
            "bf16-master",
            "bf16",
            "bf16",
            "fp32",
            "fp32",
            "bf16",
            False,
            "Case C, DeepSpeed/Megatron mixed precision: bf16 weights and grads, fp32 master + "
            "fp32 states (2+2+4+8)",
        ),
        Recipe(
            "amp",
            "fp32",
            "fp32",
            None,
            "fp32",
            "bf16",
            True,
            "HF Trainer with bf16/fp16=True on a model loaded in fp32: fp32 weights, grads and "
            "states, 16-bit autocast compute (4+4+8, plus 16-bit weight copies during the step)",
        ),
        Recipe(
            "bf16-torch",
            "bf16",
            "bf16",
            None,
            None,
            "bf16",
            False,
            "a bf16 model with plain torch AdamW (torchtune; HF Trainer on a bf16-loaded model): "
            "states take the parameter dtype (2+2+4)",
        ),
    )
}
DEFAULT_RECIPE = "bf16-master"


def recipe(name: str) -> Recipe:
    key = name.strip().lower()
    if key not in RECIPES:
        raise unknown_name("precision recipe", name, RECIPES, "fitplan explain --help")
    return RECIPES[key]


def with_compute(r: Recipe, compute: str) -> Recipe:
    """The same recipe with another compute dtype (e.g. fp16 where the GPU lacks bf16)."""
    compute = compute.lower()
    if compute not in COMPUTE_DTYPES:
        raise unknown_name("compute dtype", compute, COMPUTE_DTYPES, "fitplan explain --help")
    if compute == r.compute:
        return r
    half = "fp16" if compute == "fp16" else "bf16"
    swap = {"bf16": half, "fp16": half}
    if compute == "fp32":
        return Recipe(
            r.name,
            "fp32",
            "fp32",
            None,
            "fp32" if r.state_dtype else None,
            "fp32",
            False,
            r.description,
        )
    return Recipe(
        r.name,
        swap.get(r.weight, r.weight),
        swap.get(r.grad, r.grad),
        r.master,
        r.state_dtype,
        compute,
        r.autocast,
        r.description,
    )


@frozen
class Optimizer:
    """Per-trainable-parameter optimizer state.

    ``states``: full-size state tensors (Adam 2: m and v; SGD+momentum, Lion 1; SGD 0).
    ``eight_bit``: bitsandbytes blockwise 8-bit states (uint8 + fp32 absmax per block); tensors
    under ``BNB_MIN_8BIT_SIZE`` elements keep fp32 states. ``factored``: Adafactor keeps row and
    column second-moment vectors (n + m per n×m matrix) and no first moment. ``paged``: states in
    CUDA unified memory (cudaMallocManaged), evicted to CPU RAM under pressure and invisible to
    torch.cuda.max_memory_allocated. ``fp32_states``: the states are fp32 whatever the parameter's
    dtype (bitsandbytes' 32-bit optimizers: ``Optimizer1State.init_state`` takes float32 for
    ``optim_bits == 32``), not the recipe's state dtype.
    """

    name: str
    states: int
    eight_bit: bool = False
    factored: bool = False
    paged: bool = False
    fp32_states: bool = False
    description: str = ""
    hf_name: str = ""


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer(
            "adamw",
            2,
            description="torch AdamW (fused, as HF Trainer and torchtune run it)",
            hf_name="adamw_torch_fused",
        ),
        Optimizer(
            "adamw-8bit",
            2,
            eight_bit=True,
            description="bitsandbytes AdamW8bit (blockwise, 256-element blocks)",
            hf_name="adamw_bnb_8bit",
        ),
        Optimizer(
            "paged-adamw-8bit",
            2,
            eight_bit=True,
            paged=True,
            description="bitsandbytes PagedAdamW8bit (states in unified memory)",
            hf_name="paged_adamw_8bit",
        ),
        Optimizer("sgd", 0, description="plain SGD: no state", hf_name="sgd"),
        Optimizer("sgd-momentum", 1, description="SGD with momentum: one state", hf_name="sgd"),
        Optimizer(
            "adafactor",
            0,
            factored=True,
            description="Adafactor, factored second moment, no first moment (HF defaults)",
            hf_name="adafactor",
        ),
        # HF Trainer's lion_32bit is bitsandbytes' Lion with optim_bits=32
        # (transformers trainer_optimizer.py): one fp32 state, updated in one fused kernel
        Optimizer(
            "lion",
            1,
            fp32_states=True,
            description="Lion (bitsandbytes, 32-bit): one fp32 momentum state",
            hf_name="lion_32bit",
        ),
    )
}


def optimizer(name: str) -> Optimizer:
    key = name.strip().lower()
    if key not in OPTIMIZERS:
        raise unknown_name("optimizer", name, OPTIMIZERS, "fitplan explain --help")
    return OPTIMIZERS[key]


#: bitsandbytes 8-bit optimizers: absmax block of 256 elements since 0.44.0 (commit aa57bd89,
#: "Change 8bit optimizer blocksize 2048->256"; bitsandbytes/optim/optimizer.py
#: Optimizer2State.init_state), fp32 absmax per block and state.
BNB_OPTIM_BLOCK = 256
#: ``min_8bit_size`` default of AdamW8bit / PagedAdamW8bit: smaller tensors keep fp32 states.
BNB_MIN_8BIT_SIZE = 4096


@frozen
class Quant:
    """A quantised frozen base (bitsandbytes; GPTQ / AWQ checkpoints). ``bytes_per_weight``
    includes the block constants.

    int8 (LLM.int8, Linear8bitLt): 1 byte + an fp32 scale per output row (SCB), no fp16 copy with
    has_fp16_weights=False. NF4 (Linear4bit): 4 bits + an fp32 absmax per 64-element block =
    4.5 bits; with double quantisation the absmax are 8-bit with an fp32 absmax per 256 of them:
    4 + 8/64 + 32/(64·256) = 4.127 bits (bitsandbytes functional.quantize_4bit, blocksize 64;
    nested quantize_blockwise, blocksize 256). Embeddings, the output head, norms and biases stay
    in the 16-bit weight dtype. Forward and backward dequantise one weight at a time into a
    16-bit copy (a transient the size of the largest linear).
    """

    name: str
    bits_per_weight: float
    per_row_fp32_scale: bool = False

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8


#: the quantisations bitsandbytes' 4-bit linears run (``Linear4bit`` → ``MatMul4Bit``)
BNB_4BIT = ("nf4", "nf4-dq")
QUANTS: dict[str, Quant] = {
    q.name: q
    for q in (
        Quant("none", 0.0),
        Quant("int8", 8.0, per_row_fp32_scale=True),
        Quant("nf4", 4.0 + 32 / 64),
        Quant("nf4-dq", 4.0 + 8 / 64 + 32 / (64 * 256)),
        # pre-quantised checkpoints, 4-bit with group size 128 (AutoGPTQ / transformers GPTQConfig
        # and AutoAWQ defaults): an fp16 scale and a packed 4-bit zero point per 128 weights of
        # a column (qlinear_cuda_old.py / awq gemm.py buffers: scales fp16, qzeros int32 packing
        # 8 zeros); GPTQ's g_idx (one int32 per input row, 32/d_out bits) is left out (< 0.01 bit)
        Quant("gptq", 4.0 + 16 / 128 + 4 / 128),
        Quant("awq", 4.0 + 16 / 128 + 4 / 128),
    )
}


def quant(name: str) -> Quant:
    key = name.strip().lower()
    if key not in QUANTS:
        raise unknown_name("quantisation", name, QUANTS, "fitplan explain --help")
    return QUANTS[key]
