"""The canonical per-head attention form every adapter maps onto.

Row-vector convention (docs/mathematics.md):

    q^h = x W_Q^h + b_Q^h            W_Q [H, d, d_k]
    k^g = x W_K^g + b_K^g            W_K [G, d, d_k]
    v^g = x W_V^g + b_V^g            W_V [G, d, d_v]
    out = sum_h softmax(scale * <q^h R, k^g(h) R>) v^g(h) W_O^h + b_O      W_O [H, d_v, d]

Two optional data fields change the score and the softmax (docs/mathematics.md, "Soft-capping and
attention sinks"): ``logit_softcap`` c replaces each score s by c tanh(s / c) before the mask
(Gemma 2); ``sinks`` [H] adds one learned logit per head to every softmax row and drops its
probability, so a row's weights over the real keys sum to less than one (gpt-oss).
With :class:`QKNorm` (Qwen3, OLMo2, Gemma 3, Cohere) q^h and k^g are normalised, before RoPE:
q^h <- n(q^h) (gain_offset + gain^h), n the RMS / LayerNorm / L2 map over each head or the
whole projection; Llama 4 normalises after RoPE (``QKNorm.after_rope``).
Two more fields change only what a query sees (docs/mathematics.md, "Normalised queries and keys"):
``query_temperature`` (:class:`QueryTemperature`) multiplies query i by a scalar of its position
(Llama 4's layers without RoPE), and ``attention_chunk`` c lets query i see key j only when
i // c == j // c (Llama 4's chunked attention), a mask like ``sliding_window``.

Query head h reads key/value head g(h) = h // (H / G) (Hugging Face ``repeat_kv`` order).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch

PositionalKind = Literal["none", "absolute", "rope", "alibi", "relative"]
RotaryPairing = Literal["half", "interleaved"]

#: Features that change the mathematics; later stages refuse a layer carrying one they do not model.
#: (Soft-capping and sinks are modelled: they are the data fields ``logit_softcap`` and ``sinks``.)
KNOWN_FLAGS = frozenset({"qk_norm", "qkv_clip"})

WEIGHT_ROLES = ("W_Q", "W_K", "W_V", "W_O")
BIAS_ROLES = ("b_Q", "b_K", "b_V", "b_O")
ROLES = WEIGHT_ROLES + BIAS_ROLES


@dataclass(frozen=True)
class RotarySpec:
    """RoPE as Hugging Face applies it to the first ``rotary_dim`` dims of each head.

    ``inv_freq`` [rotary_dim / 2] is what transformers' rope-init function gives for the config,
    in the dtype it computes it (float32): the default and llama3 types are computed op for op in
    :mod:`idinspect.sources.rope_config` (pinned bit for bit by tests), every other type by transformers itself.
    Plane p rotates dims (p, p + rotary_dim/2) for ``pairing="half"`` (rotate_half) or
    (2p, 2p + 1) for ``"interleaved"`` (GPT-J), by the angle ``t * inv_freq[p]``; cos and sin are
    multiplied by ``attention_factor``. ``polar``: cos and sin come from ``torch.polar`` (Llama 4's
    complex RoPE), whose float32 cos differs from ``torch.cos`` by up to one ulp.
    """

    pairing: RotaryPairing
    rotary_dim: int
    inv_freq: torch.Tensor
    attention_factor: float = 1.0
    rope_type: str = "default"
    polar: bool = False

    def plane_columns(self) -> list[tuple[int, int]]:
        """Column pairs (i, j) of each rotary plane within a head, in plane order."""
        half = self.rotary_dim // 2
        if self.pairing == "half":
            return [(p, p + half) for p in range(half)]
        return [(2 * p, 2 * p + 1) for p in range(half)]


@dataclass(frozen=True)
class RelativeBias:
    """T5's bucketed relative-position bias, added to the attention logits.

    ``table`` [num_buckets, H]: head h's logit for query i and key j gains
    ``table[bucket(j - i), h]`` with T5's bucketing (:func:`idinspect.layer.relative.relative_buckets`):
    ``bidirectional`` (encoder) or past-only (decoder), ``max_distance``. The table lives in layer 0
    of its stack and every layer of the stack reuses it; ``owned`` says whether this block holds it
    (its parameters are counted there, once).
    """

    table: torch.Tensor
    bidirectional: bool
    max_distance: int
    owned: bool
    tensor_name: str = ""

    @property
    def num_buckets(self) -> int:
        return int(self.table.shape[0])


@dataclass(frozen=True)
class Positional:
    """How positions enter attention: nothing, absolute embeddings (outside), RoPE, ALiBi or T5's
    relative-position bias (``relative``)."""

    kind: PositionalKind
    rotary: RotarySpec | None = None
    alibi_slopes: torch.Tensor | None = None
    relative: RelativeBias | None = None

    @property
    def rotary_dim(self) -> int:
        return self.rotary.rotary_dim if self.rotary is not None else 0


QKNormKind = Literal["rms", "layer", "l2"]
QKNormScope = Literal["head", "projection"]


@dataclass(frozen=True)
class QKNorm:
    """A norm on queries and keys between the projection and RoPE, or after RoPE (applied to q and k alike).

    ``kind``: ``"rms"``  n(y) = y / sqrt(mean(y^2) + eps)                      (Qwen3, OLMo2, Gemma 3)
              ``"layer"`` n(y) = (y - mean y) / sqrt(mean((y - mean y)^2) + eps)  (Cohere, no bias)
              ``"l2"``   ``"rms"`` without gains                                (Llama 4)
    ``scope``: the mean runs over each head's d_k dims (``"head"``) or over the whole projection's
    H d_k (G d_k for keys) dims (``"projection"``, OLMo2).
    ``after_rope``: the norm acts on the rotated q and k (Llama 4), not between projection and RoPE.
    ``q_gain`` / ``k_gain`` as stored: [d_k] (one vector every head shares), [H, d_k] / [G, d_k]
    (per head), [H d_k] / [G d_k] (per projection), or None (``"l2"``); the multiplier is
    ``gain_offset + gain`` (Gemma: 1 + w). ``q_bias`` / ``k_bias``: a bias added after the gain
    (Phi's nn.LayerNorm), shaped as the gains, or None. ``tensor_names``: ``{"q_gain": ..., ...}``.
    """

    kind: QKNormKind
    scope: QKNormScope
    eps: float
    q_gain: torch.Tensor | None = None
    k_gain: torch.Tensor | None = None
    gain_offset: float = 0.0
    tensor_names: dict[str, str] = field(default_factory=dict)
    q_bias: torch.Tensor | None = None
    k_bias: torch.Tensor | None = None
    after_rope: bool = False

    @property
    def shared_gain(self) -> bool:
        """One gain vector for every head (stored [d_k])."""
        return self.q_gain is not None and self.q_gain.dim() == 1 and self.scope == "head"

    def gains(self, heads: int, d_k: int, which: str) -> torch.Tensor | None:
        """The multiplier gain_offset + gain per head, [heads, d_k] (``which``: "q" or "k"), or None."""
        g = self.q_gain if which == "q" else self.k_gain
        if g is None:
            return None
        return _per_head(g, heads, d_k) + self.gain_offset

    def biases(self, heads: int, d_k: int, which: str) -> torch.Tensor | None:
        """The bias added after the gain, per head [heads, d_k], or None."""
        b = self.q_bias if which == "q" else self.k_bias
        return None if b is None else _per_head(b, heads, d_k)

    def parameter_count(self) -> int:
        return sum(t.numel() for t in (self.q_gain, self.k_gain, self.q_bias, self.k_bias) if t is not None)

    def to(self, dtype: torch.dtype) -> "QKNorm":
        return dataclasses.replace(self, **{n: getattr(self, n).to(dtype) for n in ("q_gain", "k_gain", "q_bias", "k_bias")
                                            if getattr(self, n) is not None})


@dataclass(frozen=True)
class QueryTemperature:
    """Attention temperature tuning (Llama 4's layers without RoPE): the query at position t is
    multiplied by

        tau(t) = 1 + attn_scale * log(1 + floor((t + 1) / floor_scale))

    after the projection (bias included), computed in float32 as transformers does. tau depends on
    the position only, never on a weight: it rescales each score row and changes no count.
    """

    floor_scale: float
    attn_scale: float

    def scales(self, positions: torch.Tensor) -> torch.Tensor:
        """tau at integer ``positions`` [T], float32 (transformers' arithmetic, op for op)."""
        return torch.log1p(torch.floor((positions.float() + 1.0) / self.floor_scale)) * self.attn_scale + 1.0


def _per_head(t: torch.Tensor, heads: int, d_k: int) -> torch.Tensor:
    """A stored norm parameter ([d_k] shared, [heads, d_k] or [heads d_k]) as [heads, d_k]."""
    return t.reshape(-1, d_k).expand(heads, d_k) if t.numel() == d_k else t.reshape(heads, d_k)


@dataclass
class AttentionLayer:
    """One attention layer in canonical per-head form.

    Tensors keep the checkpoint's dtype; call :meth:`to` (e.g. ``layer.to(torch.float64)``) for
    arithmetic. ``tensor_names`` maps each role (``"W_Q"``, ``"b_K"``, ...) to where it lives in the
    checkpoint, e.g. ``"h.0.attn.c_attn.bias[8:16]"`` for GPT-2's fused key bias.
    """

    #: The form this layer is in (:func:`idinspect.forms.form_of` maps it to its mathematics).
    form: ClassVar[str] = "per_head"

    index: int
    W_Q: torch.Tensor
    W_K: torch.Tensor
    W_V: torch.Tensor
    W_O: torch.Tensor
    b_Q: torch.Tensor | None = None
    b_K: torch.Tensor | None = None
    b_V: torch.Tensor | None = None
    b_O: torch.Tensor | None = None
    scale: float = 1.0
    causal: bool = True
    positional: Positional = field(default_factory=lambda: Positional("none"))
    flags: frozenset[str] = frozenset()
    sliding_window: int | None = None
    tensor_names: dict[str, str] = field(default_factory=dict)
    #: "self", "cross" (keys and values from the encoder's output) or "shared" (one block every layer reuses).
    kind: str = "self"
    #: The stack the block belongs to ("" for one-stack models; "encoder", "decoder", "text", "vision").
    stack: str = ""
    #: The block's layer number within its stack (``index`` numbers blocks flat across the model).
    layer: int | None = None
    #: Soft-capping constant c: scores s -> c tanh(s / c) before the mask (Gemma 2); None: no cap.
    logit_softcap: float | None = None
    #: Attention sinks [H]: head h's softmax row gains the logit sinks[h], whose probability is dropped
    #: (gpt-oss); None: none. Its checkpoint name is ``tensor_names["sinks"]``.
    sinks: torch.Tensor | None = None
    #: Normalised queries and keys (:class:`QKNorm`), or None.
    qk_norm: QKNorm | None = None
    #: Chunked attention: query i sees key j only where i // c == j // c (Llama 4); None: no chunks.
    attention_chunk: int | None = None
    #: A position-dependent scalar on every query (:class:`QueryTemperature`, Llama 4); None: none.
    query_temperature: QueryTemperature | None = None

    def __post_init__(self) -> None:
        unknown = set(self.flags) - KNOWN_FLAGS
        if unknown:
            raise ValueError(f"unknown layer flags {sorted(unknown)}; known: {sorted(KNOWN_FLAGS)}")

    # shapes -----------------------------------------------------------------
    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.W_K.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d_k(self) -> int:
        return self.W_Q.shape[2]

    @property
    def d_v(self) -> int:
        return self.W_V.shape[2]

    @property
    def group_size(self) -> int:
        """r = H / G query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    def kv_head(self, h: int) -> int:
        """The key/value head g(h) = h // (H / G) that query head h reads."""
        return h // self.group_size

    @property
    def dtype(self) -> torch.dtype:
        return self.W_Q.dtype

    # tensors ----------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        """Every present role -> tensor."""
        out = {}
        for role in ROLES:
            t = getattr(self, role)
            if t is not None:
                out[role] = t
        return out

    def to(self, dtype: torch.dtype) -> "AttentionLayer":
        """A copy with every tensor converted to ``dtype`` (metadata shared)."""
        moved = {r: t.to(dtype) for r, t in self.tensors().items()}
        if self.sinks is not None:
            moved["sinks"] = self.sinks.to(dtype)
        if self.qk_norm is not None:
            moved["qk_norm"] = self.qk_norm.to(dtype)
        return dataclasses.replace(self, **moved)

    def replace(self, **changes) -> "AttentionLayer":
        return dataclasses.replace(self, **changes)

    def parameter_count(self) -> int:
        """P = H d d_k + G d d_k + G d d_v + H d_v d + bias sizes (+ the relative-position bias table
        where this block holds it, + H sinks, + the q/k norm gains as stored)."""
        rel = self.positional.relative
        table = rel.table.numel() if rel is not None and rel.owned else 0
        sinks = self.sinks.numel() if self.sinks is not None else 0
        gains = self.qk_norm.parameter_count() if self.qk_norm is not None else 0
        return sum(t.numel() for t in self.tensors().values()) + table + sinks + gains

    def validate(self) -> None:
        """Raise ValueError if the shapes are not a consistent canonical layer."""
        H, d, dk = self.W_Q.shape
        G = self.W_K.shape[0]
        dv = self.W_V.shape[2]
        expected = {
            "W_K": (G, d, dk), "W_V": (G, d, dv), "W_O": (H, dv, d),
            "b_Q": (H, dk), "b_K": (G, dk), "b_V": (G, dv), "b_O": (d,),
        }
        if G == 0 or H % G:
            raise ValueError(f"layer {self.index}: {H} query heads do not divide into {G} kv heads")
        if self.sinks is not None:
            expected["sinks"] = (H,)
        if self.logit_softcap is not None and not self.logit_softcap > 0:
            raise ValueError(f"layer {self.index}: logit soft-capping constant {self.logit_softcap} is not positive")
        for role, shape in expected.items():
            t = getattr(self, role)
            if t is not None and tuple(t.shape) != shape:
                raise ValueError(f"layer {self.index}: {role} has shape {tuple(t.shape)}, expected {shape}")
