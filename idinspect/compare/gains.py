"""The norm gain that multiplies a layer's attention input, read from the checkpoint by name.

A residual rotation x -> x R only preserves the function once each norm's gain g is folded into
the projections that read the norm (W -> diag(g) W): the gain is a diagonal matrix that does not
commute with R. Comparison therefore works on the folded projections diag(g) W_Q, diag(g) W_K,
diag(g) W_V of both models, whatever either stores in its gain.

Which norm feeds block i is family knowledge and lives in the adapters
(:meth:`~idinspect.adapters.Adapter.input_norm_keys`: ``pre_norm`` names the norm in front of the
attention, ``post_norm`` the embeddings' norm and the previous layer's output norm). A family that
declares none folds nothing (``gains_folded`` false in the result).
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
