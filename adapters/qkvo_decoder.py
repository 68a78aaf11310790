"""The generic q/k/v/o decoder: unfused ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` with GQA and
RoPE rotate_half over the head, as Llama introduced and most decoders since store attention.

Layer i (prefix '' for *Model saves, 'model.' for *ForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]     bias [H*hd] (where the family has one)
    layers.i.self_attn.k_proj.weight [G*hd, d]     bias [G*hd]
    layers.i.self_attn.v_proj.weight [G*hd, d]     bias [G*hd]
    layers.i.self_attn.o_proj.weight [d, H*hd]     bias [d]
hd is config.head_dim when set (not always d / H). Query head h reads kv head h // (H / G).
RoPE inverse frequencies: idinspect.sources.rope_config, as transformers computes them.
"""

from __future__ import annotations

from functools import cached_property

from ..layer.attention_layer import Positional
from .base import Adapter, Site, rope_positional
from .layout import Block, Projection


def qkvo_block(qkv_bias: bool, o_bias: bool, attn: str = "self_attn", o: str = "o_proj") -> Block:
    """Unfused ``{attn}.q_proj`` / ``k_proj`` / ``v_proj`` / ``{o}``, as most decoders store them."""
    return Block("self", (Projection(f"{attn}.q_proj", "q", qkv_bias), Projection(f"{attn}.k_proj", "k", qkv_bias),
                          Projection(f"{attn}.v_proj", "v", qkv_bias), Projection(f"{attn}.{o}", "o", o_bias)))


class QKVODecoderAdapter(Adapter):
    """The generic decoder of unfused q/k/v/o projections with GQA and rotate-half RoPE (most decoders
    since Llama): the base of the families that store attention this way; each family module says
    what differs (model types, tensors, biases, norms, windows)."""

    pre_norm = ("input_layernorm.weight",)
    model_tensors = {
        "embed_tokens.weight": "embedding",
        "layers.{n}.(input_layernorm|post_attention_layernorm).weight": "norm",
        "layers.{n}.mlp.(gate|up|down)_proj.(weight|bias)": "mlp",    # bias: Llama's mlp_bias
        "layers.{n}.block_sparse_moe.**": "mlp",       # Mixtral's router and experts
        "layers.{n}.mlp.(experts|gate|router).**": "mlp",
        "norm.weight": "norm",
    }
    layer_container = "layers"
    hf_modules = {"self": ("self_attn", None)}
    #: The family's rotary module honours rope_parameters["partial_rotary_factor"] (Phi, StableLM, ...).
    partial_rotary: bool = False

    @property
    def n_kv_heads(self) -> int:
        return int(self.config.num_key_value_heads or self.n_heads)

    @property
    def head_dim(self) -> int:
        return int(self.optional("head_dim") or self.hidden_size // self.n_heads)

    def _biases(self) -> tuple[bool, bool]:
        """(q/k/v have biases, o_proj has a bias): ``config.attention_bias`` for both, the usual switch."""
        bias = bool(self.config.attention_bias)
        return bias, bias

    @cached_property
    def block(self) -> Block:
        return qkvo_block(*self._biases())

    @cached_property
    def _rope(self) -> Positional:
        return rope_positional(self.config, "half", self.partial_rotary)

    def positional(self, site: Site | None = None) -> Positional:
        return self._rope

    def sliding_window(self, site: Site) -> int | None:
        """No window unless the family says so."""
        return None

    def window_by_layer_type(self, site: Site) -> int | None:
        """config.sliding_window where layer_types[i] == "sliding_attention" (Gemma 2, gpt-oss)."""
        layer_types = self.config.layer_types
        if layer_types and layer_types[site.layer] == "sliding_attention":
            return self.config.sliding_window
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        cfg = hf_config
        kw = {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
              "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
              "max_position_embeddings": getattr(cfg, "max_position_embeddings", 2048)}
        rope = getattr(cfg, "rope_parameters", None)
        if rope:
            kw["rope_parameters"] = self.twin_rope(rope, shape)
        for name in ("attention_bias", "sliding_window", "use_sliding_window", "max_window_layers"):
            if hasattr(cfg, name):
                kw[name] = getattr(cfg, name)
        layer_types = getattr(cfg, "layer_types", None)
        if layer_types:
            kw["layer_types"] = list(layer_types[:1])
        return kw


    def twin_rope(self, rope: dict, shape: dict) -> dict:
        """The twin's rope_parameters: the model's, with a partial rotary factor that keeps the twin's
        head partly unrotated (one rotated plane) exactly when the model's heads are."""
        rope = dict(rope)
        if self.partial_rotary and "partial_rotary_factor" in rope:
            partial = self.positional().rotary_dim < self.head_dim
            rope["partial_rotary_factor"] = 2 / shape["head_dim"] if partial else 1.0
        return rope

