"""What both routes to the balanced form return: the gauge-fixed factors and their spectra."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Balanced:
    """The gauge-fixed attention factors of one layer (float64) and the values that decide uniqueness.

    W_Q [H, d, d_k], W_K [G, d, d_k], W_V [G, d, d_v], W_O [H, d_v, d]; biases [H or G, width] or
    None (``b_V`` only where it is live; the caller keeps the folded zeros). ``s_qk`` [G, n_U]: QK
    singular values on the unrotated dims (None without them); ``principal`` [G, P, 2] and
    ``dead`` [G, P]: each rotary plane's principal values and zero-factor flag (None without
    RoPE); ``s_vo`` [G, d_v]: VO singular values. All descending.
    """

    W_Q: torch.Tensor
    b_Q: torch.Tensor | None
    W_K: torch.Tensor
    b_K: torch.Tensor | None
    W_V: torch.Tensor
    b_V: torch.Tensor | None
    W_O: torch.Tensor
    s_qk: torch.Tensor | None
    principal: torch.Tensor | None
    dead: torch.Tensor | None
    s_vo: torch.Tensor
    head_grams: tuple[torch.Tensor, torch.Tensor] | None = None
