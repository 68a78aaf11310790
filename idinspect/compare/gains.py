"""The norm gain that multiplies a layer's attention input, read from the checkpoint by name.

A residual rotation x -> x R only preserves the function once each norm's gain g is folded into
the projections that read the norm (W -> diag(g) W): the gain is a diagonal matrix that does not
commute with R. Comparison therefore works on the folded projections diag(g) W_Q, diag(g) W_K,
diag(g) W_V of both models, whatever either stores in its gain.

Which norm feeds layer i's attention (prefix and container from the model's adapter):

- pre-norm families, the norm in front of the attention of block i: Llama, Mistral, Mixtral,
  Qwen2 ``input_layernorm``; GPT-2, GPTBigCode ``ln_1``; Falcon ``ln_attn`` (new decoder
  architecture) or ``input_layernorm``; OPT ``self_attn_layer_norm`` (only when
  ``do_layer_norm_before``: the post-norm OPT-350m layout folds nothing);
  BLOOM ``input_layernorm``; ModernBERT ``attn_norm`` (its first block has none: the embeddings'
  ``embeddings.norm``);
- post-norm BERT-layout families (BERT, RoBERTa, XLM-RoBERTa, ELECTRA; DistilBERT; ALBERT): the
  previous block's output norm ``output.LayerNorm`` (``output_layer_norm``,
  ``full_layer_layer_norm``), for layer 0 the embeddings' ``embeddings.LayerNorm`` (skipped where
  the embedding size is not the hidden size, as in ELECTRA and ALBERT).

A family not listed folds nothing (``gains_folded`` false in the result).
"""

from __future__ import annotations

import torch


#: family -> suffixes (relative to block i) of the norm in front of its attention, tried in order.
PRE_NORM = {"llama": ("input_layernorm.weight",), "gpt2": ("ln_1.weight",), "gpt_bigcode": ("ln_1.weight",),
            "falcon": ("ln_attn.weight", "input_layernorm.weight"), "opt": ("self_attn_layer_norm.weight",),
            "bloom": ("input_layernorm.weight",), "modernbert": ("attn_norm.weight",)}
#: Pre-norm families whose first block has no norm of its own (an identity): the embeddings' norm feeds it.
FIRST_BLOCK_NORM = {"modernbert": "embeddings.norm.weight"}
#: family -> (embeddings norm relative to the prefix, previous block's output norm relative to block i - 1).
POST_NORM = {"bert": ("embeddings.LayerNorm.weight", "output.LayerNorm.weight"),
             "distilbert": ("embeddings.LayerNorm.weight", "output_layer_norm.weight"),
             "albert": ("embeddings.LayerNorm.weight", "full_layer_layer_norm.weight")}


def attention_input_gain_key(model, i: int) -> str | None:
    """The checkpoint name of the gain feeding layer ``i``'s attention, or None if not stored."""
    adapter = model.adapter
    family = getattr(adapter, "family", None)
    sites = adapter.sites
    site = sites[i]
    if family in PRE_NORM:
        if family == "opt" and not getattr(model.config, "do_layer_norm_before", True):
            return None
        keys = [adapter.key(site, suffix) for suffix in PRE_NORM[family]]
        if i == 0 and family in FIRST_BLOCK_NORM:
            keys.append(f"{adapter.prefix}{FIRST_BLOCK_NORM[family]}")
    elif family in POST_NORM:
        embeddings, block = POST_NORM[family]
        first = i == 0 or sites[i - 1].stack != site.stack
        keys = [f"{adapter.prefix}{embeddings}" if first else adapter.key(sites[i - 1], block)]
    else:
        return None
    return next((k for k in keys if k in model.reader), None)


def attention_input_gain(model, i: int) -> torch.Tensor | None:
    """The gain g [d] feeding layer ``i``'s attention (stored dtype), or None where none is stored."""
    key = attention_input_gain_key(model, i)
    if key is None:
        return None
    g = model.reader.get(key)
    return g if g.dim() == 1 else None
