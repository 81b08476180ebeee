"""axolotl's own rules where its YAML differs from TrainingArguments, from axolotl v0.18.0
(2f5cb9da): ``src/axolotl/utils/schemas/config.py`` (``bf16`` defaults to ``"auto"``;
``attn_implementation`` is the attention backend and the boolean flags are deprecated aliases),
``src/axolotl/utils/schemas/enums.py`` (``LEGACY_ATTN_FLAG_TO_IMPL``, in priority order),
``src/axolotl/utils/config/__init__.py`` (``resolve_dtype``: bf16 "auto" is bf16 on a
bf16-capable GPU, off when ``fp16`` is set; ``bfloat16`` / ``float16`` load the model in 16 bits
without AMP), ``src/axolotl/utils/schemas/training.py`` (``micro_batch_size`` and
``gradient_accumulation_steps`` default to 1).
"""

from __future__ import annotations

from typing import Any

from searcher.check.common import ATTN_IMPL
from searcher.check.doc import Document
from searcher.check.reading import Reading

#: axolotl ``LEGACY_ATTN_FLAG_TO_IMPL``, specific backends before generic ones
LEGACY_ATTN_FLAGS: tuple[tuple[str, str], ...] = (
    ("xformers_attention", "xformers"),
    ("sage_attention", "sage"),
    ("flex_attention", "flex_attention"),
    ("flash_attention", "flash_attention_2"),
    ("sdp_attention", "sdpa"),
    ("eager_attention", "eager"),
)
#: axolotl backends beyond transformers' names → fitplan attention: xformers' memory-efficient
#: kernel and SageAttention keep no S×S score matrix (as SDPA's fused kernels)
AXOLOTL_ATTN: dict[str, str] = {**ATTN_IMPL, "xformers": "sdpa", "sage": "sdpa"}
#: axolotl ``micro_batch_size`` default (schemas/training.py)
AXOLOTL_DEFAULT_MICRO_BATCH = 1


def read_attention(r: Reading, doc: Document, d: dict[str, Any]) -> None:
    impl = d.get("attn_implementation")
    key = "attn_implementation"
    if not isinstance(impl, str) or not impl.strip():
        flag = next((f for f, _ in LEGACY_ATTN_FLAGS if d.get(f) is True), None)
        impl = dict(LEGACY_ATTN_FLAGS).get(flag or "", "sdpa")
        key = flag or ""
    for f, _ in LEGACY_ATTN_FLAGS:
        if f in d and f != key:
            r.read(doc, f, "attention", "superseded" if d.get(f) is True else "off")
    text = impl.strip().lower()
    if text in AXOLOTL_ATTN:
        r.fields["attention"] = AXOLOTL_ATTN[text]
        if key:
            r.read(doc, key, "attention")
    elif "flash" in text:  # a Hub kernel path such as kernels-community/flash-attn3
        r.fields["attention"] = "flash"
        r.read(doc, key, "attention", "a FlashAttention kernel from the Hub")
    else:
        r.fields["attention"] = "sdpa"
        r.unmapped(doc, key, f"attention backend {impl} is not modelled (SDPA assumed)")


def half_dtype(r: Reading, doc: Document, d: dict[str, Any], gpu_bf16: bool) -> str | None:
    """The 16-bit dtype axolotl trains in (None: fp32), as ``resolve_dtype`` decides it."""
    bf16 = d.get("bf16", "auto")
    fp16 = d.get("fp16")
    if bf16 == "auto":
        if not fp16 and gpu_bf16:
            bf16 = True
        else:
            bf16 = False
            if not gpu_bf16 and fp16 is None and not d.get("float16"):
                fp16 = True
    if bf16:
        fp16 = False
    for key in ("bf16", "fp16", "bfloat16", "float16"):
        if key in d:
            r.read(doc, key, "recipe")
    if "bf16" not in d:
        r.notes.append(
            "no bf16 key: axolotl's default is 'auto' (bf16 where the GPU has it)"
            if gpu_bf16
            else "no bf16 key: axolotl's 'auto' finds no bf16 on this GPU (fp16)"
        )
    if bf16 or d.get("bfloat16"):
        return "bf16"
    if fp16 or d.get("float16"):
        return "fp16"
    return None


def batch_size_key(r: Reading, doc: Document, d: dict[str, Any]) -> None:
    """``batch_size`` does not set the accumulation in v0.18.0: the schema fills
    ``gradient_accumulation_steps`` with its default 1 (schemas/training.py, since 9d5bfc12,
    2025-06-18) before ``normalize_config`` computes ``gradient_accumulation_steps or
    batch_size // micro_batch_size``; older releases took the quotient."""
    if "batch_size" in d and d.get("gradient_accumulation_steps") is None:
        r.ignore(
            doc,
            "batch_size",
            "axolotl ≥ 2025-06 fills gradient_accumulation_steps with 1 before batch_size is "
            "used (older releases: batch_size ÷ micro_batch_size); accumulation does not change "
            "the memory of a step",
        )


def fsdp_shard(fc: dict[str, Any], legacy: Any) -> int:
    """ZeRO-equivalent stage of axolotl's ``fsdp_config`` (keys with or without ``fsdp_``) and
    the legacy ``fsdp:`` list: FSDP2 ``reshard_after_forward``, else FSDP1
    ``sharding_strategy`` (FULL_SHARD 3, SHARD_GRAD_OP 2, NO_SHARD 0)."""
    for key in ("reshard_after_forward", "fsdp_reshard_after_forward"):
        if key in fc:
            return 3 if fc[key] else 2
    strategy = str(fc.get("sharding_strategy", fc.get("fsdp_sharding_strategy", ""))).upper()
    if not strategy and isinstance(legacy, list | str):
        spec = " ".join(map(str, legacy)) if isinstance(legacy, list) else legacy
        strategy = "SHARD_GRAD_OP" if "shard_grad_op" in spec.lower() else ""
    return {"SHARD_GRAD_OP": 2, "NO_SHARD": 0, "1": 3, "2": 2, "3": 0}.get(strategy, 3)
