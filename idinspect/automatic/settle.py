"""Settle (``--auto``'s second step): of the layouts :func:`.infer.candidates` lists, the first whose
canonical form reproduces every block of the traced twin to 1e-10 (what one module does not show:
RoPE pairing and frequencies, the score scale's law, causality, the window rule) becomes the adapter
class; none does: a one-line refusal naming the closest."""

from __future__ import annotations

from ..adapters.inferred import FoundLayout
from ..adapters.inferred_latent import inferred_latent_adapter
from ..errors import IdinspectError
from .trace import affine_kind


def settle(hf, layouts: list[FoundLayout], found: dict, tokens: int = 8, encoder_states: bool | str | None = False,
           rtol: float | None = None):
    """(adapter class, worst relative error) of the first layout whose canonical form reproduces every
    block of ``hf`` to ``rtol`` (default :data:`~idinspect.testing.REFERENCE_RTOL`); a one-line refusal
    with the best attempt where none does. ``encoder_states``: the model takes states for cross-attention
    it has no encoder for (under that keyword where a string)."""
    from ..forms import reference_attention
    from ..sources.checkpoint import StateDictReader
    from ..testing import REFERENCE_RTOL, captured_blocks

    rtol = REFERENCE_RTOL if rtol is None else rtol

    def distance(x: FoundLayout) -> int:
        return int(getattr(getattr(hf.config, x.config_key) if x.config_key else hf.config, x.relative_distance_key))

    distances = [distance(x) for x in layouts if x.relative_distance_key]
    tokens = max([tokens] + [d + 1 for d in distances] + [x.relative_tokens for x in layouts])   # every bucket shows
    best = (float("inf"), None)
    reader = StateDictReader(hf.state_dict())
    norms = tuple({type(m) for m in hf.modules() if "norm" in type(m).__name__.lower() and affine_kind(m) is None})
    exact, blocks = None, None
    for layout in layouts:
        cls = inferred_latent_adapter(layout)
        with_cross_states(cls, encoder_states)
        try:
            adapter = cls(hf.config, reader)
            if exact is None:     # the norms' and the attention module's own float32 casts skipped on float64
                exact = (*norms, type(adapter.live_modules(hf, 0)[0]))
            cls.exact_classes = exact
            if blocks is None:    # every candidate reads the same modules: one forward pass for all
                blocks = captured_blocks(hf, adapter, tokens, 0)
            worst = 0.0
            for n, (x, y, x_kv) in enumerate(blocks):
                out = reference_attention(adapter.read_layer(n), x, x_kv=x_kv)
                worst = max(worst, float((out - y).abs().max() / y.abs().max().clamp_min(1e-300)))
        except (IdinspectError, ValueError, RuntimeError, KeyError, IndexError):
            continue
        if worst <= rtol:
            if layout.relative_distance_key:     # --prove's twin reaches every bucket too
                cls.twin_tokens = max(cls.twin_tokens, distance(layout) + 1)
            cls.twin_tokens = max(cls.twin_tokens, layout.relative_tokens)
            return cls, worst
        if worst < best[0]:
            best = (worst, layout)
    what = ("" if best[1] is None else f"; closest: positional {best[1].positional} (RoPE from {best[1].rope}), causal "
            f"{best[1].causal}, scale {best[1].scale:.4g} ({best[1].scale_law}{', by layer' if best[1].scale_by_layer else ''}), "
            f"window {best[1].window}, relative error {best[0]:.1e}")
    raise IdinspectError(f"--auto: no positional scheme, scale or causality idinspect models reproduces the attention "
                         f"module (found {found}{what}); an adapter must be written by hand")


def with_cross_states(cls, states: bool | str | None) -> None:
    """Mark ``cls`` as taking states for cross-attention it has no encoder for (under keyword ``states``
    where a string: its example inputs give them, its blocks read them as their keys' input)."""
    cls.encoder_states = bool(states)
    if isinstance(states, str):
        cls.cross_states = states
        cls.kv_arguments = tuple(dict.fromkeys((*cls.kv_arguments, states)))


__all__ = ["settle", "with_cross_states"]
