"""What ``--auto`` found in a live attention module, as data (:mod:`idinspect.automatic` fills it,
:mod:`adapters.inferred` reads a checkpoint by it): which stored modules play W_Q, W_K, W_V and W_O,
their biases and fused rows, the layer list, the positional scheme, the score scale, causality, the
q/k norm, and the choices each of these is settled among."""

from __future__ import annotations

from dataclasses import dataclass, field

from .layout import Projection

#: Where positions enter: nothing inside attention, RoPE with rotate-half / interleaved pairs, or
#: ALiBi with the published slopes of H heads (m_h = 2^(-8 (h + 1) / H), and the interleaved extension
#: for H not a power of two: BLOOM's and MPT's), added to the scores unscaled.
POSITIONAL_CHOICES = ("none", "half", "interleaved", "alibi")
#: Which layers see config.sliding_window: none, all, or those ``layer_types`` marks "sliding_attention".
WINDOW_CHOICES = ("none", "all", "layer_types")
#: Where the RoPE frequencies come from: the config's RoPE settings as its class resolves them
#: ("config"), its ``rope_parameters`` keyed by layer type, each layer's by ``layer_types[i]``
#: ("layer_type"), or transformers' default base 10000 over the rotated dims, for a module that builds
#: its own table from no RoPE setting at all ("default", GPT-J's sinusoid table).
ROPE_SOURCES = ("config", "layer_type", "default")
#: How the score scale follows from the config: d_k^-1/2 ("head_dim"), 1 ("one"), a setting's value
#: ("key:<name>") or its inverse square root ("rsqrt:<name>"); "constant" keeps the twin's number,
#: only where no law explains it (then a model whose d_k differs from the twin's is not covered).
SCALE_LAWS = ("head_dim", "one", "key:", "rsqrt:", "constant")
#: Settings that may name the rotated dims of each head (tried, not trusted: the reproduction decides).
ROTARY_DIM_KEYS = ("rotary_dim",)


@dataclass(frozen=True)
class FoundNorm:
    """A q/k norm found on the projections' outputs: module names relative to the layer."""

    kind: str                      # "rms" | "layer"
    scope: str                     # "head" | "projection"
    eps: float
    q_module: str
    k_module: str
    gain_offset: float = 0.0
    bias: bool = False             # a LayerNorm's bias after the gain (Phi's, Persimmon's q/k LayerNorms)
    heads_list: str | None = None  # one norm module per head, ``{q_module}.{heads_list}.{h}`` (StableLM's norms)


@dataclass(frozen=True)
class FoundCross:
    """A cross-attention block found after the self-attention block of each layer (queries from the
    layer, keys and values from the encoder's states): module names relative to the layer."""

    attention_module: str
    output_module: str | None
    projections: tuple[Projection, ...]
    qk_norm: FoundNorm | None = None     # a q/k norm of its own (Mllama's cross layers: per-head RMS gains)


@dataclass(frozen=True)
class LatentModules:
    """A multi-head latent attention block found by the trace (:mod:`idinspect.automatic.latent`):
    module names relative to the layer, and the settings that count its widths."""

    q: str | None                  # queries straight from x (W_Q), where there is no query latent
    q_a: str | None                # W_QA, its norm and W_QB, where there is one
    q_norm: str | None
    q_b: str | None
    kv_a: str                      # [W_KVA | W_KR]: the key/value latent, then the shared rotary key
    kv_norm: str
    kv_b: str                      # per head [W_KB | W_VB]
    o: str
    q_a_bias: bool
    kv_a_bias: bool
    o_bias: bool
    eps_q: float | None
    eps_kv: float
    settings: tuple[tuple[str, str], ...]   # (width, setting): q_lora_rank, kv_lora_rank, qk_nope/rope_head_dim, v_head_dim


@dataclass(frozen=True)
class FoundLayout:
    """Layout facts of one model type's attention, as found in a live module."""

    model_type: str
    layer_container: str                        # relative to the base model: "layers", "encoder.layer"
    attention_module: str                       # relative to the layer: "self_attn", "attention.self"
    output_module: str | None                   # relative to the layer, where the module's output is not W_O's
    projections: tuple[Projection, ...]
    positional: str                             # one of POSITIONAL_CHOICES
    partial_rotary: bool
    scale: float
    causal: bool
    qk_norm: FoundNorm | None = None
    model_tensors: dict[str, str] = field(default_factory=dict)
    window: str = "none"                        # one of WINDOW_CHOICES
    softcap: str | None = None                  # the config key of the scores' soft cap c (s -> c tanh(s / c))
    kv_heads: str = "config"                    # "config": num_key_value_heads (else H); "one": multi-query
    rope: str = "config"                        # one of ROPE_SOURCES
    rotary_dim_key: str | None = None           # a setting naming the rotated dims of each head (GPT-J's rotary_dim)
    rope_layers_key: str | None = None          # a per-layer 0/1 setting: 1 = RoPE, 0 = none (SmolLM3's no_rope_layers)
    scale_law: str = "constant"                 # one of SCALE_LAWS (with the setting's name)
    scale_by_layer: bool = False                # the scale divided by layer index + 1 (GPT-2's inverse layer scale)
    window_offset: int = 0                      # the window the module applies is config.sliding_window + this
    sinks: str | None = None                    # the attention sinks' tensor [H], relative to the layer
    cross: FoundCross | None = None             # a cross-attention block in every layer
    relative: str | None = None                 # T5's relative-position table [buckets, H], relative to the layer
    relative_per_layer: bool = False            # every layer holds its own table (else layer 0's is shared)
    relative_distance_key: str | None = None    # the setting holding the buckets' largest distance
    relative_bidirectional: bool = True         # buckets both ways (encoders) or past only
    stack: str = ""                             # the stack's name where the model has two ("encoder", "decoder")
    layers_key: str = "num_hidden_layers"       # the setting that counts this stack's layers
    relative_table: str | None = None           # a relative-position table [buckets, H] of the model's (MPNet's), below the prefix
    relative_keyword: str | None = None         # the attention call's argument that carries its lookup
    relative_distance: int | None = None        # the buckets' largest distance, where no setting holds it
    relative_tokens: int = 0                    # the sequence length that reaches every bucket
    alibi_scale: str = "none"                   # ALiBi's slopes as published ("none") or over sqrt(d_k) ("head_dim")
    alibi_rounding: str | None = None           # the dtype the module rounds the slopes to ("bfloat16": Falcon)
    mla: LatentModules | None = None            # multi-head latent attention's modules (adapters/inferred_latent.py)
    rope_polar: bool = False                    # cos and sin as torch.polar forms them from float32 angles (complex64:
                                                # DeepSeek-V2's latent RoPE, Llama 4's complex RoPE)
    group_list: str | None = None               # layers kept in groups: each group's list ("albert_layers")
    groups_key: str | None = None               # the setting counting the groups (layer_container's entries)
    group_layers_key: str | None = None         # the setting counting each group's layers
    config_key: str | None = None               # a tower's sub-config ("text_config"): its settings are read there
    chunk_key: str | None = None                # the setting of chunked attention's chunk size (Llama 4's)
    chunk_layers: str = "all"                   # "all", or "layer_types": the layers layer_types marks chunked_attention
    temperature_keys: tuple[str, str] | None = None   # (floor_scale, attn_scale) settings of query temperature tuning
    temperature_layers: str = "all"             # "all", or "norope": the layers rope_layers_key flags 0
    l2_norm_eps_key: str | None = None          # a weightless L2 (RMS) q/k norm after RoPE, eps from this setting
    l2_norm_layers: str = "all"                 # "all", or "rope": the layers rope_layers_key flags 1
    cross_layers_key: str | None = None         # the setting listing the layers that hold only the cross block (Mllama's)
