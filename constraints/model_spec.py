"""The model spec: one normalised vocabulary for what decides parameters, activations and FLOPs.

A :class:`ModelSpec` names ``hidden``, ``layers``, ``kv_heads`` … whatever the config called them
(GPT-2's ``n_embd``, T5's ``d_model``, Falcon's ``n_head`` …); :mod:`constraints.hf_config` builds
one from a Hugging Face ``config.json``, :mod:`constraints.models` from the catalog or raw numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from constraints.frozen import frozen
from constraints.record import Record, bounded

DATA_DIR = Path(__file__).parent / "data"

Arch = Literal["decoder", "encoder", "encoder-decoder", "raw"]
Norm = Literal["rmsnorm", "layernorm", "nonparam"]

#: HF ``model_type`` values whose layer structure fitplan models exactly.
LLAMA_LIKE = {
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo",
    "olmo2",
    "olmoe",
    "llama4_text",
    "deepseek_v2",
    "deepseek_v3",
    "glm4_moe",
    "minimax_m2",
    "gpt_oss",
    "glm",
    "glm4",
    "exaone4",
    "arcee",
    "starcoder2",
    "stablelm",
    "nemotron",
    "hunyuan_v1_dense",
    "vaultgemma",
    "ernie4_5_moe",
    "flex_olmo",
    "granitemoe",
    "granitemoeshared",
    "granite_swa",
    "granitemoe_swa",
    "jais2",
    "hyperclovax",
    "exaone_moe",
    "phimoe",
    "apertus",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "granitemoehybrid",
}
#: Gemma's layers: GELU-tanh, RMSNorm computing ``x̂ · (1 + w)`` in fp32; Gemma 2 and 3 add a norm
#: after attention and around the MLP (four per layer); Gemma 3 adds per-head q/k norms
#: (modeling_gemma3.py ``Gemma3Attention.q_norm``, ``k_norm``: Gemma3RMSNorm(head_dim))
GEMMA = ("gemma", "gemma2", "gemma3_text", "vaultgemma")
SUPPORTED_TYPES = sorted(
    LLAMA_LIKE
    | {"gpt2", "gpt_bigcode", "opt", "falcon", "gpt_neox", "phi", "cohere", "cohere2", "t5"}
    | {
        "mt5",
        "bert",
        "gptj",
        "codegen",
        "gpt_neo",
        "bloom",
        "mpt",
        "persimmon",
        "lfm2",
        "lfm2_moe",
        "bamba",
        "nemotron_h",
        "gemma4_text",
        "falcon_h1",
        "lfm3",
        "gemma3n_text",
        "nanochat",
        "mamba2",
        "mamba",
        "falcon_mamba",
        "jamba",
        "bitnet",
        "cohere2_moe",
    }
)


#: a token mixer's letter in ``layer_mixers`` -> the prefix of its layers' inventory block
MIXER_BLOCK_PREFIX = {
    "a": "",
    "l": "linear-",
    "c": "conv-",
    "m": "mamba-",
    # Falcon-H1 (constraints/falcon_h1.py): attention and a Mamba-2 mixer side by side
    "p": "hybrid-",
    # Gemma 4 (constraints/gemma4.py): global attention, and layers reusing another's K/V
    "g": "global-",
    "s": "shared-",
    "r": "shared-global-",
    # Mamba-1's selective scan (constraints/mamba1.py)
    "y": "mamba1-",
}
#: the letters of layers whose token mixer is attention
ATTENTION_MIXERS = frozenset("agsrp")
#: the letters of layers with a Mamba-2 mixer
MAMBA_MIXERS = frozenset("mp")
#: Nemotron-H's blocks without a token mixer: ``f`` an MLP alone, ``e`` an MoE alone
SINGLE_BLOCKS = {"f": "ffn", "e": "experts"}


@frozen(slots=True, kw_only=True)
class ModelSpec(Record):
    """A transformer, described by the numbers that decide its memory and compute."""

    id: str
    name: str
    family: str  # HF model_type, or 'raw'
    arch: Arch = "decoder"
    hidden: int = bounded(gt=0)
    layers: int = bounded(gt=0)  # decoder layers (all layers for decoder-only / encoder)
    encoder_layers: int = bounded(0, ge=0)  # encoder layers of an encoder-decoder
    heads: int = bounded(gt=0)
    kv_heads: int = bounded(gt=0)
    head_dim: int = bounded(gt=0)
    intermediate: int = bounded(ge=0)
    vocab: int = bounded(gt=0)
    max_position: int | None = None
    tie_embeddings: bool = False
    learned_positions: int = bounded(0, ge=0)  # rows of a learned position table
    token_types: int = 0
    pooler: bool = False
    embed_norm: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    norm: Norm = "rmsnorm"
    norms_per_layer: int = 2
    final_norm: bool = True
    qk_norm: Literal["none", "head", "full"] = "none"
    gated_mlp: bool = True
    #: the two linears of an MLP without a gate in the Llama path (Arcee's up/down_proj,
    #: Starcoder2's c_fc/c_proj)
    mlp_up: str = "up_proj"
    mlp_down: str = "down_proj"
    activation: str = "silu"
    parallel_attn: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    post_norm: bool = False
    #: the RMSNorm weight multiplies the fp32 normalised value before the cast back (Gemma,
    #: OLMo 2: ``(x̂ · w).to(dtype)``), where Llama's casts first (``w · x̂.to(dtype)``)
    norm_weight_fp32: bool = False
    #: tanh soft-caps (Gemma 2: ``attn_logit_softcapping`` on the attention scores,
    #: ``final_logit_softcapping`` on the logits); 0 = none
    attn_softcap: float = bounded(0.0, ge=0.0)
    final_softcap: float = bounded(0.0, ge=0.0)
    hidden_dropout: float = 0.0
    #: dropout on the token embeddings (Starcoder2's embedding_dropout)
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    embed_proj_dim: int = 0
    relative_attention_buckets: int = 0
    # mixture of experts
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    shared_expert_intermediate: int = 0
    shared_expert_gate: bool = False
    #: the shared experts' gate and up projections are one Linear (Granite MoE's
    #: ``shared_mlp.input_linear``, 2·I wide, then ``output_linear``)
    shared_expert_fused: bool = False
    #: the routed experts run in a narrower latent space (Nemotron-H ``moe_latent_size``: the
    #: tokens projected down to it before the experts and back after); 0 = the hidden width
    moe_latent: int = bounded(0, ge=0)
    first_dense_layers: int = 0
    moe_every: int = 1
    router_bias_param: bool = False
    #: the router is an nn.Linear (Mixtral, Qwen-MoE: PEFT's all-linear and bitsandbytes take
    #: it), not a bare Parameter (DeepSeek-V3's TopkRouter, gpt-oss's TopKRouter)
    router_linear: bool = True
    #: the router's matmul upcasts its input to fp32 (DeepSeek V2 / V3 TopkRouter: F.linear(
    #: hidden.type(torch.float32), weight.type(torch.float32))), a saved fp32 copy
    router_fp32_input: bool = False
    #: the router holds a frozen fp32 Parameter of one score correction per expert (ERNIE 4.5
    #: ``Ernie4_5_MoeStatics.e_score_correction_bias``: counted by num_parameters, never trained)
    router_correction_param: bool = False
    #: the fused q/k/v projection's output is clamped to ±this (MPT / DBRX ``clip_qkv``; 0 =
    #: none): the clamp keeps its input for the backward
    qkv_clip: float = bounded(0.0, ge=0.0)
    #: one learned attention-sink logit per head (gpt-oss ``self_attn.sinks``)
    attn_sinks: bool = False
    #: an RMSNorm on the MoE block's output, in the MoE layers only (A.X-K1's
    #: ``mlp.post_mlp_layernorm``)
    moe_post_norm: bool = False
    #: DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5: ``index_n_heads`` heads of
    #: ``index_head_dim`` scoring every key for each query, the top ``index_topk`` kept): it runs
    #: under no_grad, so it saves nothing, but its fp32 [b, s, heads, s] scores are a forward
    #: transient, and the top-k mask makes SDPA keep a mask per layer
    index_heads: int = bounded(0, ge=0)
    index_head_dim: int = bounded(0, ge=0)
    index_topk: int = bounded(0, ge=0)
    #: the sinks rescale the attention output by ``sigmoid(logsumexp(scores) − sink)`` (Granite
    #: SWA's eager path) rather than join the softmax as a logit (gpt-oss)
    sink_scaling: bool = False
    #: PEFT adapts the routed experts' stacks (Mixtral, Qwen-MoE: ParamWrapper through PEFT's
    #: weight conversion); gpt-oss's expert Parameters are not targeted (PEFT 0.21.2, traced)
    peft_adapts_experts: bool = True
    #: every expert runs on every token, unrouted tokens scaled by a zero score (transformers'
    #: Llama4TextMoe: ``hidden.repeat(num_experts)`` then a batched matmul): E× the expert
    #: activations and FLOPs of top-k routing
    experts_see_all_tokens: bool = False
    #: PEFT's LoRA can wrap the router Linear (Llama 4's Llama4Router returns a tuple, which
    #: PEFT 0.21.2's lora.Linear cannot take: all-linear is written as the other linears' names)
    router_adaptable: bool = True
    #: transformers runs its attention through SDPA (``_supports_sdpa``); Gemma 2 (soft-cap) and
    #: gpt-oss (sinks) have none, and without flash-attn transformers falls back to eager
    sdpa_supported: bool = True
    # multi-head latent attention (DeepSeek-V2/V3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    #: one letter per decoder layer, its token mixer: ``a`` attention, ``l`` gated DeltaNet
    #: (Qwen3-Next, Qwen 3.5 ``layer_types``: constraints/gated_deltanet.py), ``c`` a gated
    #: short convolution (LFM2: constraints/lfm2.py), ``m`` a Mamba-2 mixer (Bamba:
    #: constraints/mamba2.py); Nemotron-H's blocks also ``f`` an MLP, ``e`` an MoE
    #: (constraints/nemotron_h.py); "" = all attention
    layer_mixers: str = ""
    #: the gated DeltaNet's heads and head widths (``linear_num_key_heads`` …), the causal
    #: depthwise convolution's kernel of a mixer that has one (DeltaNet, LFM2's short conv;
    #: ``mixer_bias``: its linears and conv with biases, LFM2 ``conv_bias``), and whether q/k/v/z and b/a come from two fused
    #: projections (Qwen3-Next ``in_proj_qkvz`` / ``in_proj_ba``) or four (Qwen 3.5)
    linear_key_heads: int = bounded(0, ge=0)
    linear_value_heads: int = bounded(0, ge=0)
    linear_key_head_dim: int = bounded(0, ge=0)
    linear_value_head_dim: int = bounded(0, ge=0)
    linear_conv_kernel: int = bounded(0, ge=0)
    linear_fused_proj: bool = False
    mixer_bias: bool = False
    #: the Mamba-2 mixer: heads × head dim (the scan's width), B/C groups, state size, the
    #: scan's chunk, and whether its conv has a bias (constraints/mamba2.py)
    ssm_heads: int = bounded(0, ge=0)
    ssm_head_dim: int = bounded(0, ge=0)
    ssm_groups: int = bounded(0, ge=0)
    ssm_state: int = bounded(0, ge=0)
    ssm_chunk: int = bounded(0, ge=0)
    ssm_conv_bias: bool = False
    #: the Mamba-1 mixer (constraints/mamba1.py): its width ``expand · hidden`` (no heads) and
    #: the rank of its time step's projection (x_proj → dt → dt_proj); RMSNorms on dt, B and C
    #: (``ssm_bcdt_norm``): Falcon-Mamba's weightless ones, Jamba's with weights
    ssm_inner: int = bounded(0, ge=0)
    ssm_dt_rank: int = bounded(0, ge=0)
    ssm_bcdt_norm: Literal["", "weightless", "rmsnorm"] = ""
    #: the mixer's out_proj bias where it is not ``mixer_bias`` (Falcon-H1 ``projectors_bias``)
    ssm_out_bias: bool | None = None
    #: the residual stream between layers is fp32 whatever the weights (Mamba's
    #: ``residual_in_fp32``: the residual is upcast before each block's add), so a checkpointed
    #: layer keeps an fp32 input
    residual_fp32: bool = False
    #: the mixer's gated RMSNorm: the gate multiplies first (Bamba's ``BambaRMSNormGated``),
    #: after the norm (Falcon-H1 ``mamba_norm_before_gate``), or no norm, the gate alone
    #: (Falcon-H1 ``mamba_rms_norm`` false)
    ssm_norm: Literal["gate-first", "norm-first", "none"] = "gate-first"
    #: what runs the delta rule: transformers' torch path (fp32 chunk matrices and a state per
    #: chunk saved), or flash-linear-attention's chunk kernel where ``fla`` is installed (the
    #: stack decides: searcher/search/stack.py)
    delta_rule_kernel: Literal["torch", "fla"] = "torch"
    #: the attention's q_proj also yields a per-channel gate, ``o_proj(attn · sigmoid(gate))``
    #: (Qwen3-Next / Qwen 3.5 attention: q_proj is 2 · heads · head_dim wide)
    attn_output_gate: bool = False
    #: a sigmoid gate per head on the attention output, from its own projection of the layer
    #: input (LFM3 ``g_proj``: hidden → heads)
    head_gate: bool = False
    #: Gemma 4's global attention layers: their head width and key/value heads (0 = as the
    #: others'), whether their values are their keys (``attention_k_eq_v``: no v_proj); its
    #: layers reusing another's keys and values with an MLP twice as wide
    #: (``use_double_wide_mlp``); its per-layer embeddings: width per layer and vocabulary
    #: (``hidden_size_per_layer_input``, ``vocab_size_per_layer_input``; 0 = none)
    global_head_dim: int = bounded(0, ge=0)
    global_kv_heads: int = bounded(0, ge=0)
    global_k_eq_v: bool = False
    shared_kv_double_mlp: bool = False
    per_layer_input: int = bounded(0, ge=0)
    per_layer_vocab: int = bounded(0, ge=0)
    #: Gemma 3n: the residual streams of AltUp (``altup_num_inputs``; 0 = one plain stream),
    #: whether the corrected active stream is scaled (``altup_correct_scale``), the rank of the
    #: low-rank side path (``laurel_rank``), the first layers whose MLP gate is sparsified by a
    #: Gaussian top-k (``activation_sparsity_pattern``; their blocks are prefixed ``sparse-``)
    altup_streams: int = bounded(0, ge=0)
    altup_scale: bool = False
    laurel_rank: int = bounded(0, ge=0)
    sparse_mlp_layers: int = bounded(0, ge=0)
    #: layers whose attention is windowed (config ``layer_types``, or the type's own pattern):
    #: under SDPA each gets a materialised mask once the sequence reaches the window
    sliding_layers: int = bounded(0, ge=0)
    # a multimodal wrapper's other towers (vision / audio encoders, projector): loaded with the
    # text model, held frozen, not run by a text-only step (searcher/wrappers.py counts them)
    tower_params: int = bounded(0, ge=0)
    tower_linear_params: int = bounded(0, ge=0)  # in nn.Linear weights: bitsandbytes quantises them
    tower_lora_width: int = bounded(
        0, ge=0
    )  # Σ (d_in + d_out) of those: PEFT's all-linear adapts them
    tower_note: str = ""  # what the towers are, said on screen
    # raw numbers (the source documents' arithmetic): the total is given, not derived
    raw_params: int | None = None
    raw_trainable_params: int | None = None
    source: str = ""
    published_total_params: int | None = None
    notes: str = ""
    caveats: str = ""  # what fitplan assumed when reading the config
    #: the config.json's own model_type where it is read as another family (Granite as llama,
    #: ``--family``): what PEFT keys its default LoRA targets on
    config_type: str = ""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def experts_run_per_token(self) -> int:
        """Experts each token's hidden state passes through: its top-k, or all of them."""
        return self.num_experts if self.experts_see_all_tokens else self.experts_per_token

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_width(self) -> int:
        """Width of the query projection output (heads × head_dim), elements per token."""
        if self.is_mla:
            return self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of one of K or V (kv_heads × head_dim), elements per token."""
        return self.kv_heads * self.head_dim

    @property
    def cached_kv_width(self) -> int:
        """Elements of K and V one cached position holds over the decoder's layers: those
        computing their own keys and values (Gemma 4's reusing layers read another's), each at
        its width (Gemma 4's global layers at theirs)."""
        if not self.layer_mixers:
            return 2 * self.kv_width * self.layers
        global_width = (self.global_kv_heads or self.kv_heads) * (
            self.global_head_dim or self.head_dim
        )
        width = {"a": self.kv_width, "p": self.kv_width, "g": global_width}
        return 2 * sum(width.get(m, 0) for m in self.layer_mixers)

    @property
    def attention_q_widths(self) -> int:
        """Σ over every attention (self, and an encoder-decoder's cross-attention) of its query
        width, elements per token (Gemma 4's global layers at their own head width)."""
        wide = sum(m in "gr" for m in self.layer_mixers) if self.global_head_dim else 0
        cross = self.layers if self.arch == "encoder-decoder" else 0
        narrow = self.total_layers - self.layers + self.attention_layers - wide + cross
        return self.q_width * narrow + self.heads * self.global_head_dim * wide

    @property
    def total_layers(self) -> int:
        return self.layers + self.encoder_layers

    def moe_layer(self, index: int) -> bool:
        """Whether decoder layer ``index`` has routed experts (DeepSeek dense-first, Qwen sparse step)."""
        if not self.is_moe:
            return False
        if "e" in self.layer_mixers:  # Nemotron-H: the MoE blocks are listed
            return index < len(self.layer_mixers) and self.layer_mixers[index] == "e"
        return index >= self.first_dense_layers and (index + 1) % self.moe_every == 0

    @property
    def mamba_layers(self) -> int:
        """Decoder layers with a Mamba-2 mixer (alone, or beside attention: Falcon-H1)."""
        return sum(m in MAMBA_MIXERS for m in self.layer_mixers)

    @property
    def mamba1_layers(self) -> int:
        """Decoder layers with a Mamba-1 mixer (Mamba, Falcon-Mamba, Jamba)."""
        return self.layer_mixers.count("y")

    @property
    def linear_layers(self) -> int:
        return self.layer_mixers.count("l")

    @property
    def attention_layers(self) -> int:
        """Decoder layers with attention (each with its K/V and its s² scores)."""
        if not self.layer_mixers:
            return self.layers
        return sum(m in ATTENTION_MIXERS for m in self.layer_mixers)

    def layer_block(self, index: int) -> str:
        """The inventory block of decoder layer ``index``: its MLP ('dense' / 'moe'), prefixed
        by its mixer where that is not attention ('linear-': gated DeltaNet, 'conv-': LFM2)."""
        mixer = self.layer_mixers[index] if index < len(self.layer_mixers) else "a"
        if mixer in SINGLE_BLOCKS:
            return SINGLE_BLOCKS[mixer]
        mlp = "moe" if self.moe_layer(index) else "dense"
        sparse = "sparse-" if index < self.sparse_mlp_layers else ""
        return sparse + MIXER_BLOCK_PREFIX[mixer] + mlp

    @property
    def moe_layers(self) -> int:
        return sum(self.moe_layer(i) for i in range(self.layers))


# --------------------------------------------------------------------------------------------
# Hugging Face config.json
# --------------------------------------------------------------------------------------------
