"""``--auto`` on a config that holds other models' configs (CLIP's and SigLIP's ``text_config`` and
``vision_config``, a multimodal model's text model and vision tower): every tower is a stack of its
own, traced and settled on its own sub-config, as the hand-written multi-tower adapters split them.

A tower is a sub-config with sizes and layers of its own (:func:`is_tower`); its module is the
outermost module of the live model that holds that very sub-config object as its ``config`` (the way
transformers builds a tower), and its layers the one list of ``num_hidden_layers`` layers with
projections inside that module. A tower whose layers the model's example inputs do not run (a vision
tower whose images enter the text as image tokens the token ids never hold) is not traced: the
adapter lists it as not analysed, never counted silently. A tower whose first layer runs but some of
whose layers do not (the multimodal Mllama's text model: its cross layers read image states the whole
model makes only from pixel values) is traced and settled as a model of its own (:func:`traced_alone`),
and the proofs give it its cross-attention states at its root. A tower that runs but has no single list
of layers, or whose attention modules differ from another tower's, is refused by name.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from ..errors import IdinspectError
from .cross_layers import layouts_by_layer_kind
from .settle import settle, with_cross_states
from .trace import forward_with, layer_lists


def is_tower(config) -> bool:
    """Whether a sub-config describes a model of its own (sizes and layers: a text or vision tower),
    not settings of this one (MPT's ``attn_config``)."""
    return config is not None and all(hasattr(config, k) for k in ("hidden_size", "num_hidden_layers"))


def tower_keys(hf_config) -> list[str]:
    """The keys of ``hf_config``'s sub-configs that are towers (:func:`is_tower`), sorted."""
    return sorted(k for k in getattr(hf_config, "sub_configs", None) or {} if is_tower(getattr(hf_config, k, None)))


def tower_roots(hf) -> dict[str, str]:
    """Each tower's sub-config key -> the path (from the root) of the outermost module holding that
    sub-config as its ``config``, in the model's module order; refused where a tower has no module."""
    keys = tower_keys(hf.config)
    found: dict[str, str] = {}
    for path, module in hf.named_modules():
        for key in keys:
            if key not in found and path and getattr(module, "config", None) is getattr(hf.config, key):
                found[key] = path
    missing = [k for k in keys if k not in found]
    if missing:
        raise IdinspectError(f"--auto: no module of {type(hf).__name__} is built from its {', '.join(missing)}; "
                             "an adapter must be written by hand (docs/adding-a-family.md)")
    return found


def _runs(hf, inputs: dict, modules: dict[str, torch.nn.Module]) -> set[str]:
    """The names of ``modules`` that one forward pass of ``hf`` on ``inputs`` calls."""
    ran: set[str] = set()
    forward_with(hf, inputs, [m.register_forward_pre_hook(lambda mod, args, name=name: ran.add(name))
                              for name, m in modules.items()])
    return ran


def infer_towers(hf, inputs: dict, model_type: str, states: str | None, tokens: int) -> tuple[type, float, dict]:
    """(adapter class, worst reference error, what was found) of a multi-tower twin ``hf``: each tower
    that ``inputs`` run traced and settled on its own sub-config (its stack named after the key:
    "text", "vision"), the others listed as untraced."""
    from ..adapters.inferred_towers import inferred_towers_adapter

    roots = tower_roots(hf)
    prefix = getattr(hf, "base_model_prefix", "")

    def relative(path: str) -> str:
        return path[len(prefix) + 1:] if prefix and path.startswith(prefix + ".") else path

    firsts = {}
    for key, root in roots.items():
        lists = layer_lists(hf, root, int(getattr(hf.config, key).num_hidden_layers))
        firsts[key] = (lists, lists[0][1][0])
    every = {(key, i, n): layer for key, (lists, _) in firsts.items() for i, (_, m) in enumerate(lists)
             for n, layer in enumerate(m)}
    ran_layers = _runs(hf, inputs, every)
    ran = {key for key, i, n in ran_layers if (i, n) == (0, 0)}
    # a tower some of whose layers the whole model's inputs do not run (Mllama's cross layers, fed image
    # states the token ids never make): traced as a model of its own, on its own example inputs
    alone = [key for key in ran if any(x[0] == key and x not in ran_layers for x in every)]
    untraced = tuple((key, relative(roots[key])) for key in roots if key not in ran)
    traced = [key for key in roots if key in ran]
    if not traced:
        raise IdinspectError(f"--auto: the example inputs run none of the towers of {type(hf).__name__} "
                             f"({', '.join(roots)}); an adapter must be written by hand")
    containers = {}
    for key in traced:
        lists = firsts[key][0]
        if len(lists) != 1:
            raise IdinspectError(f"--auto: the {key} tower has {len(lists)} lists of layers "
                                 f"({', '.join(p for p, _ in lists)}); --auto reads one per tower; an adapter "
                                 "must be written by hand (docs/adding-a-family.md)")
        containers[key] = lists[0][0]
    parts, found, worst, exact, twin_tokens, tower_inputs = [], {}, 0.0, (), 0, []
    for key in traced:
        stack = key.removesuffix("_config")
        others = tuple(relative(containers[k]) for k in traced if k != key) + tuple(p for _, p in untraced)
        if key in alone:
            cls, error, seen, given = traced_alone(hf, roots[key], relative(roots[key]), key, model_type, stack,
                                                   others, tokens)
            tower_inputs.append((relative(roots[key]), given))
        else:
            layouts, seen = layouts_by_layer_kind(hf, inputs, model_type, containers[key], stack, others, config_key=key)
            cls, error = settle(hf, layouts, {**seen, "stack": stack}, tokens, states)
        parts.append(cls.found)
        found[stack], worst = seen, max(worst, error)
        exact = tuple(dict.fromkeys((*exact, *cls.exact_classes)))
        twin_tokens = max(twin_tokens, cls.twin_tokens)
    if untraced:
        found["untraced"] = {key: path for key, path in untraced}
    if len({(f.attention_module, f.output_module) for f in parts}) > 1:
        raise IdinspectError(f"--auto: the towers' attention modules differ ({found}); an adapter must be written by hand")
    cls = inferred_towers_adapter(parts, tuple(roots), untraced, tuple(tower_inputs))
    cls.exact_classes, cls.twin_tokens = exact, twin_tokens
    with_cross_states(cls, states)
    return cls, worst, found


def traced_alone(hf, root: str, rel: str, key: str, model_type: str, stack: str, others: tuple[str, ...],
                 tokens: int) -> tuple[type, float, dict, str]:
    """(adapter class, worst reference error, what was found, the keyword of its cross-attention states) of
    the tower at ``root`` (``rel`` relative to the base model) traced and settled as a model of its own:
    its module called on its own example inputs (token ids, and the cross-attention states it takes that
    the whole model's token ids never make), its layout's paths then put below ``rel`` and its settings
    read from the sub-config ``key``. The whole model's tensors outside every tower (a projector, the head)
    are declared as the tower's own outside its layers are. Refused by name where the tower on its own
    takes no cross-attention states, or its layers still do not all run."""
    from ..adapters.example_inputs import example_inputs
    from ..adapters.inferred_inputs import cross_inputs, cross_states_argument
    from .infer import model_tensors

    sub = hf.get_submodule(root)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 32, (2, tokens), generator=g)
    inputs = example_inputs(sub, ids, g)
    given = cross_states_argument(sub, inputs)
    if not given:
        raise IdinspectError(f"--auto: some layers of {root} ({type(sub).__name__}) do not run on the example inputs, "
                             "and on its own it takes no cross-attention states; an adapter must be written by hand")
    inputs.update(cross_inputs(sub, given, ids, g))
    (_, layers), = layer_lists(sub)
    idle = [n for n in range(len(layers)) if n not in _runs(sub, inputs, dict(enumerate(layers)))]
    if idle and all(type(layers[n]) is type(layers[0]) for n in idle):    # a second kind's layer: refused by name below
        raise IdinspectError(f"--auto: layers {idle} of {root} ({type(sub).__name__}) do not run, even on its own "
                             "inputs; an adapter must be written by hand")
    layouts, seen = layouts_by_layer_kind(sub, inputs, model_type, None, stack)
    cls, error = settle(sub, layouts, {**seen, "stack": stack}, tokens, given)
    f = cls.found
    own = getattr(sub, "base_model_prefix", "")     # the tower's paths are below its own base model, where it has one
    if own and any(k.startswith(own + ".") for k in sub.state_dict()):
        rel = f"{rel}.{own}"
    inner = {f"{rel}.{k}": v for k, v in f.model_tensors.items()}
    outside = model_tensors(hf, SimpleNamespace(layer_container=f"{rel}.{f.layer_container}"), set(), (*others, rel))
    moved = dataclasses.replace(f, layer_container=f"{rel}.{f.layer_container}", model_tensors={**outside, **inner},
                                config_key=key,
                                relative_table=f.relative_table and f"{rel}.{f.relative_table}")
    part = type(cls.__name__, (cls,), {"found": moved, "__module__": cls.__module__})
    return part, error, {**seen, "layers": f"{rel}.{seen['layers']}", "traced": f"on its own ({given} given)"}, given


__all__ = ["infer_towers", "is_tower", "tower_keys", "tower_roots"]
