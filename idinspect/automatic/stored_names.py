"""The names a folder saved by transformers holds, learned from the twin (``--auto`` on checkpoint folders).

transformers 5 stores some tensors under other names than the live module's, and some fused live
tensors as several (:mod:`adapters.stored_names`). Which, is learned from transformers itself: a copy
of the twin, every stored value made distinct (the i-th value of all its floating tensors together is
i + 1/2, exact in float64), is written by its own ``save_pretrained``; each saved tensor is then the
live tensor whose values it holds (all of them in one live tensor's range, each one of its values):

    equal to it, same shape      a rename: live name -> saved name (and back)
    part of it (a piece)         the saved name -> the fused live name (declared as the live one is)
    anything else                placed nowhere: a folder holding it is refused by name

The names' indices become slots, carried from one name to the other in order (``layers.#`` stays the
same layer). The rules hold only once proven: the adapter reading the saved twin folder must read
every block's canonical form exactly as it reads the live twin, with the same counts, and pass the
coverage check there (every saved tensor read or declared)."""

from __future__ import annotations

import bisect
import copy
import tempfile
from pathlib import Path

import torch

from ..adapters.stored_names import SLOT, Rule, StoredNames
from ..errors import IdinspectError, one_line


def learn_stored_names(hf: torch.nn.Module, cls: type) -> tuple[StoredNames | None, str]:
    """(the saved names of ``hf``'s class, proven; or None) and what was found, for the registered
    inferred adapter ``cls`` of the float64 twin ``hf``. None where transformers saves the live names
    (nothing to learn) or where the rules are not proven (a folder of saved names is then refused by
    name); never raises (the adapter is proven on the live twin either way)."""
    try:
        return _learn(hf, cls)
    except Exception as exc:  # noqa: BLE001 - the model's own saving or loading failing on the twin, in one line
        cls.stored_names = None
        return None, f"not learned ({type(exc).__name__}: {one_line(exc)})"


def _learn(hf: torch.nn.Module, cls: type) -> tuple[StoredNames | None, str]:
    import idinspect

    from ..sources.checkpoint import SafetensorsCheckpoint
    from ..sources.hf_logging import quiet_transformers

    twin = copy.deepcopy(hf)
    ranges = _fill_distinct(twin)
    live = dict(twin.state_dict())
    with tempfile.TemporaryDirectory(prefix="idinspect-twin-") as tmp:
        with quiet_transformers():
            twin.save_pretrained(tmp)
        reader = SafetensorsCheckpoint(Path(tmp))
        try:
            pairs, unplaced = place(live, ranges, reader)
            if not unplaced and all(s == k for s, k, _ in pairs):
                return None, "saved under the live names"
            prefix = idinspect.load(twin).adapter.prefix
            names = StoredNames(prefix, *rules(pairs))
            cls.stored_names = names
            try:
                _prove(twin, Path(tmp))
            except (IdinspectError, AssertionError) as exc:
                cls.stored_names = None
                return None, f"not proven ({one_line(exc)})"
        finally:
            reader.close()
    placed = f"{len(pairs)} saved tensors placed" + (f", {len(unplaced)} not: {', '.join(unplaced[:4])}" if unplaced else "")
    return names, f"proven on the saved twin ({placed})"


def _fill_distinct(model: torch.nn.Module) -> list[tuple[float, float]]:
    """Give every floating parameter and buffer distinct values (i + 1/2, counting on through all of
    them; a tied tensor once); the (first, last + 1) value range of each, sorted."""
    out, start = [], 0
    with torch.no_grad():
        seen = set()
        for _, t in [*model.named_parameters(), *model.named_buffers()]:
            if not t.is_floating_point() or id(t) in seen or t.numel() == 0:
                continue
            seen.add(id(t))
            t.copy_((torch.arange(t.numel(), dtype=torch.float64) + start + 0.5).reshape(t.shape))
            out.append((start + 0.5, start + t.numel() + 0.5))
            start += t.numel()
    return sorted(out)


def place(live: dict[str, torch.Tensor], ranges: list[tuple[float, float]], reader) -> tuple[list, list[str]]:
    """((saved name, live name, whether a rename) of each saved tensor placed; the saved names placed
    nowhere), from values alone: a saved tensor is the live tensor whose range holds all its values,
    each one of that tensor's values. A tensor's own name is preferred among tied ones."""
    owners: dict[float, list[str]] = {}
    for k, t in live.items():
        if t.is_floating_point() and t.numel():
            owners.setdefault(float(t.min()), []).append(k)
    starts = [a for a, _ in ranges]
    pairs, unplaced = [], []
    for s in reader.keys():
        t = reader.get(s)
        if not t.is_floating_point() or not t.numel():     # no values to tell it by: placed only under its own name
            if s in live and torch.equal(live[s], t):
                pairs.append((s, s, True))
            else:
                unplaced.append(s)
            continue
        t = t.to(torch.float64)
        lo, hi = float(t.min()), float(t.max())
        i = bisect.bisect_right(starts, lo) - 1
        if i < 0 or hi >= ranges[i][1] or not torch.equal(t, t.floor() + 0.5):
            unplaced.append(s)
            continue
        keys = owners.get(starts[i], [])
        if not keys:
            unplaced.append(s)
            continue
        k = s if s in keys else keys[0]
        same = tuple(live[k].shape) == tuple(t.shape) and torch.equal(live[k].to(torch.float64), t)
        pairs.append((s, k, same))
    return pairs, unplaced


def rules(pairs: list[tuple[str, str, bool]]) -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """(live -> saved rules of the renames, saved -> live rules of every placed tensor), each name's
    indices carried in order; a source two pairs map apart is made specific (its uncarried indices
    kept as they are), and left out where it still is."""
    forward = _unique([_rule(k.split("."), s.split("."), any_index=False) for s, k, same in pairs if same])
    backward = _unique([_rule(s.split("."), k.split("."), any_index=True) for s, k, _ in pairs],
                       fallback=[_rule(s.split("."), k.split("."), any_index=False) for s, k, _ in pairs])
    return forward, backward


def _rule(src: list[str], tgt: list[str], any_index: bool) -> Rule:
    """The rule taking ``src`` to ``tgt``: each index of ``src`` carried to the next equal index of
    ``tgt`` (in order); an index of ``src`` carried nowhere is any index (``any_index``: an expert's
    number, its experts fused in ``tgt``) or kept as it is; an index of ``tgt`` not carried is kept."""
    s_slots = [i for i, p in enumerate(src) if SLOT.fullmatch(p)]
    t_slots = [i for i, p in enumerate(tgt) if SLOT.fullmatch(p)]
    carried: dict[int, int] = {}      # target position -> source position
    j = 0
    for i in s_slots:
        m = next((m for m in range(j, len(t_slots)) if tgt[t_slots[m]] == src[i]), None)
        if m is not None:
            carried[t_slots[m]] = i
            j = m + 1
    sources = set(carried.values())
    slotted = [i for i in s_slots if i in sources or any_index]
    source = tuple("#" if i in slotted else p for i, p in enumerate(src))
    target = tuple("#" if i in carried else p for i, p in enumerate(tgt))
    fill = tuple(slotted.index(carried[i]) for i in sorted(carried))
    return Rule(source, target, fill)


def _unique(candidates: list[Rule], fallback: list[Rule] | None = None) -> tuple[Rule, ...]:
    """One rule per source: where two candidates of one source differ, their ``fallback`` forms (more
    specific sources) instead, and none where those differ too."""
    by_source: dict[tuple, set[Rule]] = {}
    for r in candidates:
        by_source.setdefault(r.source, set()).add(r)
    out = []
    for i, r in enumerate(candidates):
        if len(by_source[r.source]) == 1:
            out.append(r)
        elif fallback is not None:
            out.append(fallback[i])
    return tuple(dict.fromkeys(_unique(out) if fallback is not None else out))


def _prove(twin: torch.nn.Module, folder: Path) -> None:
    """The adapter reads the saved twin ``folder`` under its saved names as it reads the live ``twin``:
    every block's canonical tensors bit-equal, every count equal, and every saved tensor read or
    declared (the folder's coverage check). AssertionError naming the first difference."""
    import idinspect

    live, saved = idinspect.load(twin), idinspect.load(folder)
    if getattr(saved.adapter, "stored_as", None) is None:
        raise AssertionError("the saved twin is not read under its saved names")
    for n in range(live.num_layers):
        a, b = live.layer(n), saved.layer(n)
        ta = {k: v for k, v in vars(a).items() if isinstance(v, torch.Tensor)}
        tb = {k: v for k, v in vars(b).items() if isinstance(v, torch.Tensor)}
        if ta.keys() != tb.keys() or any(not torch.equal(ta[k], tb[k].to(ta[k].dtype)) for k in ta):
            raise AssertionError(f"block {n} reads otherwise from the saved twin")
    if idinspect.inspect(live)["layers"] != idinspect.inspect(saved)["layers"]:
        raise AssertionError("the saved twin's counts differ from the live twin's")


__all__ = ["learn_stored_names", "place", "rules"]
