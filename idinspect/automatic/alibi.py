"""ALiBi's slopes as the module applies them, settled on a twin of the model's own head count.

The slopes m_h depend on H alone (m_h = 2^(-8 (h + 1) / H), BLOOM's extension for H not a power of
two). On the trace twin's 4 heads they are powers of two, which every rounding keeps exactly: whether
the module rounds them (Falcon: to bfloat16, m_h j computed in bfloat16) cannot show there. A layout
settled as ALiBi is therefore settled again on a twin with the model's H heads, among the slopes as
published and rounded to bfloat16: the first that reproduces the module to 1e-10 is the model's, and
where none does (Falcon with H >= 12: its bias round(round(m_h) j) is not linear in j, which no
canonical form of idinspect's holds) the model is refused by name.

Where the slopes are not powers of two, the module's own arithmetic of m_h j rounds too (BLOOM computes
it in float32: about 6e-8 relative): the wide twin tells the slopes apart at :data:`SLOPES_RTOL`, far
above that and far below bfloat16's rounding of a slope (2^-9). The 1e-10 reproduction and the Jacobian
proof stay those of the 4-head twin, where every slope and product is exact.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..errors import IdinspectError
from .settle import settle

#: The slopes' roundings tried, in order: none (BLOOM, MPT), bfloat16 (Falcon's build_alibi_tensor).
ROUNDINGS = (None, "bfloat16")
#: The reproduction the wide twin asks of the slopes (see the module docstring).
SLOPES_RTOL = 1e-6
#: The most heads a twin of the model's own head count gets (its width is 4 H or 8 H).
MAX_HEADS = 256


def settle_alibi(cls: type, error: float, heads: int, wide_twin: Callable[[], object], found: dict, tokens: int,
                 encoder_states: bool) -> tuple[type, float]:
    """(adapter class, worst relative error on the trace twin): ``cls`` itself where its layout is not
    ALiBi, else the layout settled again on ``wide_twin()`` (the model's own ``heads``) among
    :data:`ROUNDINGS` at :data:`SLOPES_RTOL`."""
    layout = cls.found
    if layout.positional != "alibi":
        return cls, error
    H = heads
    if H > MAX_HEADS:
        raise IdinspectError(f"--auto: ALiBi reproduces the module on 4 heads; the model's {H} heads are more than "
                             f"the {MAX_HEADS} a twin settles its slopes' rounding on; an adapter must be written by hand")
    wide = wide_twin()
    layouts = [dataclasses.replace(layout, alibi_rounding=r) for r in ROUNDINGS]
    try:
        settled, _ = settle(wide, layouts, found, tokens, encoder_states, rtol=SLOPES_RTOL)
    except IdinspectError as exc:
        message = str(exc)
        closest = message.rsplit("relative error ", 1)[-1].split(")")[0] if "relative error " in message else "none ran"
        raise IdinspectError(f"--auto: ALiBi reproduces the module on 4 heads, but on a twin of the model's {H} heads "
                             f"no slopes (as published, or rounded to {', '.join(r for r in ROUNDINGS if r)}) do "
                             f"(closest relative error {closest}): its position bias is not linear in position "
                             f"(found {found}); an adapter must be written by hand") from None
    return settled, error


__all__ = ["MAX_HEADS", "ROUNDINGS", "SLOPES_RTOL", "settle_alibi"]
