"""Step time, tokens/s, MFU and cost of a training configuration: a roofline per kernel.

Every matmul of the model (from the parameter inventory) runs at
``max(FLOPs / (peak × η_gemm), bytes / bandwidth)`` — a small micro-batch or a small hidden size
makes it memory-bound, as real kernels are. Flash attention runs at ``peak × η_attn``; eager
attention adds the s² matrices' traffic. The elementwise work (norms, activations, residual adds,
softmax, dropout, casts) is memory-bound: ``k_elem`` × the activation bytes the step writes, over
the bandwidth. Backward is dgrad (+ wgrad where the weight trains: LoRA skips it for the frozen
base); recomputation adds a forward. QLoRA dequantises each 4-bit weight to 16-bit per pass.

    step = (accumulation + pp − 1) × micro-batch time per stage      (1F1B: the bubble)
           where a micro-batch takes max(GPU time, host launch time) (launches are asynchronous)
         + exposed communication (DP all-reduce / ZeRO-3 gathers beyond what backward hides,
           TP all-reduces per layer, never hidden)
         + optimizer step (memory-bound over the states; CPU Adam + PCIe when offloaded)

The three efficiencies are the only fitted constants (``tools/calibrate.py``, fitted to
``constraints/data/calibration/measured_throughput.csv``; see docs/calibration.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from constraints.config import CODE, ConfigBatch
from constraints.gpus import GpuSpec
from constraints.memory import memory_arrays
from constraints.model_states import model_facts
from constraints.models import ModelSpec
from constraints.params import group_key, inventory, lora_target_groups
from constraints.throughput_constants import (
    ATTENTION_BACKWARD_PER_FORWARD,
    ATTENTION_FLOPS_PER_SCORE,
    BF16_BYTES,
    CAUSAL_SCORE_SHARE,
    CPU_ADAM_PARAMS_PER_S,
    CPU_OP_OVERHEAD_S,
    DEFAULT_INTER_NODE_GB_S,
    DEQUANT_WRITE_BYTES_PER_WEIGHT,
    DP_OVERLAP,
    EAGER_SCORE_BYTES,
    ELEMENTWISE_RECOMPUTE_SHARE,
    ETA_ATTENTION,
    ETA_GEMM,
    FA2_HOPPER_SHARE,
    FLOPS_PER_MAC,
    K_ELEMENTWISE,
    LAUNCH_PASSES_PER_FORWARD,
    LORA_FLOPS_PER_PARAM,
    LORA_MATMUL_PASSES,
    LOSS_BYTES_PER_LOGIT,
    LOSS_PASSES,
    NCCL_EFFICIENCY,
    OPS_PER_LAYER_FORWARD,
    PCIE_EFFICIENCY,
    QUANT_READ_BYTES_PER_WEIGHT,
    RING_ALL_REDUCE_FACTOR,
    STEP_OVERHEAD_S,
    TP_ALL_REDUCES_PER_LAYER,
    TRAINING_FLOPS_PER_PARAM,
)

__all__ = [
    "DEFAULT_INTER_NODE_GB_S",
    "collective_seconds",
    "intra_node_bandwidth",
    "model_gemms",
    "throughput_arrays",
]


@dataclass(frozen=True)
class Gemm:
    """A linear of the model: ``layers × per_layer`` weight instances of d_in × d_out, each
    multiplying ``token_share`` of the micro-batch's tokens (k/E for a routed expert)."""

    key: str
    d_in: int
    d_out: int
    layers: int
    per_layer: int
    token_share: float
    quantizable: bool

    @property
    def instances(self) -> int:
        return self.layers * self.per_layer

    @property
    def params_per_token(self) -> float:
        """Weight elements one token multiplies by in this group."""
        return self.d_in * self.d_out * self.instances * self.token_share


@cache
def model_gemms(spec: ModelSpec) -> tuple[Gemm, ...]:
    inv = inventory(spec)
    if spec.arch == "raw":
        h = max(spec.hidden, 1)
        per_layer = (spec.raw_params or 0) / max(spec.layers, 1)
        return (Gemm("raw", h, max(1, int(per_layer // h)), spec.layers, 1, 1.0, True),)
    out: list[Gemm] = []
    for g in inv.groups:
        if not g.is_linear:
            continue
        layers = inv.blocks[g.block] if g.block else 1
        share = spec.experts_per_token / g.per_block if g.role == "expert" else 1.0
        out.append(
            Gemm(
                group_key(spec, g.name, g.block),
                g.d_in,
                g.d_out,
                layers,
                g.per_block,
                share,
                bool(g.block),
            )
        )
    if spec.arch != "encoder":
        out.append(Gemm("lm_head", spec.hidden, spec.vocab, 1, 1, 1.0, False))
    return tuple(out)


def _gemm_time(
    flops: np.ndarray, nbytes: np.ndarray, peak: np.ndarray, bw: float, eta: float
) -> np.ndarray:
    return np.maximum(flops / (peak * eta), nbytes / bw)


def _peak_flops(gpu: GpuSpec, batch: ConfigBatch) -> np.ndarray:
    bf16 = gpu.bf16_tflops or gpu.fp16_tflops
    fp16 = gpu.fp16_tflops or bf16
    fp32 = gpu.tf32_tflops or gpu.fp32_tflops
    fp8 = gpu.fp8_tflops or bf16
    peak = np.where(batch.compute_bytes >= 4, fp32, np.where(batch.compute_is_fp16, fp16, bf16))
    peak = np.where(batch.compute_is_fp8, fp8, peak)
    return np.maximum(peak, 1e-3) * 1e12


def intra_node_bandwidth(gpu: GpuSpec) -> float:
    """Bytes/s a GPU moves to its node's peers: NVLink where it has one, else PCIe."""
    intra = gpu.interconnect_gb_s if gpu.interconnect_gb_s > 0 else gpu.pcie_gb_s * PCIE_EFFICIENCY
    return intra * 1e9 * NCCL_EFFICIENCY


def collective_seconds(
    volume: np.ndarray,
    ranks: np.ndarray,
    ranks_per_node: np.ndarray,
    intra: float,
    inter: float,
) -> np.ndarray:
    """Time of a ring-style collective whose per-rank traffic is ``volume`` × (n − 1)/n.

    Hierarchical (as NCCL runs across nodes): the ranks of one node exchange over NVLink/PCIe,
    and only the share that belongs to other nodes crosses each GPU's network link:
    ``max(volume·(g−1)/g / intra, volume·(N−1)/N / inter)`` for g ranks per node and N nodes.
    """
    g = np.maximum(np.minimum(ranks_per_node, ranks), 1.0)
    nodes = np.maximum(ranks / g, 1.0)
    t_intra = volume * (g - 1.0) / g / intra
    t_inter = volume * (nodes - 1.0) / nodes / inter
    return np.where(ranks > 1, np.maximum(t_intra, t_inter), 0.0)


def throughput_arrays(
    spec: ModelSpec,
    batch: ConfigBatch,
    gpu: GpuSpec,
    *,
    gpus_per_node: int = 8,
    inter_node_gb_s: float = DEFAULT_INTER_NODE_GB_S,
    memory: dict[str, np.ndarray] | None = None,
    eta_gemm: float = ETA_GEMM,
    eta_attention: float = ETA_ATTENTION,
    k_elementwise: float = K_ELEMENTWISE,
) -> dict[str, np.ndarray]:
    """Step time (s) and its parts, tokens/s (all GPUs), MFU and $ per million tokens."""
    n = len(batch)
    mem = memory if memory is not None else memory_arrays(spec, batch, gpu)
    f = model_facts(spec)
    peak = _peak_flops(gpu, batch)
    bw = gpu.bandwidth_gb_s * 1e9
    tp = batch.tp.astype(np.float64)
    pp = batch.pp.astype(np.float64)
    dp = batch.dp.astype(np.float64)
    T = (batch.micro_batch * batch.seq_len).astype(np.float64)  # tokens per micro-batch per replica
    s = batch.seq_len.astype(np.float64)
    b_c = batch.compute_bytes
    full_ft = ~batch.is_lora
    is_q = batch.quant != CODE["quant"]["none"]
    ckpt_full = batch.checkpointing == CODE["checkpointing"]["full"]
    ckpt_sel = batch.checkpointing == CODE["checkpointing"]["selective"]
    recompute = np.where(ckpt_full, 1.0, 0.0)

    # ---- matmuls ----
    targeted: dict[int, set[str]] = {}
    if batch.is_lora.any() and spec.arch != "raw":
        for t, name in enumerate(batch.target_names):
            targeted[t] = {group_key(spec, g.name, g.block) for g in lora_target_groups(spec, name)}
    t_fwd = np.zeros(n)
    t_bwd = np.zeros(n)
    t_dequant = np.zeros(n)
    t_lora = np.zeros(n)
    rank = batch.rank.astype(np.float64)
    for g in model_gemms(spec):
        tokens = T * g.token_share
        flops = FLOPS_PER_MAC * tokens * g.d_in * g.d_out / tp
        nbytes = g.d_in * g.d_out * BF16_BYTES / tp + tokens * (g.d_in + g.d_out) * b_c
        t_inst = _gemm_time(flops, nbytes, peak, bw, eta_gemm)
        t_fwd += g.instances * t_inst
        t_bwd += g.instances * t_inst * (1.0 + full_ft)  # dgrad, and wgrad where the weight trains
        if g.quantizable:
            # bitsandbytes dequantises the whole weight to 16-bit per pass (read 4-bit, write 16-bit)
            deq = (
                g.instances
                * g.d_in
                * g.d_out
                * (QUANT_READ_BYTES_PER_WEIGHT + DEQUANT_WRITE_BYTES_PER_WEIGHT)
                / tp
                / bw
            )
            t_dequant += np.where(is_q, deq * (2.0 + recompute), 0.0)
        for t, keys in targeted.items():
            if g.key not in keys:
                continue
            sel = batch.is_lora & (batch.targets == t)
            ad_flops = FLOPS_PER_MAC * tokens * rank * (g.d_in + g.d_out)
            ad_bytes = tokens * (g.d_in + g.d_out + 2.0 * rank) * b_c
            ad = g.instances * _gemm_time(ad_flops, ad_bytes, peak, bw, eta_gemm)
            t_lora += np.where(sel, ad * (LORA_MATMUL_PASSES + recompute), 0.0)

    # ---- attention ----
    if spec.arch == "raw":
        attn_flops = np.zeros(n)
    else:
        causal = CAUSAL_SCORE_SHARE if spec.arch != "encoder" else 1.0
        layers_attn = spec.total_layers + (spec.layers if spec.arch == "encoder-decoder" else 0)
        attn_flops = ATTENTION_FLOPS_PER_SCORE * T * s * spec.q_width * causal * layers_attn / tp
    eager = batch.attention == CODE["attention"]["eager"]
    hopper = gpu.sm is not None and 9.0 <= gpu.sm < 10.0
    t_attn_fwd = attn_flops / (peak * eta_attention * (FA2_HOPPER_SHARE if hopper else 1.0))
    s2_bytes = np.where(eager, T * s * spec.heads * EAGER_SCORE_BYTES * spec.total_layers / tp, 0.0)
    t_attn_fwd = t_attn_fwd + s2_bytes / bw
    t_attn_bwd = ATTENTION_BACKWARD_PER_FORWARD * t_attn_fwd
    attn_recompute = np.where(ckpt_full | (ckpt_sel & eager), t_attn_fwd, 0.0)

    # ---- elementwise (memory-bound) ----
    act = mem["activations_written"]  # the whole model, one micro-batch
    t_elem = k_elementwise * act / bw * (1.0 + ELEMENTWISE_RECOMPUTE_SHARE * recompute)
    loss_bytes = np.where(
        spec.arch == "encoder", 0.0, T * spec.vocab / tp * LOSS_BYTES_PER_LOGIT * LOSS_PASSES
    )
    t_loss = loss_bytes / bw

    compute = (
        t_fwd * (1.0 + recompute)
        + t_bwd
        + t_attn_fwd
        + t_attn_bwd
        + attn_recompute
        + t_elem
        + t_loss
        + t_dequant
        + t_lora
    )
    launch = (
        spec.total_layers
        * OPS_PER_LAYER_FORWARD
        * (LAUNCH_PASSES_PER_FORWARD + recompute)
        * CPU_OP_OVERHEAD_S
    )
    stage = np.maximum(compute, launch) / pp
    accum = batch.grad_accum.astype(np.float64)
    t_micro_total = (accum + pp - 1.0) * stage

    # ---- communication ----
    intra = intra_node_bandwidth(gpu)
    inter = min(inter_node_gb_s * 1e9 * NCCL_EFFICIENCY, intra)
    p_train = mem["trainable"]
    grad_bytes = p_train * batch.grad_bytes / tp / pp
    weight_bytes = f.total * np.minimum(batch.weight_bytes, BF16_BYTES) / tp / pp
    zero3 = batch.zero == 3
    # data-parallel ranks of one node: tensor/pipeline groups fill a node first (Megatron order)
    dp_per_node = np.maximum(np.floor(gpus_per_node / (tp * pp)), 1.0)
    # DDP / ZeRO-1/2: all-reduce (= reduce-scatter + all-gather) of the gradients once per step;
    # ZeRO-3 / FSDP: all-gather the weights for forward and backward and reduce-scatter the
    # gradients, every micro-batch
    dp_volume = np.where(zero3, accum * (2.0 * weight_bytes + grad_bytes), 2.0 * grad_bytes)
    dp_comm = collective_seconds(dp_volume, dp, dp_per_node, intra, inter)
    hide = DP_OVERLAP * np.where(zero3, accum * stage * pp, (t_bwd + t_attn_bwd) / pp)
    dp_exposed = np.maximum(0.0, dp_comm - hide)
    # tensor parallel: 2 all-reduces of the activations per layer forward, 2 backward (Megatron),
    # inside a node, not overlapped
    tp_volume = (
        TP_ALL_REDUCES_PER_LAYER
        * spec.layers
        / pp
        * RING_ALL_REDUCE_FACTOR
        * T
        * spec.hidden
        * b_c
        * (1.0 + recompute / 2)
    )
    tp_comm = collective_seconds(tp_volume, tp, tp, intra, inter)
    tp_exposed = tp_comm * (accum + pp - 1.0)
    # pipeline: activations sent to the next stage (across nodes when stages span them)
    pp_link = np.where(batch.gpus > gpus_per_node, inter, intra)
    pp_comm = np.where(pp > 1, 2.0 * T * spec.hidden * b_c * accum / pp_link, 0.0)

    # ---- optimizer step ----
    local = p_train / tp / pp / np.where(batch.zero >= 1, dp, 1.0)
    opt_bytes = local * (
        2.0 * np.where(batch.is_lora, batch.adapter_bytes, batch.weight_bytes)
        + batch.grad_bytes
        + 2.0 * batch.state_bytes * 2.0
        + 2.0 * batch.master_bytes
    )
    offload = batch.offload != CODE["offload"]["none"]
    offload_all = batch.offload == CODE["offload"]["all"]
    pcie = gpu.pcie_gb_s * 1e9 * PCIE_EFFICIENCY
    t_opt = np.where(
        offload,
        local / CPU_ADAM_PARAMS_PER_S + local * (batch.grad_bytes + 2.0) / pcie,
        opt_bytes / bw,
    )
    t_param_stream = np.where(
        offload_all, accum * 2.0 * weight_bytes / np.maximum(dp, 1) / pcie, 0.0
    )
    # paged optimizer states live in unified memory: what the card has no room for is paged out
    # to the host and back over PCIe at every step
    paged = mem["paged_optimizer"]
    room = np.maximum(gpu.memory_bytes - mem["total"], 0.0)
    t_paging = 2.0 * np.maximum(paged - room, 0.0) / pcie
    # stepped inside backward, the page migrations overlap the backward compute
    t_paging = np.where(
        batch.opt_in_bwd, np.maximum(t_paging - (t_bwd + t_attn_bwd), 0.0), t_paging
    )
    t_opt = t_opt + t_paging

    step = (
        t_micro_total + dp_exposed + tp_exposed + pp_comm + t_opt + t_param_stream + STEP_OVERHEAD_S
    )
    tokens_per_step = batch.micro_batch * accum * dp * s
    tokens_per_s = tokens_per_step / step
    model_flops_per_token = TRAINING_FLOPS_PER_PARAM * _matmul_params(spec) + (
        attn_flops / np.maximum(T, 1) * tp * 3.0
    )
    lora_ratio = np.where(batch.is_lora, LORA_FLOPS_PER_PARAM / TRAINING_FLOPS_PER_PARAM, 1.0)
    useful = model_flops_per_token * lora_ratio
    gpus = batch.gpus.astype(np.float64)
    mfu = useful * tokens_per_s / (gpus * peak)
    price = gpu.usd_per_gpu_hour
    usd_per_mtok = (gpus * price / 3600.0) / tokens_per_s * 1e6 if price else np.full(n, np.nan)
    return {
        "step_time_s": step,
        "tokens_per_s": tokens_per_s,
        "tokens_per_step": tokens_per_step,
        "mfu": mfu,
        "usd_per_mtok": usd_per_mtok,
        "compute_s": t_micro_total,
        "bubble_s": (pp - 1.0) * stage,
        "dp_comm_s": dp_exposed,
        "tp_comm_s": tp_exposed,
        "optimizer_s": t_opt,
        "offload_s": t_param_stream,
        "flops_per_token": useful,
    }


@cache
def _matmul_params(spec: ModelSpec) -> float:
    """Weight elements a token multiplies by (routed experts by k/E), the head included."""
    return sum(g.params_per_token for g in model_gemms(spec))
