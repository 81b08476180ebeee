"""Gradient bytes FSDP holds per rank through no_sync micro-batches, measured on CPU with gloo.

Run under two processes: ``python -m torch.distributed.run --nproc_per_node 2 --master_port PORT
tools/measure_no_sync.py fsdp1|fsdp2``. Rank 0 prints one JSON object: the trainable parameter
count P, and after each of three micro-batches (the first two without gradient sync: FSDP1
``no_sync()``, FSDP2 ``set_requires_gradient_sync(False)``; the last synced) the bytes of
gradients the rank holds (FSDP1: each unit's ``flat_param.grad`` and ``_saved_grad_shard``; FSDP2:
the sharded ``.grad`` plus each parameter's unsharded or ``unsharded_accumulated_grad``). The
model is four bias-free 256 × 256 linears, one FSDP unit each, fp32 parameters (FSDP2 with a
bf16 / fp32-reduce MixedPrecisionPolicy). Measured at torch 2.13 (2 ranks): P = 262,144; after
the no_sync micro-batches 1,048,576 B (P × 4, unsharded), after the synced one 524,288 B
(P × 4 / 2): what constraints/backend_memory.py ``unsynced_gradients`` counts.
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

HIDDEN = 256
UNITS = 4


def _fsdp2_held(model: torch.nn.Module) -> int:
    out = sum(
        p.grad.to_local().numel() * p.grad.element_size()
        for p in model.parameters()
        if p.grad is not None
    )
    for m in model.modules():
        state = getattr(m, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        for fp in group.fsdp_params if group is not None else []:
            g = fp.unsharded_accumulated_grad
            if g is None and hasattr(fp, "_unsharded_param"):
                g = fp._unsharded_param.grad
            out += g.numel() * g.element_size() if g is not None else 0
    return out


def _fsdp1_held(model: torch.nn.Module) -> int:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    out = 0
    for m in model.modules():
        if isinstance(m, FSDP) and m._handle is not None:
            fp = m._handle.flat_param
            for g in (fp.grad, getattr(fp, "_saved_grad_shard", None)):
                out += g.numel() * g.element_size() if g is not None else 0
    return out


def main(kind: str) -> None:
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model: torch.nn.Module = torch.nn.Sequential(
        *[torch.nn.Linear(HIDDEN, HIDDEN, bias=False) for _ in range(UNITS)]
    )
    params = sum(p.numel() for p in model.parameters())
    if kind == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FSDP(
            model,
            auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
            device_id=torch.device("cpu"),
        )
    x = torch.randn(8, HIDDEN)
    held = []
    for sync in (False, False, True):
        if kind == "fsdp2":
            model.set_requires_gradient_sync(sync)  # type: ignore[operator]
            model(x).float().sum().backward()
            held.append(_fsdp2_held(model))
        else:
            ctx = model.no_sync() if not sync else torch.enable_grad()  # type: ignore[operator]
            with ctx:
                model(x).sum().backward()
            held.append(_fsdp1_held(model))
    if dist.get_rank() == 0:
        print(
            json.dumps(
                {"kind": kind, "params": params, "world": dist.get_world_size(), "held": held}
            )
        )
    # every rank past its last collective before the group goes: a rank tearing gloo down while
    # its peer still reads aborts ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
