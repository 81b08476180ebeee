"""Count the eager elementwise traffic of one decoder layer, per layer code and family.

Builds one decoder layer on the meta device (bf16, shapes only: no weights, no data) — Hugging
Face's from the installed transformers, torchtune's and torchtitan's from a checkout of their
source (tools/trace_elementwise_layers.py) — runs its forward and backward under a
``TorchDispatchMode`` and adds up, for every aten op that launches a non-GEMM, non-attention
kernel, the bytes it reads (its tensor inputs; an in-place op's destination is one of them) and
writes (its outputs). GEMMs (mm / addmm / bmm) and attention (a flash-style stand-in) are left
out: the throughput model times them itself. Views, ``empty`` and other ops that launch no kernel
are left out too. Each layer is traced at three shapes (``_variants``), which fix its bytes per
token per layer as a·hidden + b·intermediate + c·kv_width.

constraints/eager_traffic.py turns that into the eager stack's elementwise factor: traffic over
the bytes the memory model says the layer saves (constraints/activations.py
``layer_bytes_per_token``), at ETA_EAGER_BANDWIDTH. Run it when transformers changes; it rewrites
constraints/data/eager_elementwise.json (the shipped file: torchtune 32e265d57, torchtitan 9dec370,
each ``git archive``d into a directory):

    PYTHONPATH=$PWD .venv/bin/python tools/trace_elementwise.py \
        --torchtune-src DIR --torchtune-commit 32e265d57 \
        --torchtitan-src DIR --torchtitan-commit 9dec370
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "constraints" / "data" / "eager_elementwise.json"

#: aten ops that are GEMMs (timed by the GEMM term) — left out of the elementwise count
GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "linear"}
#: aten ops that launch no kernel (views, metadata, allocation without a fill)
NO_KERNEL_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "slice",
    "select",
    "unsqueeze",
    "squeeze",
    "alias",
    "detach",
    "as_strided",
    "split",
    "split_with_sizes",
    "unbind",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "_reshape_alias",
    "view_as",
    "lift_fresh",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_same_size",
    "_has_compatible_shallow_copy_type",
}

#: One shape per family, traced with two variants of it (``_variants``) to fix the bytes per
#: token as a linear function of the widths
SHAPES: dict[str, list[dict[str, int]]] = {
    # Llama 3.1 8B
    "llama": [
        {"hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128},
    ],
    "mistral": [
        {"hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128},
    ],
    "qwen2": [
        {"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4, "head_dim": 128},
    ],
    "qwen3": [
        {"hidden": 4096, "intermediate": 12288, "heads": 32, "kv_heads": 8, "head_dim": 128},
    ],
    "gemma": [
        {"hidden": 3072, "intermediate": 24576, "heads": 16, "kv_heads": 16, "head_dim": 256},
    ],
    # the GPT-2-shaped decoder fitplan builds for llm-foundry's MPT rows (MPT-7B)
    "gpt2": [
        {"hidden": 4096, "intermediate": 16384, "heads": 32, "kv_heads": 32, "head_dim": 128},
    ],
}


def hf_config(family: str, shape: dict[str, int]) -> dict[str, Any]:
    """A one-layer config.json of ``family`` with ``shape``'s widths (no dropout)."""
    if family == "gpt2":
        return {
            "model_type": "gpt2",
            "n_embd": shape["hidden"],
            "n_head": shape["heads"],
            "n_layer": 1,
            "n_inner": shape["intermediate"],
            "vocab_size": 50368,
            "n_positions": 2048,
            "activation_function": "gelu",
            "resid_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "embd_pdrop": 0.0,
        }
    return {
        "model_type": family,
        "hidden_size": shape["hidden"],
        "intermediate_size": shape["intermediate"],
        "num_attention_heads": shape["heads"],
        "num_key_value_heads": shape["kv_heads"],
        "head_dim": shape["head_dim"],
        "num_hidden_layers": 1,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
        "hidden_act": "gelu_pytorch_tanh" if family == "gemma" else "silu",
        "attention_dropout": 0.0,
    }


def _flash_stand_in() -> Any:
    """Attention as one opaque kernel pair (the attention term times it): forward writes the
    output, backward the three input gradients; nothing inside is counted."""
    import torch

    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> Any:  # (b, h, s, d)
            ctx.save_for_backward(q, k, v)
            b, h, s, _ = q.shape
            return q.new_empty(b, s, h, v.shape[-1])

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            q, k, v = ctx.saved_tensors
            return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    return Flash


class Counter:
    """Bytes read and written and kernels launched by the non-GEMM, non-attention aten ops."""

    def __init__(self) -> None:
        self.read = 0.0
        self.written = 0.0
        self.kernels = 0
        self.by_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        self.gemms = 0

    @staticmethod
    def _nbytes(t: Any) -> float:
        import torch

        if not isinstance(t, torch.Tensor):
            return 0.0
        view = t.numel() * t.element_size()
        try:
            storage = t.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            storage = view
        return float(min(view, storage)) if storage else float(view)

    def record(self, name: str, args: Any, kwargs: Any, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_leaves

        if name in GEMM_OPS:
            self.gemms += 1
            return
        if name in NO_KERNEL_OPS:
            return
        ins = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        read = sum(self._nbytes(t) for t in ins)
        written = sum(self._nbytes(t) for t in outs)
        self.read += read
        self.written += written
        self.kernels += 1
        self.by_op[name][0] += 1
        self.by_op[name][1] += read + written


def hf_layer(family: str, shape: dict[str, int], seq: int) -> tuple[Any, Any]:
    """One Hugging Face decoder layer of ``family`` and a function running it (meta device)."""
    import importlib

    import torch
    from transformers import AutoConfig

    cfg_dict = hf_config(family, shape)
    model_type = cfg_dict.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **cfg_dict)
    cfg._attn_implementation = "sdpa"
    module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    if family == "gpt2":
        return (layer := module.GPT2Block(cfg, layer_idx=0)), lambda x: layer(x)
    cls = next(getattr(module, n) for n in dir(module) if n.endswith("DecoderLayer"))
    layer = cls(cfg, layer_idx=0)
    rotary = next(getattr(module, n) for n in dir(module) if n.endswith("RotaryEmbedding"))(
        config=cfg
    )
    position_ids = torch.arange(seq).unsqueeze(0)
    probe = torch.empty(1, seq, shape["hidden"], dtype=torch.bfloat16)
    cos_sin = tuple(t.to(torch.bfloat16) for t in rotary(probe, position_ids))
    return layer, lambda x: layer(
        x, attention_mask=None, position_ids=position_ids, position_embeddings=cos_sin
    )


def trace_layer(build: Any, shape: dict[str, int], tokens: int) -> dict[str, Any]:
    """Forward + backward of the layer ``build(shape, tokens)`` returns, on the meta device in
    bf16, under the counting dispatch mode; bytes per token and kernels."""
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    flash = _flash_stand_in()
    counter = Counter()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            out = func(*args, **(kwargs or {}))
            counter.record(func.overloadpacket.__name__, args, kwargs or {}, out)
            return out

    original = F.scaled_dot_product_attention

    def sdpa(q: Any, k: Any, v: Any, *a: Any, **kw: Any) -> Any:
        return flash.apply(q, k, v).transpose(1, 2)  # (b, h, s, d) view of (b, s, h, d)

    with torch.device("meta"):
        torch.set_default_dtype(torch.bfloat16)
        try:
            layer, call = build(shape, tokens)
        finally:
            torch.set_default_dtype(torch.float32)
        layer = layer.to(torch.bfloat16).train()
        x = torch.empty(1, tokens, shape["hidden"], dtype=torch.bfloat16, requires_grad=True)
        grad = torch.empty(1, tokens, shape["hidden"], dtype=torch.bfloat16)
        F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
        try:
            with Mode():
                out = call(x)
                out = out[0] if isinstance(out, tuple) else out
                forward = (counter.read + counter.written, counter.kernels)
                torch.autograd.backward(out, grad)
        finally:
            F.scaled_dot_product_attention = original  # type: ignore[assignment]
    total = counter.read + counter.written
    return {
        "bytes_per_token": total / tokens,
        "forward_bytes_per_token": forward[0] / tokens,
        "kernels_forward": forward[1],
        "kernels_backward": counter.kernels - forward[1],
        "gemm_calls": counter.gemms,
        "by_op": {
            k: {"kernels": int(v[0]), "bytes_per_token": v[1] / tokens}
            for k, v in sorted(counter.by_op.items(), key=lambda kv: -kv[1][1])
        },
    }


def written_per_token(family: str, shape: dict[str, int]) -> float:
    """Bytes per token the memory model says one layer writes (full fine-tune, flash attention,
    nothing checkpointed, bf16): the quantity K_ELEMENTWISE multiplies."""
    from constraints.activations import layer_bytes_per_token
    from constraints.hf_config import spec_from_hf_config
    from constraints.params import inventory

    cfg = hf_config(family, shape)
    cfg["num_hidden_layers" if family != "gpt2" else "n_layer"] = 2
    spec = spec_from_hf_config(cfg, id=f"trace-{family}", name=family)
    block = next(iter(inventory(spec).blocks or {"dense": 1}))
    return layer_bytes_per_token(
        spec,
        block,
        attention="flash",
        checkpointing="none",
        kind_bytes={"compute": 2.0, "residual": 2.0, "fp32": 4.0, "softmax": 2.0, "mask": 1.0},
        seq_len=2048,
    )


def _variants(shape: dict[str, int]) -> list[dict[str, int]]:
    """The shape, its MLP 1.5× wider, and its key/value heads halved (doubled when 1): the three
    traces that fix bytes per token = a·hidden + b·intermediate + c·(kv heads · head dim)."""
    wider = {**shape, "intermediate": shape["intermediate"] * 3 // 2}
    kv = shape["kv_heads"] // 2 if shape["kv_heads"] % 2 == 0 else shape["kv_heads"] * 2
    if shape["heads"] % kv:
        kv = shape["heads"]
    return [shape, wider, {**shape, "kv_heads": kv}]


def _coefficients(traces: list[dict[str, Any]]) -> dict[str, float]:
    """Solve bytes per token = a·hidden + b·intermediate + c·kv_width over the three traces."""
    import numpy as np

    rows = [
        [
            t["shape"]["hidden"],
            t["shape"]["intermediate"],
            t["shape"]["kv_heads"] * t["shape"]["head_dim"],
        ]
        for t in traces
    ]
    b = [t["bytes_per_token"] for t in traces]
    a, f, c = np.linalg.solve(np.array(rows, dtype=float), np.array(b, dtype=float))
    return {"hidden": float(a), "intermediate": float(f), "kv_width": float(c)}


def _trace_code(
    code: str, builders: dict[str, Any], shapes: dict[str, list[dict[str, int]]], tokens: int
) -> dict[str, Any]:
    families: dict[str, Any] = {}
    for family, build in builders.items():
        traces = []
        for shape in _variants(shapes[family][0]):
            t = trace_layer(build, shape, tokens)
            w = written_per_token(family, shape)
            t["written_bytes_per_token"] = w
            t["rho"] = t["bytes_per_token"] / w
            t["shape"] = shape
            if shape is not shapes[family][0]:
                del t["by_op"]
            traces.append(t)
            print(
                f"{code:24s} {family:8s} h={shape['hidden']:5d} f={shape['intermediate']:5d} "
                f"kv={shape['kv_heads']:3d}: {t['bytes_per_token']:9.0f} B/token/layer, "
                f"written {w:7.0f}, rho {t['rho']:.3f}, kernels {t['kernels_forward']} fwd "
                f"{t['kernels_backward']} bwd"
            )
        coef = _coefficients(traces)
        families[family] = {"bytes_per_token_per_layer": coef, "traces": traces}
    return families


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    from tools import trace_elementwise_layers as L

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--torchtune-src", help="directory holding a torchtune package checkout")
    ap.add_argument("--torchtune-commit", default="", help="the checkout's commit (provenance)")
    ap.add_argument("--torchtitan-src", help="directory holding a torchtitan package checkout")
    ap.add_argument("--torchtitan-commit", default="", help="the checkout's commit (provenance)")
    args = ap.parse_args(argv)
    hf = {f: (lambda shape, seq, f=f: hf_layer(f, shape, seq)) for f in SHAPES}
    codes: dict[str, Any] = {"hf": _trace_code("hf", hf, SHAPES, args.tokens)}
    sources = {"hf": f"transformers {transformers.__version__}"}
    if args.torchtune_src:
        src = args.torchtune_src
        builders = {"llama": lambda shape, seq: L.torchtune_llama(src, shape, seq)}
        codes["torchtune"] = _trace_code("torchtune", builders, SHAPES, args.tokens)
        sources["torchtune"] = f"pytorch/torchtune {args.torchtune_commit}"
    if args.torchtitan_src:
        tsrc = args.torchtitan_src
        for code, norm in (
            ("torchtitan", "rmsnorm"),
            ("torchtitan-fused-rmsnorm", "fused_rmsnorm"),
        ):
            builders = {
                "llama": lambda shape, seq, norm=norm: L.torchtitan_llama(tsrc, shape, seq, norm)
            }
            codes[code] = _trace_code(code, builders, SHAPES, args.tokens)
            sources[code] = f"pytorch/torchtitan {args.torchtitan_commit} (norm_type={norm})"
    doc = {
        "what": (
            "Eager elementwise traffic of one decoder layer (forward + backward, every aten op "
            "that is not a GEMM or attention: bytes read + written), per token, and rho = that / "
            "the bytes the memory model says the layer writes (full fine-tune, flash, no "
            "checkpointing, bf16), by model code and family (constraints/eager_traffic.py)."
        ),
        "how": "tools/trace_elementwise.py: the layer on the meta device under a TorchDispatchMode",
        "torch": torch.__version__,
        "sources": sources,
        "tokens": args.tokens,
        "reference": ["hf", "gpt2"],
        "codes": codes,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
