"""The norm gain that multiplies a layer's attention input, read from the checkpoint by name.

A residual rotation x -> x R only preserves the function once each norm's gain g is folded into
the projections that read the norm (W -> diag(g) W): the gain is a diagonal matrix that does not
commute with R. Comparison therefore works on the folded projections diag(g) W_Q, diag(g) W_K,
diag(g) W_V of both models, whatever either stores in its gain.

Which norm feeds layer i's attention (prefix and container from the model's adapter):

- Llama, Mistral, Qwen2 (pre-norm RMSNorm): ``layers.{i}.input_layernorm.weight``;
- GPT-2 (pre-norm LayerNorm): ``h.{i}.ln_1.weight``;
- BERT, RoBERTa (post-norm): the previous block's ``encoder.layer.{i-1}.output.LayerNorm.weight``,
  for layer 0 ``embeddings.LayerNorm.weight``.
"""

from __future__ import annotations

import torch


def attention_input_gain_key(model, i: int) -> str | None:
    """The checkpoint name of the gain feeding layer ``i``'s attention, or None if not stored."""
    adapter = model.adapter
    family = getattr(adapter, "family", None)
    if family == "llama":
        key = adapter.key(i, "input_layernorm.weight")
    elif family == "gpt2":
        key = adapter.key(i, "ln_1.weight")
    elif family == "bert":
        key = f"{adapter.prefix}embeddings.LayerNorm.weight" if i == 0 else adapter.key(i - 1, "output.LayerNorm.weight")
    else:
        return None
    return key if key in model.reader else None


def attention_input_gain(model, i: int) -> torch.Tensor | None:
    """The gain g [d] feeding layer ``i``'s attention (stored dtype), or None where none is stored."""
    key = attention_input_gain_key(model, i)
    if key is None:
        return None
    g = model.reader.get(key)
    return g if g.dim() == 1 else None
