"""Throughput constants: the efficiencies fitted to measured step times, and the traffic and
pass counts of the throughput model (:mod:`constraints.throughput`), each with its source."""

from __future__ import annotations

# The three efficiencies below are fitted together by tools/calibrate.py (coordinate search over
# a grid, median abs log error) to the 227 throughput rows fitplan uses from
# constraints/data/calibration/measured_throughput.csv (llm-foundry MPT 125M-70B on A100/H100,
# torchtune Llama on A100/RTX 4090); residuals in docs/calibration.md. Before the fit they were
# guesses (0.72, 0.45, 4.0).
#: Fraction of dense peak a large GEMM reaches (cuBLAS bf16 on A100/H100). Fitted: 0.70.
ETA_GEMM = 0.70
#: Fraction of dense peak FlashAttention reaches (forward and backward together). Fitted: 0.325
#: (the llm-foundry rows ran FlashAttention 1/2 under torch 2.1; long sequences are slower).
ETA_ATTENTION = 0.325
#: FlashAttention-2 reaches a smaller share of a Hopper GPU's peak than of an Ampere/Ada one:
#: "only 35% utilization of the H100" (Shah, Dao et al., FlashAttention-3, 2024) against 50–73 %
#: of the A100's peak (Dao, FlashAttention-2, 2023): about 0.56 of the Ampere share. Not fitted.
FA2_HOPPER_SHARE = 0.35 / 0.62
#: Elementwise traffic per step as a multiple of the activation bytes the forward writes (write +
#: read in forward, read + write of their gradients in backward ≈ 4; unfused eager kernels and
#: the temporaries nothing saves read and write more). Fitted: 9.5.
K_ELEMENTWISE = 9.5
#: Fraction of the link's peak that NCCL collectives reach (bus bandwidth).
NCCL_EFFICIENCY = 0.75
#: Share of the data-parallel gradient communication that backward compute can hide.
DP_OVERLAP = 0.9
#: DeepSpeedCPUAdam update rate per rank, parameters per second (AVX512, many cores; DeepSpeed
#: ZeRO-Offload paper reports ~1–2 B params/s per node).
CPU_ADAM_PARAMS_PER_S = 1.0e9
#: Fixed cost per optimizer step (launches, zero_grad, data loader, logging), seconds.
STEP_OVERHEAD_S = 0.01
#: Host-side cost of one eager PyTorch op (dispatch + kernel launch), seconds. The host issues
#: kernels asynchronously, so a micro-batch takes max(GPU time, ops × this): small models and
#: small micro-batches are launch-bound (PyTorch dispatcher overhead is ~5–20 µs per op).
CPU_OP_OVERHEAD_S = 10e-6
#: Kernels per transformer layer in one eager forward pass (HF Llama-style: norms, projections,
#: rotary, attention, activation, residuals). Backward launches about twice as many.
OPS_PER_LAYER_FORWARD = 60
#: Default inter-node bandwidth per GPU when a fleet does not say (400 Gb/s InfiniBand / GPU).
DEFAULT_INTER_NODE_GB_S = 50.0

# ---- not fitted: traffic and pass counts, each with where it comes from ------------------------

#: Share of a PCIe link's peak that host<->device copies reach (pinned memory, large transfers:
#: ~25 of 32 GB/s on PCIe 4.0 x16 in NVIDIA's bandwidthTest). Estimate, not fitted.
PCIE_EFFICIENCY = 0.8
#: Dequantising a quantised weight for its matmul reads the packed weight (NF4 with
#: double-quantised constants: 4.127 bits ≈ 0.52 B, rounded up for the block constants read
#: beside it: 0.6 B) and writes it in 16-bit (2 B) (bitsandbytes dequantize_4bit). Estimate.
QUANT_READ_BYTES_PER_WEIGHT = 0.6
DEQUANT_WRITE_BYTES_PER_WEIGHT = 2.0
#: A LoRA adapter's small matmuls run forward, input-gradient and weight-gradient: 3 passes
#: (+1 forward when checkpointing recomputes).
LORA_MATMUL_PASSES = 3.0
#: Kernel launches per step in forward units: forward 1, backward ≈ 2 (OPS_PER_LAYER_FORWARD).
LAUNCH_PASSES_PER_FORWARD = 3.0
#: Memory traffic of eager attention per score element per layer, bytes: the fp32 scores written
#: and read by softmax (4 + 4) and the 16-bit probabilities written (2). Estimate, not fitted.
EAGER_SCORE_BYTES = 10.0
#: Attention backward / forward time: 5 matmuls against 2 (FlashAttention-2, Dao 2023, sec. 3.1;
#: the backward recomputes the scores).
ATTENTION_BACKWARD_PER_FORWARD = 2.5
#: Share of the elementwise traffic that a recomputed forward repeats (the forward's half of the
#: write + read forward, read + write backward traffic; see K_ELEMENTWISE).
ELEMENTWISE_RECOMPUTE_SHARE = 0.5
#: Cross-entropy traffic per logit: fp32 (4 B) logits written, read by log-softmax, their
#: gradient written and read by the head's backward: 4 passes.
LOSS_BYTES_PER_LOGIT = 4.0
LOSS_PASSES = 4.0

# ---- FLOP and byte counts (arithmetic, not fitted) --------------------------------------------

#: A multiply-accumulate is 2 FLOPs.
FLOPS_PER_MAC = 2.0
#: Bytes of a 16-bit element (weights read by a GEMM, weights and gradients on the wire).
BF16_BYTES = 2.0
#: Attention scores per (query, key): QKᵀ and PV are 2 matmuls × 2 FLOPs per score.
ATTENTION_FLOPS_PER_SCORE = 4.0
#: A causal mask leaves half of the s² scores to compute (flash kernels skip the masked blocks).
CAUSAL_SCORE_SHARE = 0.5
#: Training FLOPs per parameter per token: 2 forward + 4 backward (Kaplan et al. 2020, 6N).
TRAINING_FLOPS_PER_PARAM = 6.0
#: LoRA's frozen base has no weight gradient: 2 forward + 2 input-gradient FLOPs per parameter.
LORA_FLOPS_PER_PARAM = 4.0
#: Megatron tensor parallelism: 2 all-reduces per layer forward and 2 backward (Shoeybi 2019).
TP_ALL_REDUCES_PER_LAYER = 4.0
#: A ring all-reduce moves 2 × the buffer (reduce-scatter + all-gather), (n−1)/n aside.
RING_ALL_REDUCE_FACTOR = 2.0
