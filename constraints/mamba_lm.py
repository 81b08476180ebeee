"""Mamba (``state-spaces/mamba-*``) and Falcon-Mamba (``tiiuae/falcon-mamba-7b``) as
transformers 5.25 builds them (modeling_mamba.py ``MambaForCausalLM``, modeling_falcon_mamba.py):
their config.json read, their parameters and what a block saves.

A block is ``norm`` (Llama's RMSNorm) → the Mamba-1 mixer (``mixer``: constraints/mamba1.py)
→ added to the residual; no attention, no MLP. With ``residual_in_fp32`` (the default) the
stream between blocks is fp32 (``ModelSpec.residual_fp32``). ``norm_f``, the head tied to the
embedding by default. Falcon-Mamba adds weightless RMSNorms on dt, B and C (buffers, no
parameters). Layer letter ``y`` in ``ModelSpec.layer_mixers``.
"""

from __future__ import annotations

from typing import Any, Literal

from constraints import mamba1
from constraints.hf_config_fields import positive_field
from constraints.mamba2_lm import mixer_stack_inventory
from constraints.model_spec import ModelSpec
from constraints.param_groups import ParamInventory
from constraints.saved_tensors import Saved
from constraints.saved_tensors import _norm as _norm_saved

#: MambaConfig's defaults (configuration_mamba.py; FalconMambaConfig's are the same)
DEFAULTS = {"hidden_size": 768, "num_hidden_layers": 32, "vocab_size": 50280}
BLOCK = "mamba1-dense"
#: the RMSNorms on dt, B and C, by type (modeling_falcon_mamba.py: weightless)
BCDT_NORM: dict[str, Literal["", "weightless", "rmsnorm"]] = {"falcon_mamba": "weightless"}


def read(cfg: dict[str, Any], common: dict[str, Any], where: str, model_type: str) -> ModelSpec:
    """MambaConfig's / FalconMambaConfig's fields (their defaults where a key is absent)."""
    hidden = positive_field(cfg, "hidden_size", DEFAULTS["hidden_size"], where)
    layers = positive_field(cfg, "num_hidden_layers", DEFAULTS["num_hidden_layers"], where)
    return ModelSpec(
        **common,
        **mamba1.read(cfg, hidden, where, {}),
        family=model_type,
        hidden=hidden,
        layers=layers,
        # no attention: one head as wide as the model stands in where a width is asked
        heads=1,
        kv_heads=1,
        head_dim=hidden,
        intermediate=0,
        vocab=positive_field(cfg, "vocab_size", DEFAULTS["vocab_size"], where),
        max_position=None,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        layer_mixers="y" * layers,
        residual_fp32=bool(cfg.get("residual_in_fp32", True)),
        ssm_bcdt_norm=BCDT_NORM.get(model_type, ""),
        sdpa_supported=False,  # no attention: transformers refuses an sdpa request
    )


def inventory(spec: ModelSpec) -> ParamInventory:
    return mixer_stack_inventory(spec, BLOCK, mamba1.param_groups(spec, BLOCK))


def block_layer(spec: ModelSpec, block: str) -> list[Saved]:
    """What one block saves: its norm, then the mixer on transformers' torch path."""
    return _norm_saved(spec, "norm", spec.hidden) + mamba1.mixer_saved(spec)
