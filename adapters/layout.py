"""Tensor layouts as data: where each projection of an attention block lives and how it is stored.

A family's adapter describes each attention block as a tuple of :class:`Projection` s. A
projection is one stored module (``{module}.weight`` and, if present, ``{module}.bias``) that
holds one or more roles:

    roles "q", "k", "v"      weight [n*hd, d] (nn.Linear, y = x W^T + b) or [d, n*hd] (Conv1D, y = x W + b)
    role  "o"                weight [d, H*hd] (nn.Linear)                or [H*hd, d] (Conv1D)
    fused "qkv", "kv", ...   the roles' output rows stacked in the order ``layout`` names:

    "blocks"     [Q (H*hd) | K (G*hd) | V (G*hd)]  in the order of ``roles`` (Phi-3, GPT-2, ModernBERT, StarCoder)
    "per_head"   [H, 3, hd]: head h's q, k, v rows adjacent (GPT-NeoX, BLOOM, legacy Falcon; needs G = H)
    "grouped"    [G, r + 2, hd]: a kv group's r query heads, then its key, then its value (Falcon's
                 new_decoder_architecture)

Every layout is a permutation of output rows, so reading gathers rows and writing scatters them
back: read -> write is bit-exact. Nothing here knows any mathematics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

BlockKind = Literal["self", "cross", "shared"]
FusedLayout = Literal["blocks", "per_head", "grouped"]


@dataclass(frozen=True)
class Projection:
    """One stored module of an attention block: its name relative to the layer and what it holds."""

    module: str                    # e.g. "self_attn.q_proj", "attn.c_attn", "attention.output.dense"
    roles: str                     # "q", "k", "v", "o" or a fused run such as "qkv" / "kv"
    bias: bool = True
    conv1d: bool = False           # stored [in, out] (GPT-2's Conv1D) instead of nn.Linear's [out, in]
    layout: FusedLayout = "blocks"

    @property
    def weight_name(self) -> str:
        return f"{self.module}.weight"

    @property
    def bias_name(self) -> str:
        return f"{self.module}.bias"


@dataclass(frozen=True)
class Block:
    """One attention block of a layer: ``kind`` and the projections that hold W_Q, W_K, W_V, W_O.

    ``kind``: "self" (queries, keys and values from the same stream), "cross" (keys and values from
    the encoder's output), "shared" (one block whose weights every layer reuses, e.g. ALBERT).
    """

    kind: BlockKind
    projections: tuple[Projection, ...]

    def projection_for(self, role: str) -> Projection:
        for p in self.projections:
            if role in p.roles:
                return p
        raise KeyError(role)


def fused_rows(layout: FusedLayout, roles: str, counts: dict[str, int], head_dim: int) -> dict[str, torch.Tensor]:
    """Row indices [counts[role] * head_dim] of each role inside a fused projection's output rows.

    ``counts`` gives the number of heads per role (q: H, k and v: G). Rows come out head-major,
    as :func:`heads_from_linear_rows` expects.
    """
    hd = head_dim
    if layout == "blocks":
        out, start = {}, 0
        for role in roles:
            n = counts[role] * hd
            out[role] = torch.arange(start, start + n)
            start += n
        return out
    if layout == "per_head":
        n = counts[roles[0]]
        if any(counts[r] != n for r in roles):
            raise ValueError(f"per-head fused layout needs equal head counts, got {counts}")
        base = torch.arange(n)[:, None] * (len(roles) * hd)
        return {r: (base + c * hd + torch.arange(hd)[None, :]).reshape(-1) for c, r in enumerate(roles)}
    if layout == "grouped":
        if roles != "qkv":
            raise ValueError(f"grouped fused layout holds qkv, got {roles!r}")
        H, G = counts["q"], counts["k"]
        r = H // G
        group = torch.arange(G)[:, None, None] * ((r + 2) * hd)
        q = (group + torch.arange(r)[None, :, None] * hd + torch.arange(hd)[None, None, :]).reshape(-1)
        k = (torch.arange(G)[:, None] * ((r + 2) * hd) + r * hd + torch.arange(hd)[None, :]).reshape(-1)
        return {"q": q, "k": k, "v": k + hd}
    raise ValueError(f"unknown fused layout {layout!r}")


def head_rows(t: torch.Tensor, index: torch.Tensor, head_dim: int) -> torch.Tensor:
    """``t[index]`` split into heads: [n, head_dim, *rest] for a fused weight [rows, d] or bias [rows].

    A strided view where the rows are n evenly spaced runs of ``head_dim`` (every "blocks" and
    "per_head" role, "grouped" keys and values), a gathered copy otherwise ("grouped" queries). A
    view costs no copy and, on the shape-only (meta) reader, no indexing kernel.
    """
    n = index.numel() // head_dim
    rest = tuple(t.shape[1:])
    if n > 0 and n * head_dim == index.numel():
        runs = index.reshape(n, head_dim)
        start = int(runs[0, 0])
        step = int(runs[1, 0]) - start if n > 1 else head_dim
        if step >= head_dim and torch.equal(runs, start + step * torch.arange(n)[:, None] + torch.arange(head_dim)):
            s0, *s_rest = t.stride()
            return t.as_strided((n, head_dim, *rest), (step * s0, s0, *s_rest), t.storage_offset() + start * s0)
    return t[index].reshape(-1, head_dim, *rest)


# nn.Linear layouts: weight [out, in], y = x W^T + b. ------------------------------------------------

def heads_from_linear_rows(weight: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """weight [n*hd, d] -> [n, d, hd], head h = weight[h*hd:(h+1)*hd, :].T."""
    return weight.reshape(n, head_dim, weight.shape[1]).transpose(1, 2)


def linear_rows_from_heads(W: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_from_linear_rows`: [n, d, hd] -> [n*hd, d]."""
    n, d, hd = W.shape
    return W.transpose(1, 2).reshape(n * hd, d)


def heads_from_linear_cols(weight: torch.Tensor, n: int, head_dim: int) -> torch.Tensor:
    """Output projection weight [d, n*hd] -> W_O [n, hd, d], head h = weight[:, h*hd:(h+1)*hd].T."""
    return weight.T.reshape(n, head_dim, weight.shape[0])


def linear_cols_from_heads(W_O: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`heads_from_linear_cols`: [n, hd, d] -> [d, n*hd]."""
    n, hd, d = W_O.shape
    return W_O.reshape(n * hd, d).T
