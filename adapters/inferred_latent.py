"""The adapter ``--auto`` makes of a multi-head latent attention block it found
(:mod:`idinspect.automatic.latent`): the layout of :class:`LatentAttentionLayer` as data.

The modules are the ones the trace found (``found.mla``, names relative to the layer); the widths
are read from the settings the trace tied them to, never from the tensors:

    W_Q   q              [H (n + e), d]     rows per head [n | e]     (no query latent)
    W_QA  q_a (+ bias)   [r_q, d];  g_Q q_norm [r_q];  W_QB q_b [H (n + e), r_q]
    W_KVA|W_KR kv_a (+ bias)   [r + e, d]   rows [latent r | rotary key e]
    g_KV  kv_norm [r];   W_KB|W_VB kv_b [H (n + v), r]   rows per head [key n | value v]
    W_O   o (+ bias)     [d, H v]
"""

from __future__ import annotations

import dataclasses
from functools import cached_property

import torch

from ..layer.attention_layer import Positional
from ..layer.latent_layer import LatentAttentionLayer
from ..sources.config import CheckpointConfig
from .base import Site, rope_positional
from .inferred import FoundLayout, InferredAdapter, inferred_adapter, twin_settings_from
from .layout import Block, Projection


class InferredLatentAdapter(InferredAdapter):
    """Base of the classes :func:`inferred_latent_adapter` makes."""

    form = "latent"

    @cached_property
    def _full(self):
        """transformers' config class (standardised rope_parameters)."""
        return self.config.full_config() if isinstance(self.config, CheckpointConfig) else self.config

    def width(self, name: str) -> int:
        """A width of the form (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
        from the setting the trace tied it to; 0 for a query latent the model does not have."""
        key = dict(self.found.mla.settings).get(name)
        return int(self.setting(key)) if key else 0

    @property
    def q_rank(self) -> int:
        return self.width("q_lora_rank")

    @property
    def head_dim(self) -> int:
        """The query/key width per head, n + e."""
        return self.width("qk_nope_head_dim") + self.width("qk_rope_head_dim")

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @cached_property
    def block(self) -> Block:
        m = self.found.mla
        q = ((Projection(m.q_a, "qa", m.q_a_bias), Projection(m.q_norm, "gq", False), Projection(m.q_b, "qb", False))
             if m.q_a else (Projection(m.q, "q", False),))
        return Block("self", (*q, Projection(m.kv_a, "kva", m.kv_a_bias), Projection(m.kv_norm, "gkv", False),
                              Projection(m.kv_b, "kvb", False), Projection(m.o, "o", m.o_bias)))

    def blocks(self, layer: int) -> tuple[Block, ...]:
        return (self.block,)

    def positional(self, site: Site | None = None) -> Positional:
        if self.found.positional == "none":
            return Positional("absolute")
        if "rope" not in self.__dict__:
            rope = rope_positional(self._full, self.found.positional)
            if self.found.rope_polar:      # the module's rotation factors: torch.polar of float32 angles
                rope = dataclasses.replace(rope, rotary=dataclasses.replace(rope.rotary, polar=True))
            self.__dict__["rope"] = rope
        return self.__dict__["rope"]

    def scale(self, site: Site) -> float:
        """(n + e)^-1/2 ("head_dim"), or times YaRN's mscale^2 (transformers' ``yarn_apply_mscale``)."""
        if self.found.scale_law == "yarn_mscale":
            from transformers.modeling_rope_utils import yarn_apply_mscale

            return float(yarn_apply_mscale(self._full.rope_parameters or {}, self.head_dim ** -0.5))
        return super().scale(site)

    def form_summary(self) -> dict:
        return {"attention": "latent", "latent": {"q_rank": self.q_rank, "kv_rank": self.width("kv_lora_rank"),
                                                  "nope_dim": self.width("qk_nope_head_dim"),
                                                  "rope_dim": self.width("qk_rope_head_dim"),
                                                  "v_dim": self.width("v_head_dim")}}

    def read_layer(self, n: int) -> LatentAttentionLayer:
        site, m = self.sites[n], self.found.mla
        H, d, rq = self.n_heads, self.hidden_size, self.q_rank
        nope, e, v, r = (self.width(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
        t: dict[str, torch.Tensor] = {}
        names: dict[str, str] = {}

        def load(role: str, module: str, shape: tuple[int, ...], suffix: str = "weight") -> torch.Tensor:
            names[role] = self.key(site, f"{module}.{suffix}")
            return self._load(names[role], shape)

        if rq:
            t["W_QA"] = load("W_QA", m.q_a, (rq, d)).T
            if m.q_a_bias:
                t["b_QA"] = load("b_QA", m.q_a, (rq,), "bias")
            t["g_Q"] = load("g_Q", m.q_norm, (rq,))
            t["W_QB"] = load("W_QB", m.q_b, (H * (nope + e), rq)).reshape(H, nope + e, rq).transpose(1, 2)
        else:
            t["W_Q"] = load("W_Q", m.q, (H * (nope + e), d)).reshape(H, nope + e, d).transpose(1, 2)
        kva = load("W_KVA", m.kv_a, (r + e, d))
        names["W_KR"], names["W_KVA"] = f"{names['W_KVA']}[{r}:{r + e}]", f"{names['W_KVA']}[0:{r}]"
        t["W_KVA"], t["W_KR"] = kva[:r].T, kva[r:].T
        if m.kv_a_bias:
            b = load("b_KVA", m.kv_a, (r + e,), "bias")
            names["b_KR"], names["b_KVA"] = f"{names['b_KVA']}[{r}:{r + e}]", f"{names['b_KVA']}[0:{r}]"
            t["b_KVA"], t["b_KR"] = b[:r], b[r:]
        t["g_KV"] = load("g_KV", m.kv_norm, (r,))
        kvb = load("W_KB", m.kv_b, (H * (nope + v), r)).reshape(H, nope + v, r)
        names["W_VB"] = f"{names['W_KB']}[per head rows {nope}:{nope + v}]"
        names["W_KB"] = f"{names['W_KB']}[per head rows 0:{nope}]"
        t["W_KB"], t["W_VB"] = kvb[:, :nope].transpose(1, 2), kvb[:, nope:].transpose(1, 2)
        t["W_O"] = load("W_O", m.o, (d, H * v)).T.reshape(H, v, d)
        if m.o_bias:
            t["b_O"] = load("b_O", m.o, (d,), "bias")
        return LatentAttentionLayer(index=n, **t, eps_Q=m.eps_q if m.eps_q is not None else 1e-6, eps_KV=m.eps_kv,
                                    scale=self.scale(site), causal=self.causal(site), positional=self.positional(site),
                                    tensor_names=names, kind="self", stack=site.stack, layer=site.layer)

    def write_layer(self, layer: LatentAttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        site, m = self.sites[layer.index], self.found.mla
        H = layer.n_heads

        def key(module: str, suffix: str = "weight") -> str:
            return self.key(site, f"{module}.{suffix}")

        out: dict[str, torch.Tensor] = {}
        if layer.W_QA is not None:
            out[key(m.q_a)] = layer.W_QA.T
            if layer.b_QA is not None:
                out[key(m.q_a, "bias")] = layer.b_QA
            out[key(m.q_norm)] = layer.g_Q
            out[key(m.q_b)] = layer.W_QB.transpose(1, 2).reshape(-1, layer.q_rank)
        else:
            out[key(m.q)] = layer.W_Q.transpose(1, 2).reshape(-1, layer.d_model)
        out[key(m.kv_a)] = torch.cat([layer.W_KVA.T, layer.W_KR.T.to(layer.W_KVA.dtype)])
        if layer.b_KVA is not None:
            out[key(m.kv_a, "bias")] = torch.cat([layer.b_KVA, layer.b_KR.to(layer.b_KVA.dtype)])
        out[key(m.kv_norm)] = layer.g_KV
        kvb = torch.cat([layer.W_KB.transpose(1, 2), layer.W_VB.transpose(1, 2).to(layer.W_KB.dtype)], dim=1)
        out[key(m.kv_b)] = kvb.reshape(-1, layer.kv_rank)
        out[key(m.o)] = layer.W_O.reshape(H * layer.d_v, layer.d_model).T
        if layer.b_O is not None:
            out[key(m.o, "bias")] = layer.b_O
        return {k: self._cast(k, v, dtype) for k, v in out.items()}

    def twin_settings(self, hf_config, shape: dict) -> dict:
        """The model's own settings with the latent twin's widths (:func:`~idinspect.forms.latent.prove.latent_twin_shape`)
        under the settings that count them."""
        kw = twin_settings_from(hf_config, shape)
        kw.pop("head_dim", None)      # the form's widths are the settings below, not a head width
        for name, key in self.found.mla.settings:
            if shape.get(name):
                kw[key] = shape[name]
        return kw


def inferred_latent_adapter(found: FoundLayout) -> type[InferredAdapter]:
    """An adapter class for ``found``: the latent form's where the trace found latent attention."""
    if found.mla is None:
        return inferred_adapter(found)
    base = inferred_adapter(found)
    return type(base.__name__, (InferredLatentAdapter, base), {"__module__": __name__})


__all__ = ["InferredLatentAdapter", "inferred_latent_adapter"]
