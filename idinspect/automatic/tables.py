"""A relative-position table held by the model, not by a layer (MPNet's encoder-level table), found by
what the model does with it.

A candidate is an ``nn.Embedding`` [rows, H] outside the list of layers. It is the attention's table
where one argument of the attention module's call is its lookup: with the table holding its row
numbers, the argument holds, per (head, query i, key j), an integer row; with a random table it
holds exactly ``table[row, head]``. The rows must be the same for every head and match T5's bucketing
(:func:`idinspect.layer.relative.relative_buckets` of j - i over the table's rows, both ways or past
only) for some largest distance, kept as a number (MPNet's 128 is a constant of its modelling code, in
no setting). The lookup is read on the longest sequence the twin runs (up to :data:`LONGEST` tokens;
the twin keeps the model's number of positions): the distance is taken only where that sequence reaches
the last bucket of each side, or covers every position the model has, so that every distance that fits
agrees on every pair of positions the model can see. A setting that happens to equal a fitting
distance is not taken for a law: the twin changes some settings (widths, heads), and a distance read
from one of those would not hold for the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import IdinspectError
from ..layer.relative import relative_buckets
from ..numerics.twin import as_keywords

#: The longest sequence the lookup is read on (the largest distance tried is one less).
LONGEST = 513


@dataclass(frozen=True)
class ModelTable:
    """A model-level relative-position table and how the attention module receives it."""

    path: str                  # the nn.Embedding, relative to the base model
    keyword: str               # the attention module's call argument carrying its lookup
    bidirectional: bool
    distance: int              # the buckets' largest distance (a number: see the module docstring)
    tokens: int                # the sequence length that reaches every bucket (--prove's twin runs it)


def _call(hf, attention: torch.nn.Module, ids: torch.Tensor) -> dict:
    """The attention module's first call in a forward pass on ``ids``, every argument by name."""
    from ..adapters.example_inputs import example_inputs

    seen: dict = {}

    def hook(module, args, kwargs):
        seen.setdefault("call", (args, dict(kwargs)))

    handle = attention.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            hf(**example_inputs(hf, ids, torch.Generator().manual_seed(0)), use_cache=False)
    finally:
        handle.remove()
    return as_keywords(attention, *seen["call"])[1]


def _longest(hf, attention: torch.nn.Module) -> tuple[int, dict] | None:
    """(T, the call on one sequence of T tokens) for the longest T the twin runs: :data:`LONGEST`, else
    its number of positions (less the few a padding offset takes)."""
    positions = getattr(hf.config, "max_position_embeddings", None)
    lengths = [LONGEST] + ([positions - k for k in range(4) if 1 < positions - k < LONGEST]
                           if isinstance(positions, int) else [])
    for T in lengths:
        try:
            return T, _call(hf, attention, torch.randint(2, 32, (1, T), generator=torch.Generator().manual_seed(1)))
        except (IndexError, RuntimeError, ValueError):
            continue
    return None


def model_table(hf, attention: torch.nn.Module, container: str, H: int) -> ModelTable | None:
    """The :class:`ModelTable` the attention module (layer 0's, live) reads, where there is one (see
    the module docstring); None where no embedding [rows, H] outside the list of layers at
    ``container`` (relative to the base model) reaches its call. Refused where one does but its
    lookup is not T5's bucketing of j - i."""
    prefix = getattr(hf, "base_model_prefix", "")
    base = hf.get_submodule(prefix) if prefix and hasattr(hf, prefix) else hf
    tables = [(p, m) for p, m in base.named_modules() if isinstance(m, torch.nn.Embedding)
              and m.weight.shape[1] == H and not p.startswith(container + ".")]
    for path, table in tables:
        rows = table.weight.shape[0]
        saved = table.weight.detach().clone()
        try:
            with torch.no_grad():
                table.weight.copy_(torch.arange(rows, dtype=saved.dtype)[:, None].expand(rows, H))
            longest = _longest(hf, attention)
            if longest is None:
                continue
            T, numbered = longest
            with torch.no_grad():
                table.weight.copy_(torch.randn(saved.shape, generator=torch.Generator().manual_seed(2),
                                               dtype=saved.dtype))
            _, looked_up = longest[0], _call(hf, attention, torch.randint(
                2, 32, (1, T), generator=torch.Generator().manual_seed(1)))
            values = table.weight.detach().clone()
        finally:
            with torch.no_grad():
                table.weight.copy_(saved)
        for keyword, v in numbered.items():
            if not (isinstance(v, torch.Tensor) and v.dim() == 4 and tuple(v.shape[-3:]) == (H, T, T)):
                continue
            index = v[0].round().to(torch.long)
            if not (torch.equal(index.to(v.dtype), v[0]) and int(index.min()) >= 0 and int(index.max()) < rows
                    and torch.equal(index, index[:1].expand_as(index))):
                continue
            head = torch.arange(H)[:, None, None].expand_as(index)
            if not torch.equal(looked_up[keyword][0], values[index, head]):
                continue
            return _bucketing(hf, path, keyword, index[0], rows, T)
    return None


def _bucketing(hf, path: str, keyword: str, index: torch.Tensor, rows: int, T: int) -> ModelTable:
    """The T5 bucketing (direction, largest distance) of the rows ``index`` [T, T] a table of ``rows``
    rows is read at; a one-line refusal naming what was seen where none fits."""
    r = torch.arange(T)[None, :] - torch.arange(T)[:, None]
    by_distance = torch.cat([index[1:, 0].flip(0), index[0]])     # the row of each j - i, -(T-1)..T-1
    if not torch.equal(by_distance[r + T - 1], index):
        raise IdinspectError(f"--auto: the attention module reads the model's table {path} through {keyword!r}, but "
                             "not by the distance between positions; an adapter must be written by hand")
    distances = torch.arange(-(T - 1), T)
    for both in (True, False):
        fits = [d for d in range(1, LONGEST) if torch.equal(relative_buckets(distances, both, rows, d), by_distance)]
        if not fits:
            continue
        last = rows - 1 if not both else {rows // 2 - 1, rows - 1}
        reached = set(index.unique().tolist())
        saturated = (last in reached) if not both else last <= reached
        if not saturated and T == LONGEST:
            raise IdinspectError(f"--auto: the model's relative-position table {path} is read by T5's buckets, but "
                                 f"{LONGEST} tokens do not reach its last buckets: its largest distance is not settled "
                                 f"({fits[0]}..{fits[-1]} fit); an adapter must be written by hand")
        return ModelTable(path, keyword, both, fits[0], min(T, max(_reach(both, rows, fits[0]), 8)))
    raise IdinspectError(f"--auto: the attention module reads the model's table {path} ({rows} rows) through "
                         f"{keyword!r}, but not by T5's buckets of the distance between positions; an adapter must "
                         "be written by hand")


def _reach(both: bool, rows: int, distance: int) -> int:
    """The sequence length at which every reachable bucket is used (the smallest distance reaching the
    last bucket of a side, plus one)."""
    r = torch.arange(0, 4 * max(distance, rows) + 1)
    b = relative_buckets(-r, both, rows, distance)
    return int((b == b.max()).nonzero()[0]) + 1


__all__ = ["LONGEST", "ModelTable", "model_table"]
