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
attention projections and pass. Only headers are read.
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


def check_coverage(adapter, reader: TensorReader) -> None:
    """Raise :class:`IdinspectError` naming every attention-like tensor the adapter does not read."""
    unread = unread_attention_tensors(adapter, reader)
    if not unread:
        return
    names = ", ".join(unread[:LISTED]) + (f" and {len(unread) - LISTED} more" if len(unread) > LISTED else "")
    raise IdinspectError(f"{len(unread)} attention tensor{'s' if len(unread) > 1 else ''} that the {adapter.family} "
                         f"adapter does not read: {names}; idinspect would leave them out of every count, so it "
                         "refuses (this layout is not supported: report it with the model's config.json)")


__all__ = ["ATTENTION_WORDS", "check_coverage", "unread_attention_tensors"]
