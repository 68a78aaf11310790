"""An adapter made from a layout found by tracing a live attention module (``idinspect --auto``):
the same reading and writing as every hand-written adapter, with the facts as data.

:class:`FoundLayout` (:mod:`adapters.inferred_layout`) holds what :mod:`idinspect.automatic.trace` found in a tiny twin of the model
(which stored modules play W_Q, W_K, W_V and W_O, their biases and fused row layout, where the layer
list and the attention module are, the positional scheme, the score scale, causality and the q/k
norm); :func:`inferred_adapter` turns it into an :class:`Adapter` subclass for one model type.
Nothing here traces or proves anything: :mod:`idinspect.automatic` does both before the class is
used for counting.
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import torch

from ..errors import IdinspectError, one_line
from ..layer.attention_layer import Positional, QKNorm, QueryTemperature, RelativeBias
from .base import Adapter, Site, rope_positional
from .inferred_inputs import cross_inputs
from .inferred_layout import (  # noqa: F401 - the layout's names, read here and re-exported
    POSITIONAL_CHOICES,
    ROPE_SOURCES,
    ROTARY_DIM_KEYS,
    SCALE_LAWS,
    WINDOW_CHOICES,
    FoundCross,
    FoundLayout,
    FoundNorm,
    LatentModules,
)
from .layout import Block
from .stored_names import ReadsStoredNames


class InferredAdapter(ReadsStoredNames, Adapter):
    """Base of the classes :func:`inferred_adapter` makes: every fact is read from ``found``."""

    family = "automatic"
    found: FoundLayout
    #: The class the trace built its twin with; --prove's twin is built by it too.
    twin_model_class: type | None = None
    #: The model's configuration and modelling code come from its repository (--trust-remote-code).
    trust_remote_code: bool = False
    #: The model takes encoder states it has no encoder for (a decoder saved alone: BartForCausalLM):
    #: its example inputs get N(0, 1) states of T + 3 positions (:func:`~adapters.inferred_inputs.cross_states_argument`).
    encoder_states: bool = False
    #: The model's norm classes and its attention class, whose float32 casts the proofs skip on float64
    #: inputs (RoPE applied in float32 inside the attention module: Cohere, ModernBERT).
    exact_classes: tuple[type, ...] = ()
    #: The keyword the model takes those states under (Mllama's ``cross_attention_states``), with an additive
    #: mask of zeros under ``{stem}_mask`` where it takes one (:func:`cross_inputs`).
    cross_states: str = "encoder_hidden_states"
    def __init__(self, config, reader):
        self.stored_as = self.names_held_by(reader)     # a folder transformers 5 saved: the saved names
        super().__init__(self.own_config(config), reader)

    def own_config(self, config):
        """The settings this adapter reads: transformers' config object (as the trace read them: a
        checkpoint's config.json is built into its config class, whose values a setting left out of the
        file or derived by the class, e.g. ModernBERT's windows, would otherwise miss); a tower's
        sub-config of it (``found.config_key``). A config class transformers does not ship (remote code) is
        left as config.json reads it."""
        full = getattr(config, "full_config", None)
        if callable(full):
            try:
                config = full()
            except IdinspectError:     # a config class of the repository's own code (auto_map): config.json as read
                pass
        if self.found.config_key is None:
            return config
        from .multimodal import sub_config

        return sub_config(config, self.found.config_key)

    @property
    def n_kv_heads(self) -> int:
        if self.found.kv_heads == "one":
            return 1
        return int(self.optional("num_key_value_heads") or self.n_heads)

    def logit_softcap(self, site: Site) -> float | None:
        return float(self.setting(self.found.softcap)) if self.found.softcap else None

    def example_inputs(self, hf_model, input_ids: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        kw = super().example_inputs(hf_model, input_ids, generator)
        if self.encoder_states and self.cross_states not in kw:
            kw.update(cross_inputs(hf_model, self.cross_states, input_ids, generator))
        return kw

    @property
    def num_layers(self) -> int:
        return int(self.setting(self.found.layers_key))

    @cached_property
    def sites(self) -> list[Site]:
        """Every block of the stack, named by ``found.stack``; of layers kept in groups, each stored layer
        once (block g K + k for layer k of group g), "shared" where the model runs more groups than it
        stores (num_hidden_layers > groups: every group runs num_hidden_layers / groups times)."""
        found = self.found
        if found.group_list:
            groups, inner = int(self.setting(found.groups_key)), int(self.setting(found.group_layers_key))
            block = Block("shared" if self.num_layers > groups else "self", found.projections)
            return [Site(f"{self.layer_container}.{g}.{found.group_list}.{k}", found.stack, g * inner + k, block)
                    for g in range(groups) for k in range(inner)]
        return [Site(self.layer_path(i), self.found.stack, i, b) for i in range(self.num_layers) for b in self.blocks(i)]

    def blocks(self, layer: int) -> tuple[Block, ...]:
        """The self-attention block, and the cross-attention block where the trace found one."""
        cross = self.found.cross
        if cross is not None and self.found.cross_layers_key is not None:     # a layer of one kind or the other
            return (Block("cross", cross.projections),) if layer in self._cross_layers else (self.block,)
        return (self.block,) if cross is None else (self.block, Block("cross", cross.projections))

    @cached_property
    def _cross_layers(self) -> frozenset[int]:
        key = self.found.cross_layers_key
        listed = self.optional(key) or []
        if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in listed):
            raise IdinspectError(f"config.json: {key} is {listed!r}; it lists the indices of the cross-attention "
                                 "layers; fix the config")
        return frozenset(listed)

    def sliding_window(self, site: Site) -> int | None:
        window = self.optional("sliding_window")
        if window is None or self.found.window == "none" or site.block.kind == "cross":
            return None
        if self.found.window == "layer_types":
            types = self.optional("layer_types")
            if not (types and types[site.layer] == "sliding_attention"):
                return None
        return int(window) + self.found.window_offset

    def exact_float64(self):
        """The model's norms' and attention's own formulas with their float32 casts skipped on float64 inputs."""
        from .float64 import casts_kept_in

        return casts_kept_in(self.exact_classes)

    @property
    def head_dim(self) -> int:
        return int(self.optional("head_dim") or self.hidden_size // self.n_heads)

    def scale(self, site: Site) -> float:
        """The score scale by ``found.scale_law`` (:data:`SCALE_LAWS`), over layer index + 1 where
        ``found.scale_by_layer``."""
        law = self.found.scale_law
        if law == "head_dim":
            s = self.head_dim ** -0.5
        elif law == "one":
            s = 1.0
        elif law.startswith("key:"):
            s = float(self.setting(law[4:]))
        elif law.startswith("rsqrt:"):
            s = float(self.setting(law[6:])) ** -0.5
        else:
            s = self.found.scale
        return s / (site.layer + 1) if self.found.scale_by_layer else s

    def causal(self, site: Site) -> bool:
        return self.found.causal

    def _uses_rope(self, site: Site) -> bool:
        return self.found.rope_layers_key is None or self._rope_flags[site.layer]

    def attention_chunk(self, site: Site) -> int | None:
        """Chunked attention (``found.chunk_key``) on every layer or on those layer_types marks chunked."""
        found = self.found
        if found.chunk_key is None or site.block.kind == "cross":
            return None
        if found.chunk_layers == "layer_types" and self._layer_types[site.layer] != "chunked_attention":
            return None
        chunk = self.optional(found.chunk_key)
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise IdinspectError(f"config.json: {found.chunk_key} is {chunk!r}; layer {site.layer} attends in chunks "
                                 "of that many tokens; fix the config")
        return chunk

    def query_temperature(self, site: Site) -> QueryTemperature | None:
        """Query temperature tuning (``found.temperature_keys``) on every layer or on those without RoPE."""
        found = self.found
        if found.temperature_keys is None or site.block.kind == "cross":
            return None
        if found.temperature_layers == "norope" and self._uses_rope(site):
            return None
        floor, scale = found.temperature_keys
        return QueryTemperature(float(self.setting(floor)), float(self.setting(scale)))

    @cached_property
    def _ropes(self) -> dict[str | None, Positional]:
        return {}

    def positional(self, site: Site | None = None) -> Positional:
        """RoPE (or nothing) for the layer of ``site`` (the first where None), by ``found``: the
        frequencies from :data:`ROPE_SOURCES`, none on the layers ``found.rope_layers_key`` flags 0."""
        found, layer = self.found, site.layer if site is not None else 0
        if found.positional == "none":
            return Positional("absolute")
        if site is not None and site.block.kind == "cross":    # positions enter its self-attention, not it
            return Positional("none")
        if found.positional == "relative":
            return self._relative(site)
        if found.positional == "alibi":
            from .falcon import alibi_slopes

            slopes = alibi_slopes(self.n_heads)
            if found.alibi_rounding:      # the slopes as the module rounds them (Falcon: bfloat16)
                slopes = slopes.to(getattr(torch, found.alibi_rounding))
            slopes = slopes.to(torch.float64)
            if found.alibi_scale == "head_dim":     # added before the score scale: m_h d_k^-1/2 after it
                slopes = slopes / self.head_dim ** 0.5
            return Positional("alibi", alibi_slopes=slopes)
        if found.rope_layers_key is not None and not self._rope_flags[layer]:
            return Positional("none")
        kind = self._layer_types[layer] if found.rope == "layer_type" else None
        if kind not in self._ropes:
            self._ropes[kind] = self._rope(kind)
        return self._ropes[kind]

    def _relative_key(self, site: Site) -> str:
        if self.found.relative_table:
            return self.stored(f"{self.prefix}{self.found.relative_table}.weight")
        first = next(s for s in self.sites if s.block.kind == "self" and s.stack == site.stack)
        return self.key(site if self.found.relative_per_layer else first, self.found.relative)

    def positional_keys(self) -> list[str]:
        if self.found.relative is None and self.found.relative_table is None:
            return []
        return list(dict.fromkeys(self._relative_key(s) for s in self.sites if s.block.kind == "self"))

    def _relative(self, site: Site | None) -> Positional:
        """T5's relative-position bias: the stack's table (layer 0's, or the layer's own), counted where it is stored."""
        if site is None:
            return Positional("relative")
        key = self._relative_key(site)
        rows = int(self.reader.shape(key)[0]) if key in self.reader else 0
        table = self._load(key, (rows, self.n_heads))
        return Positional("relative", relative=RelativeBias(
            table=table, bidirectional=self.found.relative_bidirectional,
            max_distance=int(self.found.relative_distance or self.setting(self.found.relative_distance_key)),
            owned=self.found.relative_per_layer or site.layer == 0, tensor_name=key))

    @cached_property
    def _layer_types(self) -> list:
        types = list(self.optional("layer_types") or [])
        if len(types) < self.num_layers:
            raise IdinspectError(f"config.json: layer_types is {types!r}; it needs one entry per layer "
                                 f"({self.num_layers}); fix the config")
        return types

    @cached_property
    def _rope_flags(self) -> list[bool]:
        key = self.found.rope_layers_key
        flags = list(self.optional(key) or [])
        if len(flags) < self.num_layers or any(isinstance(v, float) or v not in (0, 1) for v in flags):
            raise IdinspectError(f"config.json: {key} is {flags!r}; it needs one entry per layer ({self.num_layers}), "
                                 "1 for a RoPE layer and 0 for a layer without; fix the config")
        return [bool(v) for v in flags]

    def _rope(self, layer_type: str | None) -> Positional:
        found = self.found
        if found.rope == "layer_type":
            from ..sources.rope_config import rotary_spec_for_layer_type

            config = self.config.full_config() if hasattr(self.config, "full_config") else self.config
            try:
                return Positional("rope", rotary=rotary_spec_for_layer_type(config, layer_type, found.positional))
            except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
                raise IdinspectError(f"config.json: rope_parameters[{layer_type!r}] is not usable by transformers "
                                     f"({type(exc).__name__}: {one_line(exc)}); fix the config") from None
        if found.rope == "default":
            from ..sources.rope_config import DEFAULT_THETA, default_rotary_spec

            stored = self.optional(found.rotary_dim_key) if found.rotary_dim_key else None
            dim = stored or self.head_dim
            if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2 or dim > self.head_dim:
                raise IdinspectError(f"config.json: {found.rotary_dim_key} is {stored!r}; the module rotates an even "
                                     f"number of dims of each head, at most head_dim {self.head_dim}; fix the config")
            return Positional("rope", rotary=default_rotary_spec(DEFAULT_THETA, dim, found.positional))
        rope = rope_positional(self.config, found.positional, found.partial_rotary)
        if found.rope_polar:
            rope = dataclasses.replace(rope, rotary=dataclasses.replace(rope.rotary, polar=True))
        return rope

    def qk_norm(self, site: Site) -> QKNorm | None:
        norm = self.found.qk_norm
        if self.found.l2_norm_eps_key is not None and site.block.kind != "cross":
            if self.found.l2_norm_layers == "rope" and not self._uses_rope(site):
                return None
            return QKNorm("l2", "head", float(self.setting(self.found.l2_norm_eps_key)), after_rope=True)
        if site.block.kind == "cross":
            norm = self.found.cross.qk_norm
            return None if norm is None else self.read_qk_norm(site, norm.kind, norm.scope, norm.eps,
                                                               (norm.q_module, norm.k_module), norm.gain_offset)
        if norm is None:
            return None
        if norm.heads_list:
            return self._per_head_norm(site, norm)
        found = self.read_qk_norm(site, norm.kind, norm.scope, norm.eps, (norm.q_module, norm.k_module),
                                  gain_offset=norm.gain_offset)
        if not norm.bias:
            return found
        biases, names = {}, dict(found.tensor_names)
        for role, module in (("q", norm.q_module), ("k", norm.k_module)):
            key = self.key(site, f"{module}.bias")
            biases[f"{role}_bias"], names[f"{role}_bias"] = self._load(key, tuple(self.reader.shape(key))), key
        return dataclasses.replace(found, tensor_names=names, **biases)

    def _per_head_norm(self, site: Site, norm: FoundNorm) -> QKNorm:
        """A norm stored as one module per head: gains (and biases) [H, d_k] / [G, d_k] from
        ``{module}.{heads_list}.{h}.weight`` (``.bias``), named ``{module}.{heads_list}.*.weight``."""
        tensors, names = {}, {}
        for role, module, heads in (("q", norm.q_module, self.n_heads), ("k", norm.k_module, self.n_kv_heads)):
            for part, suffix in (("gain", "weight"), ("bias", "bias")):
                if part == "bias" and not norm.bias:
                    continue
                keys = [self.key(site, f"{module}.{norm.heads_list}.{h}.{suffix}") for h in range(heads)]
                tensors[f"{role}_{part}"] = torch.stack([self._load(k, (self.head_dim,)) for k in keys])
                names[f"{role}_{part}"] = self.key(site, f"{module}.{norm.heads_list}.*.{suffix}")
        return QKNorm(norm.kind, "head", norm.eps, gain_offset=norm.gain_offset, tensor_names=names, **tensors)

    def qk_norm_stored(self, site: Site, norm: QKNorm) -> dict[str, torch.Tensor]:
        """Per-head norm modules: each head's gain (and bias) back under its own module's name."""
        found = self.found.qk_norm
        if found is None or not found.heads_list:
            return super().qk_norm_stored(site, norm)
        out = {}
        for role, module in (("q", found.q_module), ("k", found.k_module)):
            for part, suffix in (("gain", "weight"), ("bias", "bias")):
                tensor = getattr(norm, f"{role}_{part}")
                if tensor is not None:
                    out.update({self.key(site, f"{module}.{found.heads_list}.{h}.{suffix}"): tensor[h]
                                for h in range(tensor.shape[0])})
        return out

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """The model's own settings with the twin's sizes: nothing the trace did not see changes (layers
        kept in groups: one group of one layer, run once; a layer of each kind where the layers listed in
        ``found.cross_layers_key`` hold the cross block)."""
        key = self.found.cross_layers_key
        if key is None:
            kw = twin_settings_from(hf_config, shape)
            if self.found.group_list:
                kw.update({self.found.groups_key: 1, self.found.group_layers_key: 1})
            return kw
        kw = {**twin_settings_from(hf_config, shape, 2), "num_hidden_layers": 2, key: [1]}
        for name, fallback in (("bos_token_id", 1), ("eos_token_id", 2)):
            # ids outside the twin's 32 tokens: a token inside where the config class wants an int (Mllama's)
            v = getattr(hf_config, name, None)
            kw[name] = None if v is None else v if isinstance(v, int) and 0 <= v < 32 else fallback
        return kw


#: Settings a twin never copies from the model: sizes it sets itself, and bookkeeping.
_NOT_COPIED = ("num_hidden_layers", "vocab_size", "architectures", "_name_or_path", "transformers_version",
               "torch_dtype", "dtype", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id",
               "layer_types", "intermediate_size", "hidden_size", "num_attention_heads", "num_key_value_heads",
               "head_dim", "id2label", "label2id", "tie_word_embeddings")


def twin_settings_from(hf_config, shape: dict, layers: int = 1) -> dict:
    """``hf_config``'s settings with ``shape``'s sizes (heads, kv_heads, head_dim, hidden_size), a
    small MLP and ``layers`` layers: every per-layer list (one entry per layer: layer types, NoPE flags,
    limits) cut to its first ``layers`` entries. The config of a twin built by the model's own class."""
    n = int(getattr(hf_config, "num_hidden_layers", 0) or 0)
    kw = {k: v for k, v in hf_config.to_dict().items() if k not in _NOT_COPIED}
    for k, v in list(kw.items()):
        if n > 1 and isinstance(v, list) and len(v) == n:
            kw[k] = (v * layers)[:layers] if layers > n else v[:layers]
    width, heads = getattr(hf_config, "hidden_size", None), getattr(hf_config, "num_attention_heads", None)
    for k, v in list(kw.items()):
        if not isinstance(v, int) or isinstance(v, bool):
            continue
        # a width stated equal to the model's (OPT's word_embed_proj_dim) follows the twin's: equal widths
        # mean no projection between them, in the twin as in the model; likewise a layer count equal to the
        # model's (BART's decoder_layers, where num_hidden_layers names encoder_layers), and a head count
        if k.endswith(("_dim", "_size")) and v == width:
            kw[k] = shape["hidden_size"]
        elif k.endswith("_layers") and v == n:
            kw[k] = layers
        elif k.endswith("_heads") and v == heads:       # BART's decoder_attention_heads
            kw[k] = shape["heads"]
    kw.update({"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16})
    if not isinstance(getattr(type(hf_config), "head_dim", None), property):
        kw["head_dim"] = shape["head_dim"]
    if hasattr(hf_config, "num_key_value_heads") and not isinstance(getattr(type(hf_config), "num_key_value_heads", None), property):
        kw["num_key_value_heads"] = shape["kv_heads"]
    rotated = max(2, shape["head_dim"] // 4 * 2)      # two planes of a head of 8 (one of a head of 4)
    rope = kw.get("rope_parameters")
    if isinstance(rope, dict) and 0 < float(rope.get("partial_rotary_factor", 1.0)) < 1:
        kw["rope_parameters"] = {**rope, "partial_rotary_factor": rotated / shape["head_dim"]}
    real_hd = _head_dim(hf_config)
    for key in ROTARY_DIM_KEYS:      # rotated dims named by count (GPT-J's rotary_dim)
        v = kw.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and real_hd:
            kw[key] = rotated if v < real_hd else shape["head_dim"]
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types:
        kw["layer_types"] = list(layer_types[:layers])
    patch, image = kw.get("patch_size"), kw.get("image_size")
    if isinstance(patch, int) and isinstance(image, int) and image > 3 * patch:
        kw["image_size"] = 3 * patch           # 9 patches: a vision twin's sequences as short as a text twin's
    pad = getattr(hf_config, "pad_token_id", None)
    if isinstance(pad, int) and 0 <= pad < 32:     # a family that derives positions from padding (RoBERTa)
        kw["pad_token_id"] = pad
    return kw


def _head_dim(hf_config) -> int | None:
    heads = getattr(hf_config, "num_attention_heads", None)
    return getattr(hf_config, "head_dim", None) or (int(hf_config.hidden_size) // int(heads) if heads else None)


def rotates_part(hf_config) -> bool:
    """Whether ``hf_config`` asks for RoPE on part of each head (``partial_rotary_factor`` < 1, or a
    :data:`ROTARY_DIM_KEYS` setting below head_dim): its twin then needs heads of 8 dims, two of whose
    planes rotate, for rotate-half and interleaved pairs to differ."""
    rope = getattr(hf_config, "rope_parameters", None)
    if isinstance(rope, dict) and 0 < float(rope.get("partial_rotary_factor", 1.0) or 1.0) < 1:
        return True
    hd = _head_dim(hf_config)
    return any(isinstance(v, int) and not isinstance(v, bool) and hd and v < hd
               for v in (getattr(hf_config, k, None) for k in ROTARY_DIM_KEYS))


def inferred_adapter(found: FoundLayout) -> type[InferredAdapter]:
    """An :class:`Adapter` subclass for ``found.model_type`` whose layout is ``found``."""
    attrs = {
        "found": found,
        "model_types": (found.model_type,),
        "layer_container": found.layer_container,
        "block": Block("self", found.projections),
        "hf_modules": {"self": (found.attention_module, found.output_module),
                       **({"shared": (found.attention_module, found.output_module)} if found.group_list else {}),
                       **({"cross": (found.cross.attention_module, found.cross.output_module)} if found.cross else {})},
        "model_tensors": dict(found.model_tensors),
        "sinks_tensor": found.sinks,
        **({"hf_shared_tables": {"self": (found.relative_table, found.relative_keyword)},
            "twin_tokens": max(InferredAdapter.twin_tokens, found.relative_tokens)} if found.relative_table else {}),
        "__module__": __name__,
    }
    name = "Automatic_" + "".join(c if c.isalnum() else "_" for c in found.model_type) + "_Adapter"
    return type(name, (InferredAdapter,), attrs)


__all__ = ["POSITIONAL_CHOICES", "ROPE_SOURCES", "ROTARY_DIM_KEYS", "SCALE_LAWS", "FoundCross", "FoundLayout", "FoundNorm",
           "InferredAdapter", "LatentModules", "inferred_adapter", "rotates_part", "twin_settings_from"]
