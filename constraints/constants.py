"""Constants that physics does not give, each with its source or the data it was fitted to.

Calibrated values are fitted by ``tools/calibrate.py`` to ``constraints/data/calibration/*.csv``
(published measurements, copied with their sources); the fit, its rows and residuals are in
``docs/calibration.md``. Change a value here and the accuracy report (``fitplan accuracy``) moves.
"""

from __future__ import annotations

from constraints.units import GiB, MiB

# ---- memory --------------------------------------------------------------------------------

#: CUDA context + kernel images + library handles outside the PyTorch allocator, per GPU.
#: Public figures for torch 2.x with lazy module loading: 287 MiB (pytorch PR #86509), 300–400 MiB
#: (ptrblck, pytorch issues #107667, #109888), 426 MiB (RTX 6000 Ada, torch 2.10, unsloth-zoo
#: PR #1053); plus cuDNN/cuBLAS handles. 2022-era torch without lazy loading: ~1.3 GiB
#: (transformers single-GPU guide, V100). Default: 0.5 GiB, for a GPU whose generation has no
#: measured training figure (constraints/cuda_context.py: context_bytes, the one reader).
CUDA_CONTEXT_BYTES = 512 * MiB

#: NCCL communicator buffers when a GPU talks to others (outside the PyTorch allocator).
#: NCCL_BUFFSIZE is 4 MiB per connection per channel; reported totals of 1.06–1.6 GB per
#: communicator on 8 GPUs (NVIDIA/nccl issues #864, #1685). Default: 1 GiB for world size > 1.
NCCL_BUFFER_BYTES = 1 * GiB

#: cuBLAS workspace allocated through the caching allocator, per stream: 32 MiB on sm90+
#: (Hopper/Blackwell), ":4096:2:16:8" = 8.125 MiB before (aten/src/ATen/cuda/CublasHandlePool.cpp).
CUBLAS_WORKSPACE_HOPPER = 32 * MiB
CUBLAS_WORKSPACE_OLDER = 8 * MiB + 128 * 1024

#: Allocator fragmentation while serving (constraints/inference.py): reserved − allocated as a
#: fraction of the prefill workspace. Training's slack is fitted per regime to the replayed
#: caching allocator (constraints/data/allocator_slack.json); serving is not replayed, so it keeps
#: the flat fraction training used before (0.15, fitted then by tools/calibrate.py to 21 measured
#: training rows reporting max_memory_reserved or NVML used): an unvalidated stand-in.
SERVING_FRAGMENTATION_FRACTION = 0.15

#: Default headroom kept free below capacity (the user's --headroom), as a fraction of capacity.
DEFAULT_HEADROOM = 0.10

#: DeepSpeed ZeRO reduce bucket as the HF integration's "auto" sets it: hidden² elements
#: (transformers/integrations/deepspeed.py); DeepSpeed's own default is 5e8 elements.
#: Stage 3 overlaps communication (overlap_comm defaults True there), so it holds two buckets.
ZERO_REDUCE_BUCKETS_STAGE12 = 1
ZERO_REDUCE_BUCKETS_STAGE3 = 2

#: FSDP / ZeRO-3 working set: the layer being computed plus one prefetched (FSDP1
#: _max_num_inflight_all_gathers = 2; FSDP2 prefetches one group), and the root unit
#: (embeddings, final norm, head) stays unsharded for the whole step (FSDP2
#: reshard_after_forward=False for the root; FSDP1 never frees the root's params after forward).
FSDP_LIVE_LAYERS = 2

#: Logits and cross-entropy, bytes per token per vocabulary entry at the loss peak:
#: standard (transformers ForCausalLMLoss: logits.float(); the fp32 log-softmax output is saved,
#: and its backward holds grad-out and grad-in beside it: 3 × 4 bytes; ``fitplan trace`` sees the
#: saved 4 bytes);
#: chunked (torchtune CEWithChunkedOutputLoss, 8 chunks, as torchtune runs it with compile=True:
#: the compiled per-chunk loss keeps the 16-bit logits chunk instead of an fp32 log-softmax, plus
#: one chunk's backward). Fitted by tools/calibrate.py to the 8 torchtune rows with chunked CE
#: (all compiled): 2.25 (docs/calibration.md). Eager mode would hold the 16-bit logits of every
#: chunk and their fp32 log-softmax at the end of the loss forward: ~6.5;
#: fused (Liger fused linear CE / Apple CCE): no vocabulary-sized tensor per token.
LOSS_BYTES_PER_VOCAB = {"standard": 12.0, "chunked": 2.25, "fused": 0.0}

#: "standard-held": the training loop keeps the fp32 logits it passed to the loss alive through
#: the backward, one more fp32 entry per token per vocabulary entry beside the standard chain.
#: torchtune's recipes from 01891fc4c / 65aec15c4 (March 2024) to PR #1390 (4fba6cd44, Aug
#: 2024): the decoder returns ``self.output(h).float()`` and the loop runs ``logits =
#: logits[..., :-1, :].contiguous(); logits = logits.transpose(1, 2); loss = loss_fn(logits,
#: labels); loss.backward()``: the shifted fp32 copy stays referenced by ``logits`` while
#: log_softmax's backward holds its output, the incoming gradient and its own (4 + 4 + 4 B).
#: From PR #1390 on the recipes shift the labels instead and ``del logits`` before backward.
LOSS_HELD_LOGITS_BYTES_PER_VOCAB = 4.0

#: The logits' gradient in the compute dtype, which the output head's backward reads while the
#: head's weight gradient is allocated (full fine-tuning), bytes per token per vocabulary entry.
LOSS_GRAD_BYTES_PER_VOCAB = 2.0

#: Fused linear CE keeps grad_input (tokens × hidden, compute dtype) and one chunk of fp32
#: logits of about tokens × hidden elements (Liger: chunk_size = next_pow2(BT / ceil(V/H))).
FUSED_CE_CHUNK_FP32_PER_HIDDEN = 1.0

# ---- bytes per element (dtype sizes, not fitted) -------------------------------------------

#: An fp32 element: master weights, fp32 optimizer states, per-row quantisation scales,
#: the fp32 gradient partition of the optimizer step, bitsandbytes' per-block absmax.
FP32_BYTES = 4.0
#: An fp16 element: the weight AutoGPTQ dequantises and its matmul saves (constraints/activations.py).
FP16_BYTES = 2.0

#: bitsandbytes dequantises one quantised weight at a time into the 16-bit compute dtype for its
#: matmul (bnb.functional.dequantize_4bit / int8 matmul): 2 bytes per weight of the largest linear.
DEQUANT_BYTES_PER_WEIGHT = 2.0

#: ``prepare_model_for_kbit_training`` casts every parameter that is not 4/8-bit to fp32
#: (peft/utils/other.py: "cast all non INT8 parameters to fp32"): embeddings, norms, the head.
#: bitsandbytes' Linear4bit returns its output in the dtype of its input
#: (bitsandbytes/nn/modules.py Linear4bit.forward: ``out.to(inp_dtype)``), so the fp32
#: embedding output keeps the whole residual stream and every layer's activations fp32 (traced,
#: Llama-3.2-1B QLoRA nf4, 2 × 2048: float32[2, 2048, 8192] MLP activations, parameters
#: 1.53 GiB with the fp32 embedding). Applied to QLoRA with fp32 adapters (PEFT's default,
#: autocast_adapter_dtype=True, which the PEFT stack pairs with this preparation).
KBIT_PREPARED_BYTES = 4.0

#: torch.autocast caches a 16-bit copy of each fp32 weight it casts (for the backward), 2 bytes
#: per weight of the matmul weights (torch/csrc/autograd autocast weight cache).
AUTOCAST_COPY_BYTES_PER_WEIGHT = 2.0

#: The HF DeepSpeed integration's "auto" reduce bucket is hidden² elements
#: (transformers/integrations/deepspeed.py: reduce_bucket_size = hidden_size * hidden_size):
#: elements per hidden².
ZERO_BUCKET_ELEMENTS_PER_HIDDEN2 = 1.0

#: Adafactor's step builds an fp32 update and its squared copy for one tensor at a time
#: (transformers.optimization.Adafactor._approx_sq_grad + update): 2 × 4 bytes per element.
ADAFACTOR_STEP_BYTES_PER_ELEMENT = 8.0
#: and, for a 16-bit parameter or gradient, its fp32 copy alive through the tensor's update
#: (``grad = grad.float()``, ``p_data_fp32 = p.float()`` … ``p.copy_(p_data_fp32)``, same source):
#: 4 bytes per element each. Traced Falcon-7B bf16 full 8 × 256: the step's peak is 16 B per
#: element of the 65024 × 4544 embedding above weights and gradients (2.2 GiB the model lacked).
ADAFACTOR_FP32_COPY_BYTES = 4.0
