"""Step 1 of the balanced gauge: remove the inert parts of the biases.

- Key bias on unrotated dims is a no-op: <q_i, b_K> is constant over keys j and cancels in the
  softmax. Those entries of b_K [G, d_k] are set to zero (all of them without RoPE). Not under
  soft-capping or sinks, where the softmax is not shift-invariant: there b_K is live and kept.
  softmax. Those entries of b_K [G, d_k] are set to zero (all of them without RoPE).
  Under a q/k norm no key bias is a no-op (the norm is not shift-invariant): nothing is zeroed.
- Value bias is absorbable when an output bias exists (softmax rows sum to one):
  b_O += sum_h b_V^{g(h)} W_O^h and b_V = 0. Not with sinks (rows sum to less than one).
"""

from __future__ import annotations

import torch

from ...layer.attention_layer import AttentionLayer
from .structure import noop_key_bias_columns, value_bias_absorbable


def effective_output_bias(layer: AttentionLayer) -> torch.Tensor:
    """b_O + sum_h b_V^{g(h)} W_O^h [d] (zeros where the layer has neither bias)."""
    out = layer.b_O.clone() if layer.b_O is not None else layer.W_O.new_zeros(layer.d_model)
    if layer.b_V is not None:
        kv = torch.arange(layer.n_heads) // layer.group_size
        out = out + torch.einsum("hv,hvd->d", layer.b_V[kv], layer.W_O)
    return out


def fix_biases(layer: AttentionLayer) -> tuple[AttentionLayer, int, bool]:
    """(layer with no-op key bias zeroed and value bias folded, key-bias dims zeroed, folded?)."""
    changes: dict[str, torch.Tensor] = {}
    zeroed = 0
    cols = list(noop_key_bias_columns(layer))
    if layer.b_K is not None and cols:
        b_K = layer.b_K.clone()
        b_K[:, cols] = 0
        changes["b_K"] = b_K
        zeroed = layer.n_kv_heads * len(cols)
    folded = value_bias_absorbable(layer)
    if folded:
        changes["b_O"] = effective_output_bias(layer)
        changes["b_V"] = torch.zeros_like(layer.b_V)
    return layer.replace(**changes), zeroed, folded
