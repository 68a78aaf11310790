"""The names a checkpoint folder stores a model's tensors under, where they are not the live module's.

transformers 5 renames and fuses tensors when it loads a checkpoint and reverts that when it saves one
(``save_pretrained`` writes the legacy names: ViT's ``encoder.layer.i.attention.attention.query``
for the live ``layers.i.attention.q_proj``, Mixtral's per-expert ``experts.e.w1`` for the live fused
``experts.gate_up_proj`` [E, 2I, d]). An adapter inferred from a live module (``--auto``) knows the
live names; :class:`StoredNames` maps them to the saved names and back, as rules over names whose
numeric components are slots:

    live  model.layers.#.mlp.experts.gate_up_proj  <-  saved  model.layers.#.mlp.experts.#.gate_proj.weight

A rule from live to saved exists only where one saved tensor holds exactly one live tensor (a
rename): the adapter reads and writes attention tensors through those. A rule from saved to live
names the live tensor whose values a saved one holds (a rename, or one piece of a fused tensor): the
coverage check asks the live declarations about it. A saved name no rule places is left as it is, so
the coverage check refuses it by name. The rules are learned and proven on a twin
(:mod:`idinspect.automatic.stored_names`); nothing here looks at tensor values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import IdinspectError

#: A name component that is a slot: an index (a layer's, an expert's), or ``*`` (every index, in a display name).
SLOT = re.compile(r"\d+|\*")


@dataclass(frozen=True)
class Rule:
    """``source`` names (components, ``#`` a slot) -> ``target`` names; the k-th ``#`` of the target
    takes the value of the source's slot ``fill[k]`` (a source slot no target slot takes is any index:
    an expert's number, where experts are fused in the target)."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    fill: tuple[int, ...]

    def apply(self, parts: list[str]) -> str | None:
        """The target name of ``parts`` (a name's components), or None where the source does not match."""
        if len(parts) != len(self.source):
            return None
        values = []
        for p, s in zip(parts, self.source):
            if s == "#":
                if not SLOT.fullmatch(p):
                    return None
                values.append(p)
            elif p != s:
                return None
        it = iter(self.fill)
        return ".".join(values[next(it)] if t == "#" else t for t in self.target)


def skeleton(parts: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A name's components with every index (or slot) as ``#``: the key rules are looked up under."""
    return tuple("#" if p == "#" or SLOT.fullmatch(p) else p for p in parts)


class StoredNames:
    """Live <-> saved tensor names of one model class (see the module docstring).

    ``prefix``: the prefix the adapter finds in the live names (``"model."``); ``to_saved``: rules
    from live names (renames only); ``to_live``: rules from saved names (renames and pieces)."""

    def __init__(self, prefix: str, to_saved: tuple[Rule, ...], to_live: tuple[Rule, ...]):
        self.prefix, self.to_saved, self.to_live = prefix, to_saved, to_live
        self._saved_index = _index(to_saved)
        self._live_index = _index(to_live)

    def __repr__(self) -> str:
        return f"StoredNames(prefix={self.prefix!r}, {len(self.to_saved)} renames, {len(self.to_live)} saved forms)"

    def saved(self, live: str) -> str:
        """The saved name of the tensor named ``live`` in the live module; a one-line error where the
        twin's save showed none (a tensor transformers stores otherwise than by a rename)."""
        out = _lookup(self._saved_index, live)
        if out is None:
            raise IdinspectError(f"--auto: the checkpoint stores transformers' saved names, and the twin's "
                                 f"save_pretrained stored {live!r} under no name of its own (fused or converted); "
                                 "an adapter must be written by hand")
        return out

    def live(self, saved: str) -> str | None:
        """The live tensor a saved tensor named ``saved`` is (or is a piece of); None where no rule places it."""
        return _lookup(self._live_index, saved)

    def used_by(self, keys) -> bool:
        """Whether ``keys`` (a checkpoint's names) are transformers' saved names: some name is one the
        live module does not use (a renamed or split tensor)."""
        return any((live := self.live(k)) is not None and live != k for k in keys)

    def saved_container(self, live_layer: str) -> str | None:
        """The saved path of the layer list holding ``live_layer`` (``"vit.layers.0"`` -> ``"vit.encoder.layer"``):
        what every rename of a name below that layer agrees on; None where they do not agree."""
        parts = live_layer.split(".")
        found = set()
        for rule in self.to_saved:
            if len(rule.source) <= len(parts) or skeleton(parts) != skeleton(rule.source[:len(parts)]):
                continue
            if any(s != "#" and s != p for s, p in zip(rule.source, parts)):
                continue
            slot = sum(1 for s in rule.source[:len(parts)] if s == "#") - 1     # the layer's index
            targets = [i for i, t in enumerate(rule.target) if t == "#"]
            if slot < 0 or slot not in rule.fill:
                return None
            at = targets[rule.fill.index(slot)]
            found.add(".".join(rule.target[:at]))
        return found.pop() if len(found) == 1 else None


def _index(rules: tuple[Rule, ...]) -> dict[tuple[str, ...], list[Rule]]:
    out: dict[tuple[str, ...], list[Rule]] = {}
    for r in rules:
        out.setdefault(skeleton(r.source), []).append(r)
    return out


def _lookup(index: dict[tuple[str, ...], list[Rule]], name: str) -> str | None:
    parts = name.split(".")
    for rule in index.get(skeleton(parts), ()):
        out = rule.apply(parts)
        if out is not None:
            return out
    return None


__all__ = ["SLOT", "Rule", "StoredNames", "skeleton"]
