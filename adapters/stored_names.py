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
:class:`ReadsStoredNames` is the part of an inferred adapter that reads a checkpoint under the names
it holds.
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


class ReadsStoredNames:
    """An adapter (mixin, before :class:`~adapters.base.Adapter`) whose layout is in the live module's
    names and that reads a checkpoint under the names it holds: the live ones, or the saved ones of
    :attr:`stored_names` where the checkpoint holds a name the live module does not use. Every name
    it reads, writes, reports or declares is then the checkpoint's own."""

    #: The live module's tensor names <-> the names ``save_pretrained`` stores (learned and proven on the
    #: twin, :mod:`idinspect.automatic.stored_names`); None where they are the same.
    stored_names: StoredNames | None = None
    #: The names this instance's checkpoint holds: :attr:`stored_names`, or None (the live names).
    stored_as: StoredNames | None = None

    def names_held_by(self, reader) -> StoredNames | None:
        """:attr:`stored_names` where ``reader``'s checkpoint holds saved names, else None."""
        names = self.stored_names
        return names if names is not None and names.used_by(reader.keys()) else None

    def stored(self, live: str) -> str:
        """The checkpoint's name of the tensor the live module names ``live``."""
        return live if self.stored_as is None else self.stored_as.saved(live)

    def live_name(self, key: str) -> str:
        """The live module's name of the checkpoint's tensor ``key`` (of the fused tensor it is a piece
        of); ``key`` itself where the names are the same or no rule places it (then nothing declares it)."""
        return key if self.stored_as is None else self.stored_as.live(key) or key

    def key(self, site, name: str) -> str:
        return self.stored(super().key(site, name))

    def _find_prefix(self, keys: list[str]) -> str:
        """The live prefix; under saved names, the twin's, where the checkpoint holds its first weight's saved name."""
        if self.stored_as is None:
            return super()._find_prefix(keys)
        first = self.sites[0]
        weight = first.block.projections[0].weight_name
        probe = self.stored(f"{self.stored_as.prefix}{first.path}.{weight}")
        if probe not in self.reader:
            raise IdinspectError(f"no tensor named {probe!r} in the checkpoint (transformers' saved name of the first "
                                 f"layer's {weight}); config.json says model_type '{self.config.model_type}': check "
                                 "that the weights belong to this config")
        return self.stored_as.prefix

    def model_component(self, key: str) -> str | None:
        return super().model_component(self.live_name(key))

    def not_analysed_reason(self, key: str) -> str | None:
        return super().not_analysed_reason(self.live_name(key))

    def is_buffer(self, key: str) -> bool:
        return super().is_buffer(key) or super().is_buffer(self.live_name(key))

    def containers(self) -> dict[str, int]:
        """Each layer list's path below the prefix, under the checkpoint's names (the layer-count and
        coverage checks look there); a saved list outside the prefix is left out (the coverage check
        still refuses any tensor there that nothing reads or declares)."""
        live = super().containers()
        if self.stored_as is None:
            return live
        out = {}
        for container, count in live.items():
            saved = self.stored_as.saved_container(f"{self.prefix}{container}.0")
            if saved is not None and saved.startswith(self.prefix):
                out[saved[len(self.prefix):]] = count
        return out


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


__all__ = ["SLOT", "ReadsStoredNames", "Rule", "StoredNames", "skeleton"]
