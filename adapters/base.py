"""The generic adapter: reads and writes the attention blocks a family module describes as data.

A family module (``adapters/llama.py``, ...) subclasses :class:`Adapter` and sets class data:
``model_types``, ``layer_container`` (the layer list's path, e.g. ``"layers"``), ``block`` (or
:meth:`Adapter.blocks` when blocks depend on the config), size names in ``config_names``; it
overrides a method only for a true special case (a scale, a positional scheme, a sliding window).
Everything else (finding the prefix, checked reads, fused splits, orientation, the write-back, the
list of stored tensors) happens here, the same way for every family. Nothing here knows any
mathematics.

Attention blocks are numbered flat, in layer order (for a layer with self- and cross-attention:
self first); :attr:`AttentionLayer.index` is that number, :attr:`AttentionLayer.layer` the layer
number within its stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import torch

from ..errors import IdinspectError, one_line
from ..layer.attention_layer import AttentionLayer, Positional, QKNorm, QueryTemperature

#: The stored tensors of a q/k norm, in the order :meth:`Adapter.attention_keys` lists them.
QK_NORM_ROLES = ("q_gain", "k_gain", "q_bias", "k_bias")
from ..sources.checkpoint import TensorReader
from ..sources.config import setting_optional
from .layout import (
    Block,
    Projection,
    fused_rows,
    head_rows,
    heads_from_linear_cols,
    heads_from_linear_rows,
    linear_cols_from_heads,
    linear_rows_from_heads,
)
from .live import LiveModel
from .model_tensors import TASK_HEADS, match

ROLE_COUNT = {"q": "H", "k": "G", "v": "G"}


#: Buffers any family's checkpoint may hold (position ids, RoPE frequencies, causal masks, token-type
#: ids): recomputed from the config, so neither weights nor undeclared tensors.
GENERIC_BUFFER_SUFFIXES = ("position_ids", "inv_freq", "masked_bias", "token_type_ids")


@dataclass(frozen=True)
class Site:
    """Where one attention block lives: ``path`` of its layer (relative to the model prefix, e.g.
    ``"decoder.layers.3"``), the ``stack`` it belongs to ("" for one-stack models) and its layer
    number there."""

    path: str
    stack: str
    layer: int
    block: Block


class Adapter(LiveModel):
    """Maps one architecture family's checkpoint tensors to :class:`AttentionLayer` and back."""

    family: ClassVar[str]
    #: model_type values (config.json) this adapter reads.
    model_types: ClassVar[tuple[str, ...]]
    #: Path of the layer list relative to the model prefix (``"layers"``, ``"encoder.layer"``, ``"h"``).
    layer_container: ClassVar[str]
    #: The one attention block every layer has, unless :meth:`blocks` says otherwise.
    block: ClassVar[Block]
    #: config.json names of the sizes, where they are not transformers' standard names.
    config_names: ClassVar[dict[str, str]] = {}
    #: The norm whose gain multiplies a block's input, for comparisons that fold it into the
    #: projections: pre-norm families name it relative to the block's layer (tried in order);
    #: post-norm families name (the embeddings' norm relative to the prefix, the previous layer's
    #: output norm relative to that layer) in ``post_norm``. Empty: nothing is folded.
    pre_norm: ClassVar[tuple[str, ...]] = ()
    #: The norm computes its gain as this offset plus the stored w (Gemma: 1 + w); 0: the stored tensor is the gain.
    norm_gain_offset: ClassVar[float] = 0.0
    #: A pre-norm family's first layer without a norm of its own: the norm feeding it (prefix-relative).
    first_block_norm: ClassVar[str | None] = None
    post_norm: ClassVar[tuple[str, str] | None] = None
    #: Suffixes of stored tensors that are buffers, not parameters (never counted, never biases).
    buffer_suffixes: ClassVar[tuple[str, ...]] = ()
    #: The per-head attention-sink logits [H] of a self-attention block, relative to the layer
    #: (gpt-oss: ``"self_attn.sinks"``); None: the family has none.
    sinks_tensor: ClassVar[str | None] = None
    #: The form its layers are read into (``"per_head"``: :class:`AttentionLayer`; ``"latent"``:
    #: :class:`LatentAttentionLayer`); :func:`idinspect.forms.form_of` maps it to its mathematics.
    form: ClassVar[str] = "per_head"
    #: Every stored tensor that is the model's rather than an attention block's, as ``pattern ->
    #: component`` (:mod:`adapters.model_tensors`: syntax, components); the coverage check refuses a
    #: tensor that neither a block reads nor a declaration names.
    model_tensors: ClassVar[dict[str, str]] = {}
    #: Stored tensors left out of every analysis on purpose, as ``pattern -> reason``.
    not_analysed_tensors: ClassVar[dict[str, str]] = {}

    def __init__(self, config, reader: TensorReader):
        self.config = config
        self.reader = reader
        check_sizes(self)
        self.prefix = self._find_prefix(reader.keys())

    # config ----------------------------------------------------------------------
    def setting(self, name: str) -> Any:
        """A setting under transformers' standard name (``hidden_size``), read under the family's own."""
        return getattr(self.config, self.config_names.get(name, name))

    def optional(self, name: str, default: Any = None) -> Any:
        """A setting the modeling code reads with ``getattr(config, name, default)``."""
        return setting_optional(self.config, self.config_names.get(name, name), default)

    @property
    def num_layers(self) -> int:
        return int(self.setting("num_hidden_layers"))

    @property
    def hidden_size(self) -> int:
        return int(self.setting("hidden_size"))

    @property
    def n_heads(self) -> int:
        return int(self.setting("num_attention_heads"))

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.n_heads

    def sizes(self, site: Site) -> tuple[int, int, int, int]:
        """(H, G, head width, model width) of the block at ``site``: the model's sizes, unless a
        family's stacks differ in width (CLIP's and SigLIP's text and vision towers)."""
        return self.n_heads, self.n_kv_heads, self.head_dim, self.hidden_size

    @property
    def architecture(self) -> str:
        archs = getattr(self.config, "architectures", None) or []
        return str(archs[0]) if archs else f"{self.family} ({self.config.model_type})"

    # structure -------------------------------------------------------------------
    def blocks(self, layer: int) -> tuple[Block, ...]:
        """The attention blocks of ``layer`` (default: the family's one ``block``)."""
        return (self.block,)

    def layer_path(self, layer: int) -> str:
        return f"{self.layer_container}.{layer}"

    @cached_property
    def sites(self) -> list[Site]:
        """Every attention block of the model, in flat block order."""
        return [Site(self.layer_path(i), "", i, b) for i in range(self.num_layers) for b in self.blocks(i)]

    @property
    def num_blocks(self) -> int:
        return len(self.sites)

    def containers(self) -> dict[str, int]:
        """Each layer list's path -> its number of layers (to catch weights of layers the config lacks)."""
        out: dict[str, int] = {}
        for s in self.sites:
            container = s.path.rsplit(".", 1)[0]
            out[container] = max(out.get(container, 0), s.layer + 1)
        return out

    # per-block facts (override for special cases) ---------------------------------------
    def scale(self, site: Site) -> float:
        return self.head_dim ** -0.5

    def causal(self, site: Site) -> bool:
        return True

    def positional(self, site: Site | None = None) -> Positional:
        """How positions enter attention; absolute embeddings (outside attention) by default."""
        return Positional("absolute")

    def sliding_window(self, site: Site) -> int | None:
        return None

    def attention_chunk(self, site: Site) -> int | None:
        """Chunked attention's chunk size c (query i sees key j only where i // c == j // c); None: none."""
        return None

    def query_temperature(self, site: Site) -> QueryTemperature | None:
        """A position-dependent scale of the queries (Llama 4's temperature tuning); None: none."""
        return None

    def flags(self, site: Site) -> frozenset[str]:
        return frozenset()

    def logit_softcap(self, site: Site) -> float | None:
        """The soft-capping constant c of the block's scores (s -> c tanh(s / c)); None: no cap."""
        return None

    def form_summary(self) -> dict:
        """What the JSON ``model`` object says about the attention form beyond the common keys (the
        latent form's ``attention`` and ``latent`` widths); nothing for the per-head form."""
        return {}

    def unanalysed(self) -> list[dict]:
        """Attention modules the checkpoint holds that the counts leave out, each as ``{"module",
        "tensors", "parameters", "reason"}`` (SigLIP's attention-pooling head); every report lists
        them. None by default."""
        return []

    def model_component(self, key: str) -> str | None:
        """The component (:data:`~adapters.model_tensors.COMPONENTS`) that stored tensor ``key`` is
        declared as in :attr:`model_tensors` (or the shared task heads); None: not declared."""
        return match({**self.model_tensors, **TASK_HEADS}, key, self.prefix)

    def not_analysed_reason(self, key: str) -> str | None:
        """Why stored tensor ``key`` is left out of every analysis (:attr:`not_analysed_tensors`); None: it is not."""
        return match(self.not_analysed_tensors, key, self.prefix)

    def qk_norm(self, site: Site) -> QKNorm | None:
        """The block's q/k norm as data (:meth:`read_qk_norm` reads the usual layouts); None by default."""
        return None

    def read_qk_norm(self, site: Site, kind: str, scope: str, eps: float, gains: tuple[str, str] | None,
                     gain_offset: float = 0.0) -> QKNorm:
        """A :class:`QKNorm` whose gains are stored as ``{gains[0]}.weight`` / ``{gains[1]}.weight``
        (module names relative to the layer; None: no gains). Shapes checked against the config:
        [d_k] (one vector all heads share), [H, d_k] / [G, d_k] (per head) for ``scope="head"``,
        [H d_k] / [G d_k] for ``scope="projection"``."""
        if gains is None:
            return QKNorm(kind, scope, float(eps))
        hd, counts = self.head_dim, {"q": self.n_heads, "k": self.n_kv_heads}
        found, names = {}, {}
        for role, module in zip("qk", gains):
            key = self.key(site, f"{module}.weight")
            stored = tuple(self.reader.shape(key)) if key in self.reader else None
            heads = counts[role]
            allowed = [(heads * hd,)] if scope == "projection" else [(hd,), (heads, hd)]
            shape = stored if stored in allowed else allowed[0]
            found[f"{role}_gain"], names[f"{role}_gain"] = self._load(key, shape), key
        return QKNorm(kind, scope, float(eps), gain_offset=float(gain_offset), tensor_names=names, **found)


    def is_buffer(self, key: str) -> bool:
        """A stored buffer, recomputed from the config (never a weight): the family's own suffixes and
        :data:`GENERIC_BUFFER_SUFFIXES`, which transformers saved for every family in some versions."""
        return key.endswith(self.buffer_suffixes + GENERIC_BUFFER_SUFFIXES)

    # names -------------------------------------------------------------------------
    def _find_prefix(self, keys: list[str]) -> str:
        """The part before the first layer's path: '' for base-model saves, 'model.' etc. for task models."""
        first = self.sites[0]
        probe = f"{first.path}.{first.block.projections[0].weight_name}"
        pattern = re.compile(r"^((?:.+\.)?)" + re.escape(probe) + "$")
        prefixes = sorted({m.group(1) for k in keys if (m := pattern.match(k))}, key=len)
        if not prefixes:
            raise IdinspectError(f"no tensor named '*{probe}' in the checkpoint; config.json says model_type "
                                 f"'{self.config.model_type}': check that the weights belong to this config")
        return prefixes[0]

    def key(self, site: Site, name: str) -> str:
        return f"{self.prefix}{site.path}.{name}"

    def _stored(self, site: Site) -> list[tuple[Projection, str, str | None]]:
        """(projection, weight key, bias key or None) of each stored module of the block."""
        return [(p, self.key(site, p.weight_name), self.key(site, p.bias_name) if p.bias else None)
                for p in site.block.projections]

    def positional_keys(self) -> list[str]:
        """Stored tensors that belong to attention without being one block's W/b (a relative-position
        bias table); the coverage check (:mod:`idinspect.sources.coverage`) counts them as read."""
        return []

    def _sinks_key(self, site: Site) -> str | None:
        return self.key(site, self.sinks_tensor) if self.sinks_tensor and site.block.kind == "self" else None

    def attention_keys(self, n: int) -> list[str]:
        """Every checkpoint tensor that :meth:`write_layer` produces for block ``n``."""
        site = self.sites[n]
        keys = [k for _, w, b in self._stored(site) for k in (w, b) if k is not None]
        sinks = self._sinks_key(site)
        return keys + ([sinks] if sinks else []) + self._qk_norm_keys(n)

    def _qk_norm_keys(self, n: int) -> list[str]:
        """Checkpoint names of block ``n``'s q/k norm gains and biases (the gauge-fixed form trades
        the gains, so :meth:`write_layer` writes them); read once per block."""
        cache = self.__dict__.setdefault("_qk_norm_key_cache", {})
        if n not in cache:
            norm = self.qk_norm(self.sites[n])
            cache[n] = [] if norm is None else list(self.qk_norm_stored(self.sites[n], norm))
        return cache[n]

    def qk_norm_stored(self, site: Site, norm: QKNorm) -> dict[str, torch.Tensor]:
        """``norm``'s gains and biases under their checkpoint names, shaped as stored (by default one
        tensor per role, named in ``norm.tensor_names``; a family storing one module per head overrides)."""
        return {norm.tensor_names[r]: getattr(norm, r) for r in QK_NORM_ROLES
                if getattr(norm, r) is not None and r in norm.tensor_names}

    def input_norm_keys(self, n: int) -> list[str]:
        """Checkpoint names that may hold the gain of the norm feeding block ``n`` (first found wins;
        see :attr:`pre_norm`); empty for cross-attention blocks and families that declare none."""
        site = self.sites[n]
        if site.block.kind == "cross":
            return []
        if self.pre_norm:
            keys = [self.key(site, name) for name in self.pre_norm]
            if n == 0 and self.first_block_norm:
                keys.append(f"{self.prefix}{self.first_block_norm}")
            return keys
        if self.post_norm:
            embeddings, previous = self.post_norm
            earlier = [s for s in self.sites[:n] if s.stack == site.stack and s.block.kind != "cross"]
            return [self.key(earlier[-1], previous) if earlier else f"{self.prefix}{embeddings}"]
        return []

    # reading -------------------------------------------------------------------------
    def read_layer(self, n: int) -> AttentionLayer:
        """Block ``n`` in canonical form (tensors are views of the stored ones, in their dtype)."""
        site = self.sites[n]
        H, G, hd, d = self.sizes(site)
        counts = {"q": H, "k": G, "v": G}
        t: dict[str, torch.Tensor] = {}
        names: dict[str, str] = {}
        for p, wkey, bkey in self._stored(site):
            if p.roles == "o":
                shape = (H * hd, d) if p.conv1d else (d, H * hd)
                w = self._load(wkey, shape)
                t["W_O"] = w.reshape(H, hd, d) if p.conv1d else heads_from_linear_cols(w, H, hd)
                names["W_O"] = wkey
                if bkey:
                    t["b_O"], names["b_O"] = self._load(bkey, (d,)), bkey
                continue
            rows = sum(counts[r] for r in p.roles) * hd
            w = self._load(wkey, (d, rows) if p.conv1d else (rows, d))
            w = w.T if p.conv1d else w
            b = self._load(bkey, (rows,)) if bkey else None
            index = fused_rows(p.layout, p.roles, counts, hd) if len(p.roles) > 1 else None
            for role in p.roles:
                R = role.upper()
                n_heads = counts[role]
                if index is None:
                    wr, br = w, b
                    names[f"W_{R}"] = wkey
                    if bkey:
                        names[f"b_{R}"] = bkey
                    t[f"W_{R}"] = heads_from_linear_rows(wr, n_heads, hd)
                    if br is not None:
                        t[f"b_{R}"] = br.reshape(n_heads, hd)
                else:
                    idx = index[role]
                    t[f"W_{R}"] = head_rows(w, idx, hd).transpose(1, 2)     # views where the layout allows
                    if b is not None:
                        t[f"b_{R}"] = head_rows(b, idx, hd)
                    names[f"W_{R}"] = f"{wkey}[:, {_describe(idx)}]" if p.conv1d else f"{wkey}[{_describe(idx)}]"
                    if bkey:
                        names[f"b_{R}"] = f"{bkey}[{_describe(idx)}]"
        sinks_key = self._sinks_key(site)
        if sinks_key:
            t["sinks"], names["sinks"] = self._load(sinks_key, (H,)), sinks_key
        return AttentionLayer(index=n, **t, scale=self.scale(site), logit_softcap=self.logit_softcap(site),
                              causal=self.causal(site) and site.block.kind != "cross",
                              positional=self.positional(site), sliding_window=self.sliding_window(site),
                              flags=self.flags(site), kind=site.block.kind, stack=site.stack, layer=site.layer,
                              tensor_names=names, qk_norm=self.qk_norm(site),
                              attention_chunk=self.attention_chunk(site), query_temperature=self.query_temperature(site))

    def _load(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """Read ``name``, checking its shape against what the config implies."""
        if name not in self.reader:
            raise IdinspectError(f"tensor {name} is missing from the checkpoint (config.json implies it); "
                                 "the checkpoint is incomplete or does not match its config")
        got = self.reader.shape(name)
        if tuple(got) != tuple(shape):
            raise IdinspectError(f"tensor {name} has shape {list(got)} but config.json implies {list(shape)}; "
                                 "the checkpoint does not match its config")
        return self.reader.get(name)

    # writing -------------------------------------------------------------------------
    def write_layer(self, layer: AttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """Tensors under their checkpoint names, orientation and fusion.

        ``dtype=None`` keeps each tensor's checkpoint dtype; otherwise everything is cast to ``dtype``.
        """
        site = self.sites[layer.index]
        H, G, hd, _ = self.sizes(site)
        counts = {"q": H, "k": G, "v": G}
        out: dict[str, torch.Tensor] = {}
        for p, wkey, bkey in self._stored(site):
            if p.roles == "o":
                out[wkey] = layer.W_O.reshape(-1, layer.W_O.shape[2]) if p.conv1d else linear_cols_from_heads(layer.W_O)
                if bkey:
                    out[bkey] = layer.b_O
                continue
            parts = {r: linear_rows_from_heads(getattr(layer, f"W_{r.upper()}")) for r in p.roles}
            biases = {r: getattr(layer, f"b_{r.upper()}").reshape(-1) for r in p.roles} if bkey else {}
            if len(p.roles) == 1:
                w, b = parts[p.roles], biases.get(p.roles)
            else:
                index = fused_rows(p.layout, p.roles, counts, hd)
                first = parts[p.roles[0]]
                rows = sum(v.shape[0] for v in parts.values())
                w = first.new_empty((rows, first.shape[1]))
                b = first.new_empty((rows,)) if bkey else None
                for r in p.roles:
                    w[index[r]] = parts[r]
                    if b is not None:
                        b[index[r]] = biases[r].to(b.dtype)
            out[wkey] = w.T if p.conv1d else w
            if bkey:
                out[bkey] = b
        sinks_key = self._sinks_key(site)
        if sinks_key:
            out[sinks_key] = layer.sinks
        if layer.qk_norm is not None:
            out.update(self.qk_norm_stored(site, layer.qk_norm))
        return {k: self._cast(k, v, dtype) for k, v in out.items()}

    def _cast(self, name: str, t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
        target = dtype if dtype is not None else self.reader.dtype(name)
        return t.to(target).contiguous()

#: Settings that must be integers where set (a transformers config class would refuse anything else).
_SIZE_SETTINGS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim")


def check_sizes(a: Adapter) -> None:
    """Layer and head counts the shape checks rely on, with the config field named."""
    for name in _SIZE_SETTINGS:
        value = a.optional(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise IdinspectError(f"config.json: {name} is {value!r}, not an integer; fix the config")
    try:
        numbers = {"layers": a.num_layers, "heads": a.n_heads, "kv_heads": a.n_kv_heads,
                   "hidden_size": a.hidden_size, "head_dim": a.head_dim}
    except (TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        raise IdinspectError(f"config.json: layer/head sizes are missing or not integers ({one_line(exc)})") from None
    bad = [k for k, v in numbers.items() if v < 1]
    if bad:
        raise IdinspectError(f"config.json: {', '.join(f'{k}={numbers[k]}' for k in bad)} must be positive; fix the config")
    if numbers["heads"] % numbers["kv_heads"]:
        raise IdinspectError(f"config.json: {numbers['heads']} attention heads do not divide into "
                             f"{numbers['kv_heads']} key/value heads; fix the config")
    if a.optional("head_dim") is None and numbers["hidden_size"] % numbers["heads"]:
        raise IdinspectError(f"config.json: hidden size {numbers['hidden_size']} is not divisible by "
                             f"{numbers['heads']} attention heads; fix the config")


def rope_positional(config, pairing: str = "half", partial: bool = False) -> Positional:
    """RoPE of ``config`` (frequencies as transformers computes them, :mod:`idinspect.sources.rope_config`;
    ``partial``: the family honours ``partial_rotary_factor``); settings transformers cannot use are a
    one-line error naming the config keys."""
    from ..sources.rope_config import rotary_spec_from_config

    try:
        return Positional("rope", rotary=rotary_spec_from_config(config, pairing, partial))
    except (KeyError, TypeError, ValueError, ZeroDivisionError, IdinspectError) as exc:
        raise IdinspectError(f"config.json: RoPE settings that transformers cannot use ({type(exc).__name__}: "
                             f"{one_line(exc)}); fix rope_parameters / rope_scaling") from None


def _describe(idx: torch.Tensor) -> str:
    """A slice for a contiguous run of rows ("8:16"), else "rows of <layout>"."""
    lo, hi = int(idx[0]), int(idx[-1]) + 1
    if hi - lo == idx.numel() and bool((idx == torch.arange(lo, hi)).all()):
        return f"{lo}:{hi}"
    return f"{idx.numel()} interleaved rows"
