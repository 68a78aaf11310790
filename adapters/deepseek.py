"""DeepSeek-V2 and DeepSeek-V3: multi-head latent attention (MLA), read into :class:`LatentAttentionLayer`.

Layer i (prefix 'model.' for *ForCausalLM), H heads, n = qk_nope_head_dim, e = qk_rope_head_dim,
v = v_head_dim, r = kv_lora_rank, r_q = q_lora_rank:
    layers.i.self_attn.q_proj.weight               [H*(n+e), d]        (q_lora_rank null)
    layers.i.self_attn.q_a_proj.weight / .bias     [r_q, d] / [r_q]    (bias with attention_bias)
    layers.i.self_attn.q_a_layernorm.weight        [r_q]
    layers.i.self_attn.q_b_proj.weight             [H*(n+e), r_q]      rows per head: [nope n | rope e]
    layers.i.self_attn.kv_a_proj_with_mqa.weight   [r+e, d]            rows [latent r | shared rotary key e]
    layers.i.self_attn.kv_a_proj_with_mqa.bias     [r+e]               (attention_bias)
    layers.i.self_attn.kv_a_layernorm.weight       [r]
    layers.i.self_attn.kv_b_proj.weight            [H*(n+v), r]        rows per head: [key n | value v]
    layers.i.self_attn.o_proj.weight / .bias       [d, H*v] / [d]      (bias with attention_bias)
The latent norms are DeepseekV*RMSNorm built with their default eps (1e-6), not rms_norm_eps.
RoPE pairs dims (2p, 2p+1) (V2 always; V3 with rope_interleave, its default), rotate_half otherwise;
the softmax scale is (n+e)^-1/2 times YaRN's mscale^2 (transformers' ``yarn_apply_mscale``).
Experts (``mlp.experts``, ``first_k_dense_replace``) are MLPs, not read. Layouts only: the
mathematics is in :mod:`idinspect.forms.latent.structure`.
"""

from __future__ import annotations

import contextlib
from functools import cached_property

import torch

from ..layer.attention_layer import Positional
from ..layer.latent_layer import LatentAttentionLayer
from ..sources.config import CheckpointConfig
from .base import Adapter, Site, rope_positional
from .layout import Block, Projection

#: eps of ``DeepseekV2RMSNorm(q_lora_rank)`` / ``DeepseekV3RMSNorm(kv_lora_rank)``: the class default.
LATENT_NORM_EPS = 1e-6
_ATTN = "self_attn"


class DeepseekAdapter(Adapter):
    family = "deepseek"
    model_types = ("deepseek_v2", "deepseek_v3")
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.(input_layernorm|post_attention_layernorm).weight": "norm",
        "layers.{n}.mlp.**": "mlp",                  # dense MLP, or router, routed and shared experts
        "norm.weight": "norm",
    }
    layer_container = "layers"
    pre_norm = ("input_layernorm.weight",)
    hf_modules = {"self": (_ATTN, None)}
    form = "latent"

    # sizes -------------------------------------------------------------------------
    @cached_property
    def _full(self):
        """transformers' config class (standardised rope_parameters, head_dim = qk_rope_head_dim)."""
        return self.config.full_config() if isinstance(self.config, CheckpointConfig) else self.config

    def _size(self, name: str) -> int:
        return int(getattr(self._full, name))

    @property
    def q_rank(self) -> int:
        rank = getattr(self._full, "q_lora_rank", None)
        return int(rank) if rank else 0

    @property
    def head_dim(self) -> int:
        """The query/key width per head, n + e."""
        return self._size("qk_nope_head_dim") + self._size("qk_rope_head_dim")

    @property
    def _bias(self) -> bool:
        return bool(getattr(self._full, "attention_bias", False))

    @cached_property
    def block(self) -> Block:
        b = self._bias
        q = ((Projection(f"{_ATTN}.q_a_proj", "qa", b), Projection(f"{_ATTN}.q_a_layernorm", "gq", False),
              Projection(f"{_ATTN}.q_b_proj", "qb", False)) if self.q_rank else
             (Projection(f"{_ATTN}.q_proj", "q", False),))
        return Block("self", (*q, Projection(f"{_ATTN}.kv_a_proj_with_mqa", "kva", b),
                              Projection(f"{_ATTN}.kv_a_layernorm", "gkv", False),
                              Projection(f"{_ATTN}.kv_b_proj", "kvb", False), Projection(f"{_ATTN}.o_proj", "o", b)))

    @cached_property
    def _rope(self) -> Positional:
        interleaved = self.config.model_type == "deepseek_v2" or bool(getattr(self._full, "rope_interleave", True))
        return rope_positional(self._full, "interleaved" if interleaved else "half")

    def positional(self, site: Site | None = None) -> Positional:
        return self._rope

    def scale(self, site: Site) -> float:
        from transformers.modeling_rope_utils import yarn_apply_mscale

        return float(yarn_apply_mscale(self._full.rope_parameters or {}, self.head_dim ** -0.5))

    def form_summary(self) -> dict:
        """``attention`` and ``latent`` of the JSON ``model`` object: the MLA widths."""
        return {"attention": "latent", "latent": {"q_rank": self.q_rank, "kv_rank": self._size("kv_lora_rank"),
                                                  "nope_dim": self._size("qk_nope_head_dim"),
                                                  "rope_dim": self._size("qk_rope_head_dim"),
                                                  "v_dim": self._size("v_head_dim")}}

    # reading -----------------------------------------------------------------------
    def read_layer(self, n: int) -> LatentAttentionLayer:
        site = self.sites[n]
        H, d, rq = self.n_heads, self.hidden_size, self.q_rank
        nope, e, v, r = (self._size(k) for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"))
        t: dict[str, torch.Tensor] = {}
        names: dict[str, str] = {}

        def load(role: str, module: str, shape: tuple[int, ...], suffix: str = "weight") -> torch.Tensor:
            key = self.key(site, f"{_ATTN}.{module}.{suffix}")
            names[role] = key
            return self._load(key, shape)

        if rq:
            t["W_QA"] = load("W_QA", "q_a_proj", (rq, d)).T
            if self._bias:
                t["b_QA"] = load("b_QA", "q_a_proj", (rq,), "bias")
            t["g_Q"] = load("g_Q", "q_a_layernorm", (rq,))
            t["W_QB"] = load("W_QB", "q_b_proj", (H * (nope + e), rq)).reshape(H, nope + e, rq).transpose(1, 2)
        else:
            t["W_Q"] = load("W_Q", "q_proj", (H * (nope + e), d)).reshape(H, nope + e, d).transpose(1, 2)
        kva = load("W_KVA", "kv_a_proj_with_mqa", (r + e, d))
        names["W_KR"] = f"{names['W_KVA']}[{r}:{r + e}]"
        names["W_KVA"] = f"{names['W_KVA']}[0:{r}]"
        t["W_KVA"], t["W_KR"] = kva[:r].T, kva[r:].T
        if self._bias:
            b = load("b_KVA", "kv_a_proj_with_mqa", (r + e,), "bias")
            names["b_KR"] = f"{names['b_KVA']}[{r}:{r + e}]"
            names["b_KVA"] = f"{names['b_KVA']}[0:{r}]"
            t["b_KVA"], t["b_KR"] = b[:r], b[r:]
        t["g_KV"] = load("g_KV", "kv_a_layernorm", (r,))
        kvb = load("W_KB", "kv_b_proj", (H * (nope + v), r)).reshape(H, nope + v, r)
        names["W_VB"] = f"{names['W_KB']}[per head rows {nope}:{nope + v}]"
        names["W_KB"] = f"{names['W_KB']}[per head rows 0:{nope}]"
        t["W_KB"], t["W_VB"] = kvb[:, :nope].transpose(1, 2), kvb[:, nope:].transpose(1, 2)
        t["W_O"] = load("W_O", "o_proj", (d, H * v)).T.reshape(H, v, d)
        if self._bias:
            t["b_O"] = load("b_O", "o_proj", (d,), "bias")
        return LatentAttentionLayer(index=n, **t, eps_Q=LATENT_NORM_EPS, eps_KV=LATENT_NORM_EPS,
                                    scale=self.scale(site), causal=True, positional=self.positional(site),
                                    tensor_names=names, kind="self", stack=site.stack, layer=site.layer)

    # writing -----------------------------------------------------------------------
    def write_layer(self, layer: LatentAttentionLayer, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        site = self.sites[layer.index]
        H = layer.n_heads

        def key(module: str, suffix: str = "weight") -> str:
            return self.key(site, f"{_ATTN}.{module}.{suffix}")

        out: dict[str, torch.Tensor] = {}
        if layer.W_QA is not None:
            out[key("q_a_proj")] = layer.W_QA.T
            if layer.b_QA is not None:
                out[key("q_a_proj", "bias")] = layer.b_QA
            out[key("q_a_layernorm")] = layer.g_Q
            out[key("q_b_proj")] = layer.W_QB.transpose(1, 2).reshape(-1, layer.q_rank)
        else:
            out[key("q_proj")] = layer.W_Q.transpose(1, 2).reshape(-1, layer.d_model)
        out[key("kv_a_proj_with_mqa")] = torch.cat([layer.W_KVA.T, layer.W_KR.T.to(layer.W_KVA.dtype)])
        if layer.b_KVA is not None:
            out[key("kv_a_proj_with_mqa", "bias")] = torch.cat([layer.b_KVA, layer.b_KR.to(layer.b_KVA.dtype)])
        out[key("kv_a_layernorm")] = layer.g_KV
        kvb = torch.cat([layer.W_KB.transpose(1, 2), layer.W_VB.transpose(1, 2).to(layer.W_KB.dtype)], dim=1)
        out[key("kv_b_proj")] = kvb.reshape(-1, layer.kv_rank)
        out[key("o_proj")] = layer.W_O.reshape(H * layer.d_v, layer.d_model).T
        if layer.b_O is not None:
            out[key("o_proj", "bias")] = layer.b_O
        return {k: self._cast(k, v, dtype) for k, v in out.items()}

    # --prove and tests -------------------------------------------------------------
    def twin_settings(self, hf_config, shape: dict) -> dict:
        """A one-layer MLA twin of ``shape`` (:func:`idinspect.forms.latent.prove.latent_twin_shape`) with
        this model's bias pattern, query latent or not, RoPE type, parameters and pairing; dense MLP."""
        cfg = hf_config
        kw = {k: shape[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        kw.update(hidden_size=shape["hidden_size"], num_attention_heads=shape["heads"], num_key_value_heads=shape["heads"],
                  intermediate_size=16, moe_intermediate_size=8, first_k_dense_replace=1, n_routed_experts=2,
                  num_experts_per_tok=1, n_shared_experts=1,
                  max_position_embeddings=getattr(cfg, "max_position_embeddings", 2048))
        for name in ("attention_bias", "rope_interleave", "rope_parameters"):
            if getattr(cfg, name, None) is not None:
                kw[name] = getattr(cfg, name)
        if hasattr(cfg, "n_group"):
            kw.update(n_group=1, topk_group=1)
        return kw

    def exact_float64(self) -> contextlib.AbstractContextManager:
        return deepseek_float64()


@contextlib.contextmanager
def deepseek_float64():
    """DeepSeek's RMSNorm (and V2's complex RoPE) cast float64 inputs to float32; in this context
    float64 stays float64: the same formulas, with V2's rotation factors cos + i sin formed from the
    float32 angles by cos/sin as every other family does (``torch.polar`` differs by one float32 ulp)."""
    from transformers.models.deepseek_v2 import modeling_deepseek_v2 as v2
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as v3

    def norm_forward(original):
        def forward(self, hidden_states):
            if hidden_states.dtype != torch.float64:
                return original(self, hidden_states)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))
        return forward

    rotary = v2.apply_rotary_emb
    table = v2.DeepseekV2RotaryEmbedding.forward

    def rotary_forward(self, x, position_ids):
        if x.dtype != torch.float64:
            return table(self, x, position_ids)
        angles = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        return torch.complex((angles.cos() * self.attention_scaling).double(),
                             (angles.sin() * self.attention_scaling).double())

    def apply_rotary_emb(xq, xk, freqs_cis):
        if xq.dtype != torch.float64:
            return rotary(xq, xk, freqs_cis)
        f = freqs_cis.unsqueeze(1).to(torch.complex128)
        q = torch.view_as_complex(xq.reshape(*xq.shape[:-1], -1, 2).contiguous())
        k = torch.view_as_complex(xk.reshape(*xk.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(q * f).flatten(3), torch.view_as_real(k * f).flatten(3)

    saved = [(v2.DeepseekV2RMSNorm, v2.DeepseekV2RMSNorm.forward), (v3.DeepseekV3RMSNorm, v3.DeepseekV3RMSNorm.forward)]
    for cls, original in saved:
        cls.forward = norm_forward(original)
    v2.apply_rotary_emb = apply_rotary_emb
    v2.DeepseekV2RotaryEmbedding.forward = rotary_forward
    try:
        yield
    finally:
        for cls, original in saved:
            cls.forward = original
        v2.apply_rotary_emb = rotary
        v2.DeepseekV2RotaryEmbedding.forward = table


ADAPTERS = (DeepseekAdapter,)

_MLA_UNVERIFIED = ("multi-head latent attention in a layout not yet proven against the HF module (only deepseek_v2 / "
                   "deepseek_v3 and minicpm3 are); a checkpoint with DeepSeek-V3's exact layout can be counted as deepseek_v3")
#: Models built on MLA that are not counted (yet), by name.
REFUSED = {
    "deepseek_v32": "DeepSeek Sparse Attention: an indexer picks each query's keys, which the counts do not model",
    "deepseek_v4": "DeepSeek-V4's attention is not modelled yet",
    **{t: _MLA_UNVERIFIED for t in ("kimi_k2", "kimi_linear", "glm4_moe_lite", "glm_moe_dsa", "longcat_flash",
                                   "mistral4", "youtu", "bailing_hybrid", "hy_v4", "axk1", "axk2")},
}
