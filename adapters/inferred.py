"""An adapter made from a layout found by tracing a live attention module (``idinspect --auto``):
the same reading and writing as every hand-written adapter, with the facts as data.

:class:`FoundLayout` holds what :mod:`idinspect.automatic.trace` found in a tiny twin of the model
(which stored modules play W_Q, W_K, W_V and W_O, their biases and fused row layout, where the layer
list and the attention module are, the positional scheme, the score scale, causality and the q/k
norm); :func:`inferred_adapter` turns it into an :class:`Adapter` subclass for one model type.
Nothing here traces or proves anything: :mod:`idinspect.automatic` does both before the class is
used for counting.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

from ..layer.attention_layer import Positional, QKNorm
from .base import Adapter, Site, rope_positional
from .layout import Block, Projection

#: Where positions enter: nothing inside attention, or RoPE with rotate-half / interleaved pairs.
POSITIONAL_CHOICES = ("none", "half", "interleaved")
#: Which layers see config.sliding_window: none, all, or those ``layer_types`` marks "sliding_attention".
WINDOW_CHOICES = ("none", "all", "layer_types")


@dataclass(frozen=True)
class FoundNorm:
    """A q/k norm found on the projections' outputs: module names relative to the layer."""

    kind: str                      # "rms" | "layer"
    scope: str                     # "head" | "projection"
    eps: float
    q_module: str
    k_module: str
    gain_offset: float = 0.0
    bias: bool = False             # a LayerNorm's bias after the gain (Phi's, Persimmon's q/k LayerNorms)


@dataclass(frozen=True)
class FoundLayout:
    """Layout facts of one model type's attention, as found in a live module."""

    model_type: str
    layer_container: str                        # relative to the base model: "layers", "encoder.layer"
    attention_module: str                       # relative to the layer: "self_attn", "attention.self"
    output_module: str | None                   # relative to the layer, where the module's output is not W_O's
    projections: tuple[Projection, ...]
    positional: str                             # one of POSITIONAL_CHOICES
    partial_rotary: bool
    scale: float
    causal: bool
    qk_norm: FoundNorm | None = None
    model_tensors: dict[str, str] = field(default_factory=dict)
    window: str = "none"                        # one of WINDOW_CHOICES
    softcap: str | None = None                  # the config key of the scores' soft cap c (s -> c tanh(s / c))
    kv_heads: str = "config"                    # "config": num_key_value_heads (else H); "one": multi-query


class InferredAdapter(Adapter):
    """Base of the classes :func:`inferred_adapter` makes: every fact is read from ``found``."""

    family = "automatic"
    found: FoundLayout
    #: The class the trace built its twin with; --prove's twin is built by it too.
    twin_model_class: type | None = None
    #: The model's configuration and modelling code come from its repository (--trust-remote-code).
    trust_remote_code: bool = False
    #: The model's norm classes, whose float32 casts the proofs skip on float64 inputs.
    norm_classes: tuple[type, ...] = ()

    @property
    def n_kv_heads(self) -> int:
        if self.found.kv_heads == "one":
            return 1
        return int(self.optional("num_key_value_heads") or self.n_heads)

    def logit_softcap(self, site: Site) -> float | None:
        return float(self.setting(self.found.softcap)) if self.found.softcap else None

    def sliding_window(self, site: Site) -> int | None:
        window = self.optional("sliding_window")
        if self.found.window == "all":
            return window
        if self.found.window == "layer_types":
            types = self.optional("layer_types")
            return window if types and types[site.layer] == "sliding_attention" else None
        return None

    def exact_float64(self):
        """The model's norms' own formulas with their float32 casts skipped on float64 inputs."""
        from .float64 import casts_kept_in

        return casts_kept_in(self.norm_classes)

    @property
    def head_dim(self) -> int:
        return int(self.optional("head_dim") or self.hidden_size // self.n_heads)

    def scale(self, site: Site) -> float:
        return self.found.scale

    def causal(self, site: Site) -> bool:
        return self.found.causal

    @cached_property
    def _positional(self) -> Positional:
        if self.found.positional == "none":
            return Positional("absolute")
        return rope_positional(self.config, self.found.positional, self.found.partial_rotary)

    def positional(self, site: Site | None = None) -> Positional:
        return self._positional

    def qk_norm(self, site: Site) -> QKNorm | None:
        norm = self.found.qk_norm
        if norm is None:
            return None
        found = self.read_qk_norm(site, norm.kind, norm.scope, norm.eps, (norm.q_module, norm.k_module),
                                  gain_offset=norm.gain_offset)
        if not norm.bias:
            return found
        biases, names = {}, dict(found.tensor_names)
        for role, module in (("q", norm.q_module), ("k", norm.k_module)):
            key = self.key(site, f"{module}.bias")
            biases[f"{role}_bias"], names[f"{role}_bias"] = self._load(key, tuple(self.reader.shape(key))), key
        return dataclasses.replace(found, tensor_names=names, **biases)

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """The model's own settings with the twin's sizes: nothing the trace did not see changes."""
        return twin_settings_from(hf_config, shape)


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
    kw.update({"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16})
    if not isinstance(getattr(type(hf_config), "head_dim", None), property):
        kw["head_dim"] = shape["head_dim"]
    if hasattr(hf_config, "num_key_value_heads") and not isinstance(getattr(type(hf_config), "num_key_value_heads", None), property):
        kw["num_key_value_heads"] = shape["kv_heads"]
    rope = kw.get("rope_parameters")
    if isinstance(rope, dict) and 0 < float(rope.get("partial_rotary_factor", 1.0)) < 1:
        kw["rope_parameters"] = {**rope, "partial_rotary_factor": 2 / shape["head_dim"]}   # one rotated plane
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


def inferred_adapter(found: FoundLayout) -> type[InferredAdapter]:
    """An :class:`Adapter` subclass for ``found.model_type`` whose layout is ``found``."""
    attrs = {
        "found": found,
        "model_types": (found.model_type,),
        "layer_container": found.layer_container,
        "block": Block("self", found.projections),
        "hf_modules": {"self": (found.attention_module, found.output_module)},
        "model_tensors": dict(found.model_tensors),
        "__module__": __name__,
    }
    name = "Automatic_" + "".join(c if c.isalnum() else "_" for c in found.model_type) + "_Adapter"
    return type(name, (InferredAdapter,), attrs)


__all__ = ["POSITIONAL_CHOICES", "FoundLayout", "FoundNorm", "InferredAdapter", "inferred_adapter",
           "twin_settings_from"]
