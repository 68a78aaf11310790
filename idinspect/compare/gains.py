"""The norm gain that multiplies a layer's attention input, read from the checkpoint by name.

A residual rotation x -> x R only preserves the function once each norm's gain g is folded into
the projections that read the norm (W -> diag(g) W): the gain is a diagonal matrix that does not
commute with R. Comparison therefore works on the folded projections diag(g) W_Q, diag(g) W_K,
diag(g) W_V of both models, whatever either stores in its gain.

Which norm feeds block i is family knowledge and lives in the adapters
(:meth:`~idinspect.adapters.Adapter.input_norm_keys`: ``pre_norm`` names the norm in front of the
attention, ``post_norm`` the embeddings' norm and the previous layer's output norm). A family that
declares none folds nothing (``gains_folded`` false in the result).

Some families store w and normalise with the gain offset + w (Gemma: 1 + w; the adapter's
``norm_gain_offset``). The gain is then formed in float64 and each entry's rounding is bounded
absolutely: a stored w_j (1 + delta) gives offset + w_j + w_j delta, so |d g_j| <= u |w_j|, which
:func:`.invariants.layer_invariants` turns into a rounding of each folded head (near-zero gains
whose rounding is large relative to them weigh only as much as the rows they scale).
"""

from __future__ import annotations

import torch


def attention_input_gain_key(model, i: int) -> str | None:
    """The checkpoint name of the gain feeding block ``i``'s attention, or None if not stored."""
    return next((k for k in model.adapter.input_norm_keys(i) if k in model.reader), None)


def attention_input_gain(model, i: int) -> torch.Tensor | None:
    """The gain g [d] feeding layer ``i``'s attention (stored dtype), or None where none is stored."""
    key = attention_input_gain_key(model, i)
    if key is None:
        return None
    g = model.reader.get(key)
    return g if g.dim() == 1 else None


def attention_input_gain_and_rounding(model, i: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(gain [d], |d gain| [d] or None) of the norm feeding layer ``i``, or None where none is stored.
    The second item is None where the stored tensor is the gain (its rounding is its dtype's, relative);
    with a gain offset (see the module docstring) the gain is offset + w in float64 and the bound is u |w|."""
    g = attention_input_gain(model, i)
    if g is None:
        return None
    offset = float(getattr(model.adapter, "norm_gain_offset", 0.0) or 0.0)
    if not offset:
        return g, None
    u = torch.finfo(g.dtype).eps / 2 if g.is_floating_point() else 0.0
    w = g.to(torch.float64)
    return w + offset, u * w.abs()
