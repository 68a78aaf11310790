"""The canonical form of multi-head latent attention (MLA: DeepSeek-V2/V3 and the models built on them).

MLA does not fit the per-head :class:`~idinspect.layer.attention_layer.AttentionLayer`: keys and
values are not linear in the hidden states (they come out of a normalised latent) and one rotary
key is shared by every head. Row vectors; named shapes:

    d   model width              H   heads
    n   no-position query/key width per head (qk_nope_head_dim)
    e   rotary query/key width (qk_rope_head_dim), one rotary key shared by all heads
    v   value width per head (v_head_dim)
    r_q query latent rank (q_lora_rank; 0: queries straight from x)
    r   key/value latent rank (kv_lora_rank)

    queries   q^h = x W_Q^h                                     W_Q   [H, d, n + e]   (r_q = 0)
              q^h = N_Q(x W_QA + b_QA) W_QB^h                   W_QA  [d, r_q], W_QB [H, r_q, n + e]
    latent    c   = N_KV(x W_KVA + b_KVA)                       W_KVA [d, r]
    keys      k^h = c W_KB^h (no position)                      W_KB  [H, r, n]
              k_R = x W_KR + b_KR (rotary, shared)              W_KR  [d, e]
    values    v^h = c W_VB^h                                    W_VB  [H, r, v]
    scores    s^h_ij = scale (<q^h_i[:n], k^h_j> + <q^h_i[n:] R_i, k_R,j R_j>)
    output    out_i = sum_h sum_j softmax_j(s^h_ij) v^h_j W_O^h + b_O     W_O [H, v, d]

N(z) = z / sqrt(mean(z^2) + eps) * g is an RMSNorm with gain g (``g_Q`` [r_q], ``g_KV`` [r]) and
its own ``eps_Q`` / ``eps_KV``. R_t rotates the e rotary dims in planes (``positional.rotary``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from .attention_layer import Positional

#: Roles in a fixed order (absent ones are None).
LATENT_ROLES = ("W_Q", "W_QA", "b_QA", "g_Q", "W_QB", "W_KVA", "b_KVA", "g_KV", "W_KR", "b_KR", "W_KB", "W_VB",
                "W_O", "b_O")
LATENT_BIAS_ROLES = ("b_QA", "b_KVA", "b_KR", "b_O")


@dataclass
class LatentAttentionLayer:
    """One MLA block in canonical form (see the module docstring for the shapes)."""

    #: The form this layer is in (:func:`idinspect.forms.form_of` maps it to its mathematics).
    form: ClassVar[str] = "latent"

    index: int
    W_KVA: torch.Tensor
    g_KV: torch.Tensor
    W_KR: torch.Tensor
    W_KB: torch.Tensor
    W_VB: torch.Tensor
    W_O: torch.Tensor
    W_Q: torch.Tensor | None = None
    W_QA: torch.Tensor | None = None
    b_QA: torch.Tensor | None = None
    g_Q: torch.Tensor | None = None
    W_QB: torch.Tensor | None = None
    b_KVA: torch.Tensor | None = None
    b_KR: torch.Tensor | None = None
    b_O: torch.Tensor | None = None
    eps_Q: float = 1e-6
    eps_KV: float = 1e-6
    scale: float = 1.0
    causal: bool = True
    positional: Positional = field(default_factory=lambda: Positional("none"))
    flags: frozenset[str] = frozenset()
    sliding_window: int | None = None
    tensor_names: dict[str, str] = field(default_factory=dict)
    kind: str = "self"
    stack: str = ""
    layer: int | None = None

    #: Marks the form for code that handles both canonical forms.
    latent = True

    # shapes -----------------------------------------------------------------
    @property
    def n_heads(self) -> int:
        return self.W_KB.shape[0]

    @property
    def n_kv_heads(self) -> int:
        """Every head has its own no-position key and value (the shared rotary key aside)."""
        return self.n_heads

    @property
    def d_model(self) -> int:
        return self.W_KVA.shape[0]

    @property
    def d_nope(self) -> int:
        return self.W_KB.shape[2]

    @property
    def d_rope(self) -> int:
        return self.W_KR.shape[1]

    @property
    def d_k(self) -> int:
        """Query/key width per head, n + e."""
        return self.d_nope + self.d_rope

    @property
    def d_v(self) -> int:
        return self.W_VB.shape[2]

    @property
    def q_rank(self) -> int:
        """r_q, 0 where queries come straight from the hidden states."""
        return 0 if self.W_QA is None else self.W_QA.shape[1]

    @property
    def kv_rank(self) -> int:
        return self.W_KVA.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.W_KVA.dtype

    # tensors ----------------------------------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        return {role: t for role in LATENT_ROLES if (t := getattr(self, role)) is not None}

    def to(self, dtype: torch.dtype) -> "LatentAttentionLayer":
        return dataclasses.replace(self, **{r: t.to(dtype) for r, t in self.tensors().items()})

    def replace(self, **changes) -> "LatentAttentionLayer":
        return dataclasses.replace(self, **changes)

    def parameter_count(self) -> int:
        """Every weight, bias and norm gain of the block."""
        return sum(t.numel() for t in self.tensors().values())

    def validate(self) -> None:
        """Raise ValueError if the shapes are not a consistent MLA block."""
        H, r, n = self.W_KB.shape
        d, e, v, rq = self.d_model, self.d_rope, self.d_v, self.q_rank
        if (self.W_Q is None) == (self.W_QA is None):
            raise ValueError(f"layer {self.index}: an MLA block has either W_Q or the query latent W_QA, W_QB")
        expected = {"W_KVA": (d, r), "g_KV": (r,), "b_KVA": (r,), "W_KR": (d, e), "b_KR": (e,), "W_VB": (H, r, v),
                    "W_O": (H, v, d), "b_O": (d,), "W_Q": (H, d, n + e), "W_QA": (d, rq), "b_QA": (rq,),
                    "g_Q": (rq,), "W_QB": (H, rq, n + e)}
        for role, shape in expected.items():
            t = getattr(self, role)
            if t is not None and tuple(t.shape) != shape:
                raise ValueError(f"layer {self.index}: {role} has shape {tuple(t.shape)}, expected {shape}")
        if self.W_QA is not None and (self.g_Q is None or self.W_QB is None):
            raise ValueError(f"layer {self.index}: the query latent needs its norm gain and W_QB")
