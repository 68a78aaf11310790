"""Which configuration keys the model's computation reads: verify's config check compares those.

"Same function?" depends on the settings transformers' modelling code reads when it builds and runs
the model (widths, heads, norms' eps, RoPE parameters, softcaps, layer types, ...), not on metadata
(``_name_or_path``, generation token ids, the initialiser's range, dropout rates in eval mode).

The read keys are derived, not listed by hand: every ``config.NAME`` and ``getattr(config, "NAME"``
in the source of the family's transformers modelling module (``modeling_<type>.py`` beside the
config class's ``configuration_<type>.py``), mapped through the config class's ``attribute_map``
(GPT-2's code reads ``num_attention_heads``, its config stores ``n_head``), plus
:data:`ALWAYS_READ` (read by transformers' shared loading code). From these, :data:`NOT_COMPUTED`
are dropped: settings the code reads that do not change the outputs of a model in eval mode with
given weights. A sub-config (``text_config``) is compared key by key the same way under its own class.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from typing import Any

#: Read by transformers' shared code (modeling_utils), not the family's module.
ALWAYS_READ = frozenset({"tie_word_embeddings"})

#: Read by the modelling code but not part of the function computed in eval mode from given weights:
#: token ids (generation and padding bookkeeping; ``pad_token_id`` only sets the embedding's
#: ``padding_idx``, which changes gradients, not outputs, except where position ids are counted
#: from padding: see :func:`read_keys`), the initialiser's scale, dropout rates (eval mode), caching and
#: output switches.
NOT_COMPUTED = frozenset({"bos_token_id", "eos_token_id", "unk_token_id", "sep_token_id", "cls_token_id",
                          "mask_token_id", "decoder_start_token_id", "pad_token_id", "initializer_range",
                          "initializer_factor", "init_std", "use_cache", "output_attentions",
                          "output_hidden_states", "return_dict", "problem_type", "layerdrop",
                          "encoder_layerdrop", "decoder_layerdrop", "gradient_checkpointing",
                          "chunk_size_feed_forward"})
_DROPOUT = re.compile(r"(dropout|_pdrop$|drop_rate$)")
#: Modelling code that numbers positions from the padding token (RoBERTa's family): ``pad_token_id`` is read.
_PADDED_POSITIONS = "create_position_ids_from_input_ids"
#: Never compared (bookkeeping of the file itself).
BOOKKEEPING = frozenset({"dtype", "torch_dtype", "_name_or_path", "transformers_version", "_commit_hash",
                         "_attn_implementation_autoset", "_attn_implementation_internal"})


def config_class(model_type: str):
    """transformers' config class of ``model_type``."""
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]


@functools.lru_cache(maxsize=None)
def read_keys(cls) -> frozenset[str]:
    """Stored keys of config class ``cls`` that its family's modelling code reads and that change
    the computed function (see the module docstring)."""
    source = _modeling_source(cls)
    names = set(re.findall(r"config\.([A-Za-z_]\w*)", source))
    names |= set(re.findall(r"getattr\(\s*(?:self\.)?(?:\w+_)?config,\s*[\"'](\w+)", source))
    names |= ALWAYS_READ
    amap = dict(getattr(cls, "attribute_map", {}) or {})
    names |= {amap[n] for n in list(names) if n in amap}
    kept = {n for n in names if n not in NOT_COMPUTED and not _DROPOUT.search(n)}
    if _PADDED_POSITIONS in source:
        kept.add("pad_token_id")
    return frozenset(kept)


def _modeling_source(cls) -> str:
    module = cls.__module__.replace(".configuration_", ".modeling_")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ""
    with open(spec.origin, encoding="utf-8") as f:
        return f.read()


def full_settings(config) -> dict[str, Any]:
    """Every setting of ``config`` with the config class's defaults filled in (so a key one side
    stores and the other leaves at its default compare equal)."""
    full = config.full_config() if hasattr(config, "full_config") else config
    return full.to_dict()


def split_differences(a: dict, b: dict, model_type: str) -> tuple[list[str], list[str]]:
    """(keys the computation reads that differ, other keys that differ) between two full config dicts;
    a sub-config's keys as ``text_config.NAME``."""
    cls = config_class(model_type) if model_type else None
    read = read_keys(cls) if cls is not None else frozenset()
    sub = dict(getattr(cls, "sub_configs", {}) or {}) if cls is not None else {}
    computed, notes = [], []
    for key in sorted((set(a) | set(b)) - BOOKKEEPING):
        va, vb = a.get(key), b.get(key)
        if va == vb:
            continue
        if key in sub and isinstance(va, dict) and isinstance(vb, dict):
            inner = (va.get("model_type") or vb.get("model_type") or getattr(sub[key], "model_type", ""))
            c, n = split_differences(va, vb, inner)
            computed += [f"{key}.{k}" for k in c]
            notes += [f"{key}.{k}" for k in n]
        elif key in read:
            computed.append(key)
        else:
            notes.append(key)
    return computed, notes


__all__ = ["ALWAYS_READ", "NOT_COMPUTED", "read_keys", "split_differences", "full_settings"]
