"""Exact parameter counting: every tensor of the model as a :class:`ParamGroup`.

The inventory is the single source for totals, embeddings vs head, what a quantised base
quantises, the largest layer (the dequantisation buffer, the ZeRO-3/FSDP working set), what a LoRA
target list matches (Σ r·(d_in + d_out) over the targeted linears) and MoE active parameters.
Counts follow ``model.num_parameters()`` of the Hugging Face class: a tied head is counted once,
buffers are not parameters.
"""

from __future__ import annotations

from constraints.lora_targets import PEFT_DEFAULT_TARGETS, lora_params, lora_target_groups
from constraints.param_families import inventory, total_params
from constraints.param_groups import Kind, ParamGroup, ParamInventory, Role, group_key

__all__ = [
    "PEFT_DEFAULT_TARGETS",
    "Kind",
    "ParamGroup",
    "ParamInventory",
    "Role",
    "group_key",
    "inventory",
    "lora_params",
    "lora_target_groups",
    "total_params",
]
