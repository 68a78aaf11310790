"""Layers kept in groups and run more than once (ALBERT's parameter sharing), found by what the model
does, not by its names.

Some models store fewer layers than they run: a list of ``groups`` entries, each holding its own list
of layers, and a forward pass that runs ``num_hidden_layers`` times a whole group (group
l // (L / groups) at depth l). The parameters are shared, so idinspect counts each stored layer once
(block g K + k for layer k of group g, K layers a group), of kind "shared" where the model runs more
groups than it stores (L > groups).

Which settings count the groups and each group's layers is found by changing each integer setting
equal to a list's length on a twin and seeing which one changes it (never by the setting's name);
the law "the model runs num_hidden_layers groups" is then checked on the trace twin (every group run
L / groups times, L runs in all) before anything is inferred from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import IdinspectError
from .trace import affine_kind, forward_with

#: The trace twin's groups, layers per group and runs: every group run twice, every layer traced.
TWIN_GROUPS, TWIN_GROUP_LAYERS, TWIN_RUNS = 2, 2, 4


@dataclass(frozen=True)
class Groups:
    """Where a model keeps its layers in groups, and the settings that count them."""

    container: str           # the list of groups, from the model's root
    group_list: str          # the list of layers inside each group, relative to the group
    groups_key: str          # the setting counting the groups
    group_layers_key: str    # the setting counting each group's layers

    def twin_settings(self) -> dict:
        """Overrides of the trace twin: :data:`TWIN_GROUPS` groups of :data:`TWIN_GROUP_LAYERS` layers, run
        :data:`TWIN_RUNS` times."""
        return {self.groups_key: TWIN_GROUPS, self.group_layers_key: TWIN_GROUP_LAYERS, "num_hidden_layers": TWIN_RUNS}

    def first_list(self) -> str:
        """The first group's list of layers, from the model's root."""
        return f"{self.container}.0.{self.group_list}"


def _holds_layers(module: torch.nn.Module) -> bool:
    return sum(affine_kind(m) is not None for m in module.modules()) >= 2


def grouped_lists(hf) -> tuple[str, str] | None:
    """(path of the list of groups, name of each group's list of layers) where ``hf``'s one outermost
    list of modules with projections has entries that each hold, as a child, exactly one list of layers
    of one class (and no other child with projections); None otherwise."""
    lists = [(p, m) for p, m in hf.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0]
    outer = [(p, m) for p, m in lists if all(_holds_layers(c) for c in m)]
    outer = [(p, m) for p, m in outer if not any(p != q and p.startswith(q + ".") for q, _ in outer)]
    if len(outer) != 1:
        return None
    path, groups = outer[0]
    names, kinds = set(), set()
    for group in groups:
        inner = [(name, c) for name, c in group.named_children() if isinstance(c, torch.nn.ModuleList)]
        rest = [c for name, c in group.named_children() if not isinstance(c, torch.nn.ModuleList)]
        if len(inner) != 1 or any(_holds_layers(c) for c in rest) or not all(_holds_layers(c) for c in inner[0][1]):
            return None
        names.add(inner[0][0])
        kinds |= {type(layer) for layer in inner[0][1]}
    # one class of layer throughout (T5's block holds a list of sublayers of different classes: not groups)
    return (path, names.pop()) if len(names) == 1 and len(kinds) == 1 else None


def find_groups(hf, build) -> Groups | None:
    """The :class:`Groups` of the twin ``hf`` (None where its layers are not grouped); ``build(overrides)``
    builds another twin of the same model with some settings changed. Refused where no setting, or more
    than one, counts the groups or each group's layers."""
    found = grouped_lists(hf)
    if found is None:
        return None
    path, name = found
    keys = []
    for what, length in (("groups", lambda m: len(m.get_submodule(path))),
                         ("layers of each group", lambda m: len(m.get_submodule(f"{path}.0.{name}")))):
        n = length(hf)
        settings = hf.config.to_dict()
        equal = [k for k, v in settings.items() if isinstance(v, int) and not isinstance(v, bool) and v == n
                 and k != "num_hidden_layers"]
        counting = []
        for key in equal:
            try:
                other = build({key: n + 1, "num_hidden_layers": max(n + 1, int(hf.config.num_hidden_layers))})
            except Exception:  # noqa: BLE001 - a setting the config class will not take at another value
                continue
            if length(other) == n + 1:
                counting.append(key)
        if len(counting) != 1:
            raise IdinspectError(f"--auto: the model keeps its layers in groups ({path}.*.{name}) but "
                                 f"{'no setting' if not counting else 'several settings (' + ', '.join(counting) + ')'} "
                                 f"counts its {what}; an adapter must be written by hand")
        keys.append(counting[0])
    return Groups(path, name, keys[0], keys[1])


def check_runs(hf, inputs: dict, groups: Groups) -> None:
    """Check on the trace twin that one forward pass runs ``num_hidden_layers`` groups, every group as
    often (the law that makes a stored layer shared where L > groups); refused naming the runs seen."""
    container = hf.get_submodule(groups.container)
    runs = [0] * len(container)
    forward_with(hf, inputs, [g.register_forward_hook(lambda m, a, y, i=i: runs.__setitem__(i, runs[i] + 1))
                              for i, g in enumerate(container)])
    L = int(hf.config.num_hidden_layers)
    if sum(runs) != L or len(set(runs)) != 1:
        raise IdinspectError(f"--auto: the model keeps its layers in groups ({groups.container}) but runs them "
                             f"{runs} times for {L} layers, not num_hidden_layers runs shared evenly; an adapter "
                             "must be written by hand")


__all__ = ["Groups", "check_runs", "find_groups", "grouped_lists"]
