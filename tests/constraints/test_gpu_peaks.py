"""Catalog peaks against the vendor's own figures (dense, no sparsity)."""

from __future__ import annotations

from constraints.gpus import resolve_gpu


def test_rtx_4090_peaks_are_the_ada_whitepapers() -> None:
    """NVIDIA Ada GPU architecture whitepaper, appendix table for the GeForce RTX 4090: FP16 and
    BF16 tensor TFLOPS with FP32 accumulate 165.2 (330.4 sparse); TF32 tensor 82.6; FP8 with FP32
    accumulate 330.3. GeForce halves the FP32-accumulate rate, so training (which accumulates in
    FP32) gets 165.2, not the 330.3 of FP16 accumulate and not the 82.6 of TF32."""
    g = resolve_gpu("rtx-4090")
    assert g.bf16_tflops == 165.2
    assert g.fp16_tflops == 165.2
    assert g.tf32_tflops == 82.6
    assert g.fp8_tflops == 330.3
