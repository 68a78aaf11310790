"""A list of layers of two kinds (Mllama's text model): most layers hold a self-attention block, those a
setting lists (``cross_attention_layers``) hold only a cross-attention block, whose queries read the
layer's input and whose keys and values read other states (an image's). The kinds are told apart by
the layers' classes in the live twin; the first layer of the second kind is traced as a layer of its
own (:func:`.trace.find_roles` over every module before its W_O), its block must read other states
than its queries, and the setting listing it is the one whose value is the twin's indices of that
kind. Its q/k norms are tried as the self-attention block's are (:func:`.infer.qk_norms`).
"""

from __future__ import annotations

import dataclasses

import torch

from ..adapters.inferred import FoundCross, FoundLayout
from ..errors import IdinspectError
from .infer import (
    candidates,
    common_parent,
    extra_parameters,
    norm_candidates,
    projections,
    qk_norms,
)
from .trace import Trace, find_roles, first_calls, trace


def layouts_by_layer_kind(hf, inputs: dict, model_type: str, container: str | None = None, stack: str = "",
                          others: tuple[str, ...] = (), config_key: str | None = None,
                          build=None) -> tuple[list[FoundLayout], dict]:
    """:func:`.infer.candidates` (``build``: as there), and where the list of layers holds a second kind of
    layer with a cross-attention block only (:func:`cross_layers`), every candidate with each candidate
    cross block on the layers its setting lists."""
    layouts, found = candidates(hf, inputs, model_type, container, stack, others, config_key, build=build)
    first = layouts[0]
    if first.cross is not None:
        return layouts, found
    cfg = getattr(hf.config, config_key) if config_key else hf.config
    t = trace(hf, inputs, container)
    kinds = cross_layers(hf, inputs, t, cfg, first.kv_heads)
    if kinds is None:
        return layouts, found
    key, crosses, read = kinds
    found["cross_layers"] = {key: {p.module: p.roles for p in crosses[0].projections}}
    drop = {f"{first.layer_container}.{{n}}.{r}" for r in read}
    return [dataclasses.replace(x, cross=c, cross_layers_key=key,
                                model_tensors={k: v for k, v in x.model_tensors.items() if k not in drop})
            for c in crosses for x in layouts], found


def cross_layers(hf, inputs: dict, t: Trace, cfg, kv: str) -> tuple[str, list[FoundCross], set[str]] | None:
    """(the setting listing the layers of the second kind, the candidate cross blocks (one per q/k norm
    candidate), the tensors they read relative to the layer) of the list of layers whose layer 0 ``t``
    traced; None where every layer is of one class. Refused by name where a second kind's layer does not
    run on ``inputs``, holds a self-attention block, holds parameters no projection or q/k norm holds, or
    no setting lists its indices."""
    container = t.layer_path.rsplit(".", 1)[0]
    layers = hf.get_submodule(container)
    kinds = list(dict.fromkeys(type(layer) for layer in layers))
    if len(kinds) == 1:
        return None
    if len(kinds) > 2:
        raise IdinspectError(f"--auto: {container} holds layers of {len(kinds)} classes "
                             f"({', '.join(k.__name__ for k in kinds)}); --auto reads two at most; an adapter must "
                             "be written by hand")
    second = [i for i, layer in enumerate(layers) if type(layer) is kinds[1]]
    name = kinds[1].__name__
    u = trace(hf, inputs, container, second[0])
    if not u.order:
        raise IdinspectError(f"--auto: layer {second[0]} of {container} ({name}) does not run on the example inputs; "
                             "an adapter must be written by hand")
    o_path, roles = find_roles(hf, inputs, u, every=True)
    proj = projections(u, roles, o_path, cfg, kv)
    found = {p.module: p.roles for p in proj}
    by_role = {r: p.module for p in proj for r in p.roles}
    q_in, k_in = u.inputs[by_role["q"]], u.inputs[by_role["k"]]
    if q_in.shape == k_in.shape and torch.equal(q_in, k_in):
        raise IdinspectError(f"--auto: layer {second[0]} of {container} ({name}) holds another self-attention block "
                             f"({found}); --auto reads a second kind of layer holding a cross-attention block only; "
                             "an adapter must be written by hand")
    attention = common_parent([p.module for p in proj if p.roles != "o"])
    module = hf.get_submodule(f"{u.layer_path}.{attention}" if attention else u.layer_path)
    seen = first_calls(hf, inputs, {**norm_candidates(module), "": module})
    _, y = seen.pop("")
    norms = qk_norms(u, module, attention, seen, proj, cfg)
    extra = extra_parameters(module, attention, proj, norms[0])
    if extra:
        raise IdinspectError(f"--auto: the cross-attention module {attention} of {name} has parameters no projection "
                             f"or q/k norm holds ({', '.join(extra)}); found {found}; an adapter must be written by hand")
    keys = [k for k, v in cfg.to_dict().items() if v == second]
    if not keys:
        raise IdinspectError(f"--auto: layers {second} of {container} are {name} (a cross-attention block), but no "
                             "setting lists them; an adapter must be written by hand")
    o = u.outputs[o_path]
    output = None if y.shape == o.shape and torch.equal(y, o) else o_path
    read = {f"{p.module}.{w}" for p in proj for w in ("weight", "bias") if w == "weight" or p.bias}
    if norms[0] is not None:
        read |= {f"{m}.{w}" for m in (norms[0].q_module, norms[0].k_module) for w in ("weight", "bias")}
    return keys[0], [FoundCross(attention, output, proj, norm) for norm in norms], read


__all__ = ["cross_layers", "layouts_by_layer_kind"]
