"""Step time, tokens/s, MFU and cost of a training configuration: a roofline per kernel.

Every matmul of the model (from the parameter inventory) runs at
``max(FLOPs / (peak × η_gemm), bytes / bandwidth)`` — a small micro-batch or a small hidden size
makes it memory-bound, as real kernels are. Flash attention runs at ``peak × η_attn``; eager
attention adds the s² matrices' traffic. The elementwise work (norms, activations, residual adds,
softmax, dropout, casts) is memory-bound: ``k_elem`` × the activation bytes the step writes, over
the bandwidth. Backward is dgrad (+ wgrad where the weight trains: LoRA skips it for the frozen
base); recomputation adds a forward. QLoRA dequantises each 4-bit weight to 16-bit per pass.

    step = (accumulation + (pp − 1)/vp) × micro-batch time per stage  (interleaved 1F1B bubble)
           where a micro-batch takes max(GPU time, host launch time) (launches are asynchronous)
         + exposed communication (DP all-reduce / ZeRO-3 gathers beyond what backward hides;
           TP all-reduces per layer, hidden behind the GEMMs only with comm overlap / async TP;
           collectives from topology: constraints/collectives.py)
         + optimizer step (memory-bound over the states; CPU Adam + PCIe when offloaded)

The kernel stack (eager / compile / te / liger: constraints/kernels.py) sets the elementwise
traffic, the launches and the attention kernel; fp8 recipes (constraints/fp8.py) say which GEMMs
run at the fp8 rate and what scaling costs. The three efficiencies are the only fitted constants (``tools/calibrate.py``, fitted to
``constraints/data/calibration/measured_throughput.csv``; see docs/calibration.md).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from constraints.collectives import collective_seconds, intra_node_bandwidth, nvlink_domain_size
from constraints.config import CODE
from constraints.config_batch import ConfigBatch
from constraints.dequant import dequant_bytes_per_weight, dequant_launches
from constraints.eager_traffic import eager_elementwise_factors, eager_recompute_shares
from constraints.fp8 import fp8_column
from constraints.gated_deltanet import delta_rule_flops_per_token
from constraints.gemms import model_gemms
from constraints.gpus import GpuSpec
from constraints.kernels import attention_generation_scale, attention_share, stack_column
from constraints.matmul_ceiling import gemm_ceiling_scale
from constraints.memory import memory_arrays
from constraints.model_states import model_facts
from constraints.models import ModelSpec
from constraints.optimizer_step import optimizer_step_seconds
from constraints.parallel_activations import (
    per_op_sac,
    sequence_parallel,
)
from constraints.params import group_key, lora_target_groups
from constraints.recompute import gemm_recompute
from constraints.throughput_constants import (
    ATTENTION_BACKWARD_PER_FORWARD,
    ATTENTION_FLOPS_PER_SCORE,
    BF16_BYTES,
    CAUSAL_SCORE_SHARE,
    CPU_OP_OVERHEAD_S,
    DEFAULT_INTER_NODE_GB_S,
    DP_OVERLAP,
    EAGER_SCORE_BYTES,
    ELEMENTWISE_RECOMPUTE_SHARE,
    ETA_ATTENTION,
    ETA_GEMM,
    FLOPS_PER_MAC,
    FP8_BYTES,
    K_ELEMENTWISE,
    LAUNCH_PASSES_PER_FORWARD,
    LORA_DROPOUT_OPS,
    LORA_FLOPS_PER_PARAM,
    LORA_MATMUL_PASSES,
    LORA_OPS_PER_ADAPTED_LINEAR,
    LORA_OPS_PER_ADAPTED_LINEAR_FUSED,
    LOSS_BYTES_PER_LOGIT,
    LOSS_PASSES,
    NCCL_EFFICIENCY,
    RING_ALL_REDUCE_FACTOR,
    STEP_OVERHEAD_S,
    TP_ALL_REDUCES_PER_LAYER,
    TP_OVERLAP_SHARE,
    TRAINING_FLOPS_PER_PARAM,
)

__all__ = [
    "DECOMPOSITION",
    "DEFAULT_INTER_NODE_GB_S",
    "collective_seconds",
    "intra_node_bandwidth",
    "model_gemms",
    "throughput_arrays",
]


#: The step's parts that ``throughput_arrays`` returns, seconds per optimizer step (GEMM groups
#: come beside them as ``gemm:<group>_s``); they add up to ``step_time_s``.
DECOMPOSITION = (
    "gemm_s",
    "lora_s",
    "attention_s",
    "elementwise_s",
    "loss_s",
    "fp8_cast_s",
    "dequant_s",
    "launch_s",
    "bubble_s",
    "dp_comm_s",
    "tp_comm_s",
    "pp_comm_s",
    "optimizer_s",
    "offload_s",
    "overhead_s",
)


def _gemm_time(
    flops: np.ndarray, nbytes: np.ndarray, peak: np.ndarray, bw: float, eta: float | np.ndarray
) -> np.ndarray:
    return np.maximum(flops / (peak * eta), nbytes / bw)


def _peak_flops(gpu: GpuSpec, batch: ConfigBatch, *, fp8: bool = True) -> np.ndarray:
    """Dense peak of each row's compute dtype; ``fp8=False``: the 16-bit peak where the row is
    fp8 (attention and the head stay bf16 under every fp8 recipe)."""
    bf16 = gpu.bf16_tflops or gpu.fp16_tflops
    fp16 = gpu.fp16_tflops or bf16
    fp32 = gpu.tf32_tflops or gpu.fp32_tflops
    fp8_peak = gpu.fp8_tflops or bf16
    peak = np.where(batch.compute_bytes >= 4, fp32, np.where(batch.compute_is_fp16, fp16, bf16))
    if fp8:
        peak = np.where(batch.compute_is_fp8, fp8_peak, peak)
    return np.maximum(peak, 1e-3) * 1e12


def throughput_arrays(
    spec: ModelSpec,
    batch: ConfigBatch,
    gpu: GpuSpec,
    *,
    gpus_per_node: int = 8,
    inter_node_gb_s: float = DEFAULT_INTER_NODE_GB_S,
    nvlink_domain: int | None = None,
    memory: dict[str, np.ndarray] | None = None,
    eta_gemm: float = ETA_GEMM,
    eta_attention: float = ETA_ATTENTION,
    k_elementwise: float | None = None,
) -> dict[str, np.ndarray]:
    """Step time (s) and its parts (DECOMPOSITION), tokens/s (all GPUs), MFU and $ per million
    tokens. ``inter_node_gb_s``: network bandwidth per GPU (one NIC each); ``nvlink_domain``: GPUs
    per NVLink domain when it spans nodes (default: the GPU row's, else the node);
    ``k_elementwise`` overrides the eager stack's elementwise factor (for the fit)."""
    n = len(batch)
    # ETA_GEMM is the A100's share of peak; each GPU's measured matmul ceiling scales it
    eta_gemm = eta_gemm * gemm_ceiling_scale(gpu)
    mem = memory if memory is not None else memory_arrays(spec, batch, gpu)
    f = model_facts(spec)
    peak = _peak_flops(gpu, batch)
    peak16 = _peak_flops(gpu, batch, fp8=False)
    bw = gpu.bandwidth_gb_s * 1e9
    tp = batch.tp.astype(np.float64)
    pp = batch.pp.astype(np.float64)
    dp = batch.dp.astype(np.float64)
    vp = batch.virtual_stages.astype(np.float64)
    T = (batch.micro_batch * batch.seq_len).astype(np.float64)  # tokens per micro-batch per replica
    s = batch.seq_len.astype(np.float64)
    b_c = batch.compute_bytes
    full_ft = ~batch.is_lora
    is_fp8 = batch.compute_is_fp8
    ckpt_full = batch.checkpointing == CODE["checkpointing"]["full"]
    ckpt_sel = batch.checkpointing == CODE["checkpointing"]["selective"]
    recompute = np.where(ckpt_full, 1.0, 0.0)
    # torchtitan's per-op selective checkpointing replays the block's forward in backward, with
    # every other matmul and the attention read from its cache (constraints/parallel_activations.py)
    op_sac = per_op_sac(spec, batch)
    replay = np.where(op_sac, 1.0, recompute)  # the forward's pointwise ops and launches rerun
    eager_stack = batch.kernels == CODE["kernels"]["eager"]
    # eager kernels differ by layer code (HF Llama's fp32 RMSNorm chain against MPT's one-kernel
    # LayerNorm): the traced traffic of the row's model code (constraints/eager_traffic.py)
    k_fitted = K_ELEMENTWISE if k_elementwise is None else k_elementwise
    k_eager = np.array(eager_elementwise_factors(spec, k_fitted))[batch.model_code]
    k_elem = np.where(eager_stack, k_eager, stack_column(batch.kernels, "elementwise_factor"))
    replayed_share = np.where(
        eager_stack,
        np.array(eager_recompute_shares(spec, ELEMENTWISE_RECOMPUTE_SHARE))[batch.model_code],
        ELEMENTWISE_RECOMPUTE_SHARE,
    )
    fp8_gemm_share = np.where(is_fp8, fp8_column(batch.fp8_recipe, "gemm_share"), 1.0)
    cast_bytes = fp8_column(batch.fp8_recipe, "cast_bytes_per_element")
    transpose_bytes = fp8_column(batch.fp8_recipe, "transpose_bytes_per_element")

    # ---- matmuls (the transformer's linears run at the fp8 rate under fp8; the head stays 16-bit)
    targeted: dict[int, set[str]] = {}
    if batch.is_lora.any() and spec.arch != "raw":
        for t, name in enumerate(batch.target_names):
            targeted[t] = {group_key(spec, g.name, g.block) for g in lora_target_groups(spec, name)}
    out: dict[str, np.ndarray] = {}
    t_fwd = np.zeros(n)
    t_regemm = np.zeros(n)  # the recomputed forward's matmuls
    t_bwd = np.zeros(n)
    t_dequant = np.zeros(n)
    t_lora = np.zeros(n)
    t_cast = np.zeros(n)
    adapted_ops = np.zeros(n)  # PEFT's extra kernels per forward, all adapted linears
    dequant_ops = np.zeros(n)  # dequantisation kernels per micro-batch step
    mb = batch.micro_batch
    lora_ops = np.where(eager_stack, LORA_OPS_PER_ADAPTED_LINEAR, LORA_OPS_PER_ADAPTED_LINEAR_FUSED)
    rank = batch.rank.astype(np.float64)
    for g in model_gemms(spec):
        tokens = T * g.token_share
        in_fp8 = is_fp8 & g.quantizable
        g_peak = np.where(in_fp8, peak, peak16)
        flops = FLOPS_PER_MAC * tokens * g.d_in * g.d_out / tp
        w_bytes = np.where(in_fp8, FP8_BYTES, BF16_BYTES)
        nbytes = g.d_in * g.d_out * w_bytes / tp + tokens * (g.d_in + g.d_out) * b_c
        t_inst = _gemm_time(
            flops, nbytes, g_peak, bw, eta_gemm * np.where(in_fp8, fp8_gemm_share, 1.0)
        )
        passes_bwd = 1.0 + full_ft  # dgrad, and wgrad where the weight trains
        # forward reruns: full checkpointing's (the blocks' matmuls, less the one its early stop
        # skips) or per-op SAC's (constraints/recompute.py)
        g_recompute = gemm_recompute(spec, g, batch, ckpt_full, op_sac, in_fp8, targeted)
        t_group = g.instances * t_inst * (1.0 + g_recompute + passes_bwd)
        out[f"gemm:{g.key}_s"] = t_group
        t_fwd += g.instances * t_inst
        t_regemm += g.instances * t_inst * g_recompute
        t_bwd += g.instances * t_inst * passes_bwd
        # fp8 scaling: forward input and weight, backward output gradient; the transposed copies
        # the weight-gradient GEMM reads (per pass, each forward repeated when recomputing)
        act_elems = tokens * (g.d_in * (1.0 + g_recompute) + g.d_out) / tp
        w_elems = (
            g.d_in
            * g.d_out
            / tp
            / np.where(fp8_column(batch.fp8_recipe, "fp8_all_gather") > 0, dp, 1.0)
        )
        cast = (
            act_elems * cast_bytes
            + tokens * (g.d_in + g.d_out) / tp * transpose_bytes * full_ft
            + w_elems * cast_bytes * (2.0 + g_recompute)
        )
        t_cast += np.where(in_fp8, g.instances * cast / bw, 0.0)
        if g.quantizable:
            # the quantised base's library unpacks each weight to 16-bit (constraints/dequant.py)
            q_weights = g.instances * g.d_in * g.d_out / tp
            t_dequant += q_weights * dequant_bytes_per_weight(batch.quant, recompute, mb) / bw
            dequant_ops += g.instances * dequant_launches(batch.quant, recompute)
        for t, keys in targeted.items():
            if g.key not in keys:
                continue
            sel = batch.is_lora & (batch.targets == t)
            ad_flops = FLOPS_PER_MAC * tokens * rank * (g.d_in + g.d_out)
            ad_bytes = tokens * (g.d_in + g.d_out + 2.0 * rank) * b_c
            ad = g.instances * _gemm_time(ad_flops, ad_bytes, peak16, bw, eta_gemm)
            t_lora += np.where(sel, ad * (LORA_MATMUL_PASSES + recompute), 0.0)
            adapted_ops += np.where(sel, g.instances * lora_ops, 0.0)
            adapted_ops += np.where(sel & batch.lora_dropout, g.instances * LORA_DROPOUT_OPS, 0.0)

    # ---- attention (bf16 under every fp8 recipe); gated DeltaNet layers run the delta rule ----
    self_attn = spec.total_layers - spec.layers + spec.attention_layers
    if spec.arch == "raw":
        attn_flops = np.zeros(n)
    else:
        causal = CAUSAL_SCORE_SHARE if spec.arch != "encoder" else 1.0
        attn_flops = ATTENTION_FLOPS_PER_SCORE * T * s * spec.attention_q_widths * causal / tp
        attn_flops = attn_flops + T * delta_rule_flops_per_token(spec) / tp
    eager = batch.attention == CODE["attention"]["eager"]
    eta_attn = eta_attention * attention_share(gpu, batch.kernels)
    eta_attn = eta_attn * attention_generation_scale(
        gpu,
        batch.kernels,
        batch.attention,
        batch.attention_kernel,
        s,
        spec.head_dim,
        spec.arch != "encoder",
        eta_attention,
    )
    t_attn_fwd = attn_flops / (peak16 * eta_attn)
    s2_bytes = np.where(eager, T * s * spec.heads * EAGER_SCORE_BYTES * self_attn / tp, 0.0)
    t_attn_fwd = t_attn_fwd + s2_bytes / bw
    t_attn_bwd = ATTENTION_BACKWARD_PER_FORWARD * t_attn_fwd
    attn_recompute = np.where(ckpt_full | (ckpt_sel & eager), t_attn_fwd, 0.0)
    t_attn = t_attn_fwd + t_attn_bwd + attn_recompute

    # ---- elementwise (memory-bound) ----
    act = mem["activations_written"]  # the whole model, one micro-batch
    t_elem = k_elem * act / bw * (1.0 + replayed_share * replay)
    logits = stack_column(batch.kernels, "logits_materialised") > 0
    loss_bytes = np.where(
        (spec.arch == "encoder") | ~logits,
        0.0,
        T * spec.vocab / tp * LOSS_BYTES_PER_LOGIT * LOSS_PASSES,
    )
    t_loss = loss_bytes / bw

    t_gemm = t_fwd + t_regemm + t_bwd
    compute = t_gemm + t_attn + t_elem + t_loss + t_dequant + t_lora + t_cast
    launch = (
        (spec.total_layers * stack_column(batch.kernels, "ops_per_layer_forward") + adapted_ops)
        * (LAUNCH_PASSES_PER_FORWARD + replay)
        + dequant_ops
    ) * CPU_OP_OVERHEAD_S
    gpu_or_host = np.maximum(compute, launch)
    stage = gpu_or_host / pp
    accum = batch.grad_accum.astype(np.float64)
    bubble_stages = (pp - 1.0) / vp  # interleaved 1F1B: (pp − 1)/vp stage times
    t_micro_total = (accum + bubble_stages) * stage

    # ---- communication ----
    intra = intra_node_bandwidth(gpu)
    inter = min(inter_node_gb_s * 1e9 * NCCL_EFFICIENCY, intra)
    domain = float(nvlink_domain_size(gpu, gpus_per_node, nvlink_domain))
    p_train = mem["trainable"]
    grad_bytes = p_train * batch.grad_bytes / tp / pp
    gather_bytes = np.where(
        is_fp8 & (fp8_column(batch.fp8_recipe, "fp8_all_gather") > 0),
        FP8_BYTES,
        np.minimum(batch.weight_bytes, BF16_BYTES),
    )
    weight_bytes = f.total * gather_bytes / tp / pp
    zero3 = batch.zero == 3
    # data-parallel ranks of one NVLink domain: tensor/pipeline groups fill it first (Megatron order)
    dp_per_domain = np.maximum(np.floor(domain / (tp * pp)), 1.0)
    # DDP / ZeRO-1/2: all-reduce (= reduce-scatter + all-gather) of the gradients once per step;
    # ZeRO-3 / FSDP: all-gather the weights for forward and backward and reduce-scatter the
    # gradients, every micro-batch
    # ZeRO-2 (DeepSpeed stage_1_and_2.py reduce_ipg_grads; FSDP2 SHARD_GRAD_OP) keeps only its
    # gradient shard, so it reduce-scatters every micro-batch and all-gathers the updated
    # weights once per step
    zero2 = batch.zero == 2
    dp_volume = np.where(
        zero3,
        accum * (2.0 * weight_bytes + grad_bytes),
        np.where(zero2, accum * grad_bytes + weight_bytes, 2.0 * grad_bytes),
    )
    dp_comm = collective_seconds(dp_volume, dp, dp_per_domain, intra, inter)
    hide = DP_OVERLAP * np.where(
        zero3, accum * stage * pp, np.where(zero2, accum, 1.0) * (t_bwd + t_attn_bwd) / pp
    )
    dp_exposed = np.maximum(0.0, dp_comm - hide)
    # tensor parallel: 2 all-reduces of the activations per layer forward, 2 backward (Megatron;
    # sequence parallel's all-gather + reduce-scatter move the same bytes), inside the domain.
    # In units of the forward's collectives: forward 1, backward 1, a recomputed forward 1, and
    # under per-op SAC with sequence parallel the all-gathers (half the forward's bytes) again:
    # torchtitan's save list keeps reduce_scatter_tensor but not all_gather_into_tensor
    # (parallelize_llama.py _save_list, torchtitan 2024-12 to 2025-06), so backward re-gathers
    tp_regather = np.where(op_sac & sequence_parallel(batch), 0.5, 0.0)
    tp_passes = 2.0 + recompute + tp_regather
    tp_volume = (
        TP_ALL_REDUCES_PER_LAYER
        / 2.0  # per forward
        * spec.layers
        / pp
        * RING_ALL_REDUCE_FACTOR
        * T
        * spec.hidden
        * b_c
        * tp_passes
    )
    tp_comm = collective_seconds(tp_volume, tp, np.full(n, domain), intra, inter)
    # comm overlap: the collectives run beside the GEMMs they feed. Megatron's (Transformer
    # Engine userbuffers) pipelines those of forward and backward. PyTorch's async TP is an
    # inductor pass (torch.compile): it fuses all-gather → matmul and matmul → reduce-scatter,
    # and the backward's reduce-scatters follow a sum of dgrads (add → reduce_scatter, which
    # torch/_inductor/fx_passes/micro_pipeline_tp.py find_reduce_scatter_patterns does not
    # match); its authors report forward-pass speed-ups only (~20 % forward, ~8 % end to end,
    # Llama3 70B: "[Distributed w/ TorchTitan] Introducing Async Tensor Parallelism", 2024).
    # So async TP hides the first forward's collectives (1 of the tp_passes units) behind the
    # forward's GEMMs.
    async_tp = batch.kernels == CODE["kernels"]["compile"]
    overlappable_comm = np.where(async_tp, tp_comm / tp_passes, tp_comm)
    overlapping_gemm = np.where(async_tp, t_fwd, t_gemm) / pp
    tp_hidden = np.where(
        batch.tp_overlap, np.minimum(overlappable_comm, TP_OVERLAP_SHARE * overlapping_gemm), 0.0
    )
    tp_exposed = (tp_comm - tp_hidden) * (accum + bubble_stages)
    # pipeline: activations sent to the next stage (across nodes when stages span them), and
    # their gradients back. Under sequence parallel each TP rank holds and sends only its
    # [s/tp, b, h] shard of the stage output (Megatron-Core p2p_communication sends the tensor
    # the stage produced; SP leaves it sequence-sharded; torchtitan's PP stages likewise)
    pp_link = np.where(batch.gpus > domain, inter, intra)
    pp_shard = np.where(sequence_parallel(batch), tp, 1.0)
    pp_comm = np.where(pp > 1, 2.0 * T * spec.hidden * b_c * accum * vp / pp_shard / pp_link, 0.0)

    # ---- optimizer step (on the GPU, or CPU + PCIe when offloaded) ----
    t_opt, t_param_stream = optimizer_step_seconds(
        batch,
        gpu,
        mem,
        local_trainable=p_train / tp / pp / np.where(batch.zero >= 1, dp, 1.0),
        gathered_weight_bytes=weight_bytes,
        backward_s=t_bwd + t_attn_bwd,
        gpus_per_node=gpus_per_node,
    )
    # the parameters' H2D copies run on the all-gather stream just before each gather: copies and
    # gathers share the compute that hides them (the gathers' share stays dp_comm_s)
    stream_exposed = np.maximum(0.0, dp_comm + t_param_stream - hide) - dp_exposed

    step = (
        t_micro_total + dp_exposed + tp_exposed + pp_comm + t_opt + stream_exposed + STEP_OVERHEAD_S
    )
    tokens_per_step = batch.micro_batch * accum * dp * s
    tokens_per_s = tokens_per_step / step
    model_flops_per_token = TRAINING_FLOPS_PER_PARAM * _matmul_params(spec) + (
        attn_flops / np.maximum(T, 1) * tp * 3.0
    )
    lora_ratio = np.where(batch.is_lora, LORA_FLOPS_PER_PARAM / TRAINING_FLOPS_PER_PARAM, 1.0)
    useful = model_flops_per_token * lora_ratio
    gpus = batch.gpus.astype(np.float64)
    mfu = useful * tokens_per_s / (gpus * peak16)
    price = gpu.usd_per_gpu_hour
    usd_per_mtok = (gpus * price / 3600.0) / tokens_per_s * 1e6 if price else np.full(n, np.nan)
    # the decomposition, per optimizer step: GPU work of the accumulated micro-batches on one
    # stage, the host-launch excess where launches outlast the GPU work, then the bubble
    per_step = accum / pp
    for key in list(out):
        out[key] = out[key] * per_step
    out.update(
        {
            "gemm_s": t_gemm * per_step,
            "lora_s": t_lora * per_step,
            "attention_s": t_attn * per_step,
            "elementwise_s": t_elem * per_step,
            "loss_s": t_loss * per_step,
            "fp8_cast_s": t_cast * per_step,
            "dequant_s": t_dequant * per_step,
            "launch_s": (gpu_or_host - compute) * per_step,
            "bubble_s": bubble_stages * stage,
            "dp_comm_s": dp_exposed,
            "tp_comm_s": tp_exposed,
            "pp_comm_s": pp_comm,
            "optimizer_s": t_opt,
            "offload_s": stream_exposed,
            "overhead_s": np.full(n, STEP_OVERHEAD_S),
        }
    )
    return {
        "step_time_s": step,
        "tokens_per_s": tokens_per_s,
        "tokens_per_step": tokens_per_step,
        "mfu": mfu,
        "usd_per_mtok": usd_per_mtok,
        "compute_s": t_micro_total,
        "flops_per_token": useful,
        **out,
    }


@cache
def _matmul_params(spec: ModelSpec) -> float:
    """Weight elements a token multiplies by (routed experts by k/E), the head included."""
    return sum(g.params_per_token for g in model_gemms(spec))
