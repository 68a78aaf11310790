"""Never count part of a model silently: attention-like tensors that no adapter read are refused by name.

After an adapter has said which tensors make up its attention blocks (:meth:`Adapter.attention_keys`
for every block, plus :meth:`Adapter.positional_keys`, e.g. T5's relative-position bias), every other
stored tensor inside a layer is checked. One that looks like part of attention, by its name (a path
component mentioning attention: ``attn``, ``attention``, ``query``, ``key``, ``value``, ``q_proj``,
``k_proj``, ``v_proj``, ``o_proj``, ``qkv``) and by its shape (a projection of the model's width: 2-D
with a dimension equal to a block's model width, or the 1-D bias of such a module), would otherwise be left
out of every count, total and export check without a word. The model is refused instead, naming the
tensors: a refusal is never a wrong number.

Norms (1-D weights such as GPT-2's ``ln_cross_attn``), buffers, MLPs and embeddings are not
attention projections and pass that first check. The second covers the whole checkpoint: every
stored parameter tensor must be read by an attention block, named by :meth:`Adapter.unanalysed`,
or declared by the adapter as the model's (:attr:`Adapter.model_tensors`: embeddings, position and
relative-bias tables, norms, MLP, head) or as not analysed with a reason
(:attr:`Adapter.not_analysed_tensors`). Any other tensor refuses the run by name, so the
whole-model count can never leave a tensor out. Only headers are read.
"""

from __future__ import annotations

import re

from ..errors import IdinspectError
from .checkpoint import TensorReader

#: Path components that mark a tensor as part of attention (matched case-insensitively).
ATTENTION_WORDS = re.compile(r"attn|attention|query|key|value|q_proj|k_proj|v_proj|o_proj|qkv", re.IGNORECASE)
#: How many names the error lists before counting the rest.
LISTED = 4


def unread_attention_tensors(adapter, reader: TensorReader) -> list[str]:
    """Tensors inside the model's layers that look like attention projections and that the adapter
    does not read, in checkpoint order."""
    claimed = {k for n in range(adapter.num_blocks) for k in adapter.attention_keys(n)}
    claimed.update(adapter.positional_keys())
    widths = {adapter.sizes(site)[3] for site in adapter.sites}   # one per tower where towers differ (CLIP)
    containers = [re.escape(f"{adapter.prefix}{c}.") + r"\d+\.(.+)$" for c in adapter.containers()]
    if not containers:     # every list saved outside the prefix (Mllama's language_model.model.layers): none to look in
        return []
    inside = re.compile("|".join(f"(?:{c})" for c in containers))
    projections: dict[str, tuple[int, ...]] = {}
    for key in reader.keys():
        if key in claimed or adapter.is_buffer(key) or not reader.dtype(key).is_floating_point:
            continue
        m = inside.match(key)
        if m is None:
            continue
        rel = next(g for g in m.groups() if g is not None)
        module = rel.rsplit(".", 1)[0]
        if ATTENTION_WORDS.search(module):
            projections[key] = tuple(reader.shape(key))
    weights = {k.rsplit(".", 1)[0] for k, s in projections.items() if len(s) == 2 and widths & set(s)}
    return [k for k, s in projections.items() if k.rsplit(".", 1)[0] in weights and (len(s) == 2 or len(s) == 1)]


def attention_tensor_names(adapter) -> set[str]:
    """Every stored tensor an attention block reads, plus the tables attention reads besides (T5's
    relative-position bias) and the attention modules listed as not analysed."""
    claimed = {k for n in range(adapter.num_blocks) for k in adapter.attention_keys(n)}
    claimed.update(adapter.positional_keys())
    claimed.update(k for module in adapter.unanalysed() for k in module["tensors"])
    return claimed


def undeclared_tensors(adapter, reader: TensorReader) -> list[str]:
    """Stored parameter tensors (floating point, not buffers) that no block reads and that the adapter
    declares neither as the model's nor as not analysed, in checkpoint order."""
    claimed = attention_tensor_names(adapter)
    return [k for k in reader.keys()
            if k not in claimed and not adapter.is_buffer(k) and reader.dtype(k).is_floating_point
            and adapter.model_component(k) is None and adapter.not_analysed_reason(k) is None]


def inventory(adapter, reader: TensorReader) -> dict[str, int]:
    """Stored parameters per part of the checkpoint: ``attention`` (read by the blocks, with the tables
    attention reads), each declared model component, ``not_analysed``; from headers, each stored tensor
    counted once (a table every block shares is stored, so counted, once). Run after :func:`check_coverage`:
    the parts then add up to every stored parameter."""
    unanalysed = {k for module in adapter.unanalysed() for k in module["tensors"]}
    claimed = attention_tensor_names(adapter) - unanalysed
    out: dict[str, int] = {"attention": 0}
    for k in reader.keys():
        if adapter.is_buffer(k) or not reader.dtype(k).is_floating_point:
            continue
        n = 1
        for s in reader.shape(k):
            n *= s
        part = "attention" if k in claimed else adapter.model_component(k) or "not_analysed"
        out[part] = out.get(part, 0) + n
    return out


def _listed(names: list[str]) -> str:
    return ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")


def check_coverage(adapter, reader: TensorReader) -> None:
    """Raise :class:`IdinspectError` naming every attention-like tensor the adapter does not read,
    then every other tensor it does not declare."""
    unread = unread_attention_tensors(adapter, reader)
    if unread:
        raise IdinspectError(f"{len(unread)} attention tensor{'s' if len(unread) > 1 else ''} that the "
                             f"{adapter.family} adapter does not read: {_listed(unread)}; idinspect would leave them "
                             "out of every count, so it refuses (this layout is not supported: report it with the "
                             "model's config.json)")
    undeclared = undeclared_tensors(adapter, reader)
    if undeclared:
        raise IdinspectError(f"{len(undeclared)} tensor{'s' if len(undeclared) > 1 else ''} that the {adapter.family} "
                             f"adapter neither reads nor declares: {_listed(undeclared)}; idinspect would leave them "
                             "out of the whole-model accounting, so it refuses (this layout is not supported: report "
                             "it with the model's config.json)")


__all__ = ["ATTENTION_WORDS", "attention_tensor_names", "check_coverage", "inventory", "undeclared_tensors",
           "unread_attention_tensors"]
