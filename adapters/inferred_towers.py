"""An adapter made from the found layouts of a multi-tower model's towers (``idinspect --auto`` on a
config holding other models' configs: CLIP's and SigLIP's ``text_config`` and ``vision_config``, a
multimodal model's text model and vision tower). Each tower is a stack read by its own
:class:`~adapters.inferred.InferredAdapter`, whose settings are its own sub-config's
(``found.config_key``); blocks are numbered tower by tower, in the model's module order, as the
hand-written two-tower adapters number them. A tower whose layers the model's example inputs do not
run (a vision tower fed through image tokens the text never holds) is not traced, hence not counted:
every report lists it as not analysed, with why, and its tensors as not analysed. Nothing here traces
or proves anything.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import ClassVar

import torch

from .base import Site
from .inferred import FoundLayout, InferredAdapter, twin_settings_from
from .inferred_inputs import cross_inputs
from .inferred_stacks import InferredStacksAdapter, inferred_stacks_adapter

#: Why an untraced tower is not analysed.
UNTRACED_REASON = ("--auto traced no attention in this tower: the model's example inputs (token ids) do not run its "
                   "layers, so nothing was proven of it; it is not counted")


def tower_twin_settings(hf_config, shape: dict) -> dict:
    """One tower's twin settings (:func:`twin_settings_from`, one layer), token ids inside its 32 tokens."""
    kw = {**twin_settings_from(hf_config, shape), "num_hidden_layers": 1}
    if hasattr(hf_config, "vocab_size"):
        kw["vocab_size"] = 32
    for key, fallback in (("pad_token_id", None), ("bos_token_id", 1), ("eos_token_id", 2)):
        v = getattr(hf_config, key, None)
        kw[key] = None if v is None else v if isinstance(v, int) and 0 <= v < 32 else fallback
    return kw


def towers_twin_settings(hf_config, keys: tuple[str, ...], settings_of: Callable[[object], dict]) -> dict:
    """The settings of a twin of a multi-tower ``hf_config``: its own outer settings, and each tower
    ``keys`` shrunk by ``settings_of(sub_config)``. Where a tower's config class refuses that (Qwen2-VL's
    vision tower names its width ``embed_dim``: the twin's heads do not divide it), the tower keeps its
    own sizes, with the shrunk layer count. A tower setting equal to another tower's width (SigLIP's
    text ``projection_size``, the vision width both towers' embeddings meet in) follows that tower's
    twin width, as a setting equal to its own width does (:func:`twin_settings_from`)."""
    out = {k: v for k, v in hf_config.to_dict().items() if k not in keys and k not in _BOOKKEEPING}
    subs = {k: getattr(hf_config, k) for k in keys}
    for key, sub in subs.items():
        kw: dict = {}
        try:
            kw = settings_of(sub)
            type(sub)(**kw)
        except Exception:  # noqa: BLE001 - no sizes to shrink, or the sub-config class's validation: keep its sizes
            own = {k: v for k, v in sub.to_dict().items() if k not in _BOOKKEEPING}
            kw = {**own, **{k: kw[k] for k in _COUNTS if k in kw}}
        out[key] = kw
    widths = {k: int(sub.hidden_size) for k, sub in subs.items()}
    for key in keys:
        for name, v in list(out[key].items()):
            if name == "hidden_size" or not name.endswith(("_dim", "_size")) or isinstance(v, bool) or not isinstance(v, int):
                continue
            other = next((k for k in keys if k != key and widths[k] == v != widths[key]), None)
            if other is not None:
                out[key][name] = out[other]["hidden_size"]
    return out


#: Settings a twin of a multi-tower model never copies: bookkeeping.
_BOOKKEEPING = ("architectures", "_name_or_path", "transformers_version", "auto_map")
#: Settings a tower kept at its own sizes still takes from the shrunk twin's.
_COUNTS = ("num_hidden_layers", "vocab_size", "pad_token_id", "bos_token_id", "eos_token_id")


class InferredTowersAdapter(InferredStacksAdapter):
    """Base of the classes :func:`inferred_towers_adapter` makes: a block's facts, sizes included, are
    its tower's; the outer config only holds the towers."""

    #: Every tower's sub-config key, in module order (traced or not).
    tower_keys: ClassVar[tuple[str, ...]] = ()
    #: Untraced towers: (sub-config key, module path relative to the base model) of each.
    untraced: ClassVar[tuple[tuple[str, str], ...]] = ()

    #: Towers traced as models of their own (their layers of a second kind run only on inputs the whole model
    #: cannot pass them: Mllama's text model, whose cross layers read image states): (module path relative to
    #: the base model, the keyword its cross-attention states are given under at that module).
    tower_inputs: ClassVar[tuple[tuple[str, str], ...]] = ()

    def own_config(self, config):
        return config

    @contextlib.contextmanager
    def example_call(self, hf_model, generator: torch.Generator) -> Iterator[None]:
        """Each tower of :attr:`tower_inputs` given, at its root, N(0, 1) cross-attention states [B, T + 3, d]
        (d its own width) with a mask showing them all (:func:`~adapters.inferred_inputs.cross_inputs`), as
        it was traced on its own, where the whole model's call gives it none."""
        def give(name: str):
            def hook(module, args, kwargs):
                if kwargs.get(name) is not None:
                    return None
                x = next((kwargs[k] for k in ("input_ids", "inputs_embeds") if kwargs.get(k) is not None),
                         args[0] if args else None)
                ids = torch.zeros(tuple(x.shape[:2]), dtype=torch.long)
                return args, {**kwargs, **cross_inputs(module, name, ids, generator)}
            return hook

        handles = [hf_model.get_submodule(f"{self.prefix}{path}").register_forward_pre_hook(give(name), with_kwargs=True)
                   for path, name in self.tower_inputs]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _first(self) -> InferredAdapter:
        return next(iter(self._views.values()))

    def sizes(self, site: Site) -> tuple[int, int, int, int]:
        return self._view(site).sizes(site)

    @property
    def hidden_size(self) -> int:
        return self._first().hidden_size

    @property
    def n_heads(self) -> int:
        return self._first().n_heads

    @property
    def n_kv_heads(self) -> int:
        return self._first().n_kv_heads

    @property
    def head_dim(self) -> int:
        return self._first().head_dim

    @cached_property
    def _untraced_patterns(self) -> dict[str, str]:
        return {f"{path}.**": f"the {key.removesuffix('_config')} tower ({key}): {UNTRACED_REASON}"
                for key, path in self.untraced}

    def not_analysed_reason(self, key: str) -> str | None:
        from .model_tensors import match

        return match(self._untraced_patterns, self.live_name(key), self.prefix)

    def unanalysed(self) -> list[dict]:
        """Each untraced tower as one module, with its tensors and parameter count (under the checkpoint's
        names: the module is the path its tensors share, where they are stored under saved names)."""
        out = []
        for key, path in self.untraced:
            names = [k for k in self.reader.keys() if self.live_name(k).startswith(f"{self.prefix}{path}.")]  # noqa: SIM118
            if names:
                module = f"{self.prefix}{path}" if self.stored_as is None else _shared_path(names)
                out.append({"module": module, "tensors": sorted(names),
                            "reason": f"the {key.removesuffix('_config')} tower ({key}): {UNTRACED_REASON}",
                            "parameters": sum(math.prod(self.reader.shape(k)) for k in names)})
        return out

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """The model's own outer settings, every tower shrunk to ``shape`` with one layer; a tower whose
        layers are of two kinds, one layer of each (:meth:`InferredAdapter.twin_settings`)."""
        views = {v.found.config_key: v for v in self._views.values()}

        def settings_of(sub) -> dict:
            kw = tower_twin_settings(sub, shape)
            view = next((views[k] for k in self.tower_keys if getattr(hf_config, k) is sub and k in views), None)
            if view is not None and view.found.cross_layers_key is not None:
                kw.update(InferredAdapter.twin_settings(view, sub, shape))
            return kw

        return towers_twin_settings(hf_config, self.tower_keys, settings_of)


def _shared_path(names: list[str]) -> str:
    """The longest module path every name of ``names`` lies below ("" where none)."""
    parts = [n.split(".")[:-1] for n in names]
    shared = []
    for components in zip(*parts):
        if len(set(components)) > 1:
            break
        shared.append(components[0])
    return ".".join(shared)


def inferred_towers_adapter(parts: list[FoundLayout], towers: tuple[str, ...],
                            untraced: tuple[tuple[str, str], ...],
                            tower_inputs: tuple[tuple[str, str], ...] = ()) -> type[InferredTowersAdapter]:
    """An :class:`Adapter` subclass for a multi-tower model whose traced towers' layouts are ``parts``
    (block order; each names its sub-config), with every tower's key ``towers``, the ``untraced``
    towers (key, module path) and the ``tower_inputs`` of towers traced on their own (module path, keyword)."""
    stacks = inferred_stacks_adapter(parts)
    attrs = {k: v for k, v in vars(stacks).items() if not k.startswith("__") or k == "__module__"}
    attrs.update(tower_keys=tuple(towers), untraced=tuple(untraced), tower_inputs=tuple(tower_inputs),
                 __module__=__name__)
    if tower_inputs:     # the blocks read their keys' input under the towers' keywords
        attrs["kv_arguments"] = tuple(dict.fromkeys((*InferredTowersAdapter.kv_arguments, *(k for _, k in tower_inputs))))
    name = stacks.__name__.replace("_StacksAdapter", "_TowersAdapter")
    return type(name, (InferredTowersAdapter,), attrs)


__all__ = ["UNTRACED_REASON", "InferredTowersAdapter", "inferred_towers_adapter", "tower_twin_settings",
           "towers_twin_settings"]
