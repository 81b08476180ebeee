"""Throughput constants: the efficiencies fitted to measured step times, and the traffic and
pass counts of the throughput model (:mod:`constraints.throughput`), each with its source."""

from __future__ import annotations

# The three efficiencies below are fitted together by tools/calibrate.py (coordinate search over
# a grid, median abs log error) to the 227 throughput rows fitplan uses from
# constraints/data/calibration/measured_throughput.csv (llm-foundry MPT 125M-70B on A100/H100,
# torchtune Llama on A100/RTX 4090); residuals in docs/calibration.md. Before the fit they were
# guesses (0.72, 0.45, 4.0). Refitted under issue 12's physics (collectives over the NICs, fp8
# attention in bf16, kernel stacks) the search stays here; rows 400-422 (torchtitan, torchao) are
# held out of the fit and test it (docs/steptime.md).
#: Fraction of dense peak a large GEMM reaches on the A100 (cuBLAS bf16). Fitted: 0.725 (0.70 while
#: full checkpointing was charged a whole recomputed forward of every linear, the head included;
#: constraints/recompute.py). Other GPUs scale it by their measured matmul ceiling relative to the
#: A100's (constraints/matmul_ceiling.py: H100 SXM × 0.924).
ETA_GEMM = 0.725
#: Fraction of dense peak FlashAttention reaches (forward and backward together). Fitted: 0.325,
#: to the llm-foundry rows, which ran FlashAttention-1 (flash-attn==1.0.9 pinned), so it is the
#: FA1 level; an FA2 row on Ampere/Ada runs FA2's published curve instead
#: (kernels.attention_generation_scale; TrainConfig.attention_kernel).
ETA_ATTENTION = 0.325
#: FlashAttention-2 reaches a smaller share of a Hopper GPU's peak than of an Ampere/Ada one:
#: "only 35% utilization of the H100" (Shah, Dao et al., FlashAttention-3, 2024) against 50–73 %
#: of the A100's peak (Dao, FlashAttention-2, 2023): about 0.56 of the Ampere share. Not fitted.
FA2_HOPPER_SHARE = 0.35 / 0.62
#: FlashAttention-3 (and cuDNN fused attention, which TE runs on Hopper) on Hopper against
#: FlashAttention-2 on Ampere: FA3 reaches 75 % of H100 bf16 peak forward (740 TFLOPS) and its
#: backward is 1.5–1.75× FA2's (Shah, Dao et al. 2024, figs. 5–6); with backward = 2.5 forwards
#: the fwd+bwd share is ≈ 1.77 × FA2-on-Hopper's, i.e. ≈ 1.0 × the Ampere share. Not fitted.
FA3_HOPPER_SHARE = 1.0
#: Elementwise traffic per step as a multiple of the activation bytes the forward writes (write +
#: read in forward, read + write of their gradients in backward ≈ 4; unfused eager kernels and
#: the temporaries nothing saves read and write more). Fitted: 10.5 (9.5 before the recompute
#: above), to the MPT rows; used for
#: their reference layer (HF GPT-2 block) and untraced families. Traced layers (HF Llama, Qwen,
#: Gemma; torchtune; torchtitan) use their traced bytes: constraints/eager_traffic.py.
K_ELEMENTWISE = 10.5
#: Share of the HBM bandwidth that unfused eager PyTorch elementwise kernels reach: Liger-Kernel's
#: benchmark of Hugging Face's LlamaRMSNorm, forward + backward, bf16, 2048 rows, on A100-SXM4-80GB
#: (benchmark/data/all_benchmark_data.csv, 2024-09-03, liger 0.2.1): 1.862 / 3.544 / 6.910 ms at
#: hidden 8192 / 16384 / 32768, against the 2.58 / 5.17 / 10.34 GB its 26 aten ops read and
#: write (traced by tools/trace_elementwise.py's counter on the benchmark's module): 1.39 / 1.46 /
#: 1.50 TB/s of 2.039, i.e. 0.68 / 0.72 / 0.73. Measured, not fitted (constraints/eager_traffic.py).
ETA_EAGER_BANDWIDTH = 0.71
#: The same for a stack that fuses each chain of pointwise ops between two GEMMs into one kernel
#: (torch.compile's inductor; Transformer Engine's fused modules): each saved activation is
#: written and read once forward, its gradient read and written once backward: the 4× floor of
#: K_ELEMENTWISE. Physics estimate, not fitted; checked by the torchtitan compiled/eager pairs
#: (tests/constraints/test_speed_ratios.py).
K_ELEMENTWISE_FUSED = 4.0
#: Liger kernels fuse RMSNorm, RoPE, SwiGLU (each one read + one write) but leave the residual
#: adds, dropout and casts eager: about half-way between eager and fused. Estimate, not fitted.
K_ELEMENTWISE_LIGER = 6.5
#: Kernels per layer per forward when fused (compile / TE): one per fused pointwise region and
#: one per GEMM and attention: norm, QKV, rope, attention, O, add+norm, gate/up, act, down, add ≈ 12;
#: 20 with the casts and reshapes left. Estimate.
OPS_PER_LAYER_FUSED = 20
#: Liger on eager HF: the 60 eager ops less the norms', rotary's and SwiGLU's internals. Estimate.
OPS_PER_LAYER_LIGER = 40
#: A rowwise-scaled fp8 GEMM (torch._scaled_mm with per-row scales: a CUTLASS kernel applying
#: the scales in its epilogue) against a tensorwise one on H100. Estimate, checked by the torchao
#: tensorwise/rowwise pair (docs/source/workflows/training.md, 8×H100 Llama3-8B).
FP8_ROWWISE_GEMM_SHARE = 0.8
#: TP communication a GEMM can hide when overlapped (Megatron tp_comm_overlap, PyTorch async TP):
#: the collective runs in pieces beside the GEMM's tiles and slows it a little by taking SMs.
#: Share of the overlappable GEMM time usable for hiding. Estimate.
TP_OVERLAP_SHARE = 0.8
#: Fraction of the link's peak that NCCL collectives reach (bus bandwidth).
NCCL_EFFICIENCY = 0.75
#: Share of the data-parallel gradient communication that backward compute can hide.
DP_OVERLAP = 0.9
#: DeepSpeedCPUAdam update rate of one node's CPUs, parameters per second, shared by the ranks on
#: the node (AVX512, many cores; the ZeRO-Offload paper reports ~1–2 B params/s per node).
CPU_ADAM_PARAMS_PER_S = 1.0e9
#: DRAM bandwidth one CPU thread streams (the optimizer step FSDP's CPU offload runs on each
#: rank's CPU shard, one OpenMP thread per rank under torchrun): STREAM-style single-core
#: bandwidth of server x86 parts (AMD EPYC 7002/7003, Intel Xeon SP) is ~15–25 GB/s; 20 taken.
#: Estimate, not fitted (the one FSDP-offload row, tp-342, checks it).
CPU_THREAD_DRAM_GB_S = 20.0
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
#: Dequantisation of a quantised base (bytes per weight, passes, launches by library, read from
#: bitsandbytes / AutoGPTQ / AutoAWQ source): constraints/dequant.py.
#: A LoRA adapter's small matmuls run forward, input-gradient and weight-gradient: 3 passes
#: (+1 forward when checkpointing recomputes).
LORA_MATMUL_PASSES = 3.0
#: Kernels PEFT adds per adapted linear per forward in eager mode: the input cast to the adapter
#: dtype, lora_A, lora_B, the scaling, the add and the cast back (peft/tuners/lora/layer.py
#: Linear.forward; dropout with p = 0 is nn.Identity). Fused stacks keep the two matmuls and one
#: fused scale-add: 3. Read from the source, not fitted.
LORA_OPS_PER_ADAPTED_LINEAR = 6.0
LORA_OPS_PER_ADAPTED_LINEAR_FUSED = 3.0
#: With lora_dropout > 0 the dropout is nn.Dropout, one more kernel per adapted linear per
#: forward (aten native_dropout writes the output and its mask in one kernel; its traffic is in
#: the elementwise term, through the dropped copy the activation model counts). From the source.
LORA_DROPOUT_OPS = 1.0
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
#: Bytes of an fp8 element (fp8 weights on the wire with fp8 all-gather).
FP8_BYTES = 1.0
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
