"""Phi (Phi-1, Phi-1.5, Phi-2): unfused q/k/v projections and the output projection ``dense``, all with
biases; partial rotate_half RoPE over the first int(head_dim * partial_rotary_factor) dims of each head.

Layer i (prefix '' for PhiModel saves, 'model.' for PhiForCausalLM):
    layers.i.self_attn.q_proj.weight [H*hd, d]   bias [H*hd]
    layers.i.self_attn.k_proj.weight [G*hd, d]   bias [G*hd]
    layers.i.self_attn.v_proj.weight [G*hd, d]   bias [G*hd]
    layers.i.self_attn.dense.weight  [d, H*hd]   bias [d]
partial_rotary_factor: config.json's rope_parameters, else its top-level key, else PhiConfig's 0.5.
``qk_layernorm=True`` puts a LayerNorm on queries and keys (refused: it breaks the GL(d_k) gauge).
"""

from __future__ import annotations

from ..errors import IdinspectError
from .llama import LlamaAdapter, qkvo_block


def refuse_qk_layernorm(adapter) -> None:
    """Phi and StableLM's ``qk_layernorm``: a norm between projection and score, not modelled."""
    if adapter.optional("qk_layernorm", False):
        raise IdinspectError(f"config.json: qk_layernorm is true ({adapter.config.model_type} normalises queries and keys "
                             "per head before the score, which breaks the GL(d_k) gauge); idinspect refuses rather "
                             "than miscount")


class PhiAdapter(LlamaAdapter):
    family = "phi"
    model_types = ("phi",)
    partial_rotary = True
    block = qkvo_block(True, True, o="dense")

    def __init__(self, config, reader):
        super().__init__(config, reader)
        refuse_qk_layernorm(self)

    def sliding_window(self, site):
        return None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"],
                "num_key_value_heads": shape["kv_heads"], "head_dim": shape["head_dim"], "intermediate_size": 16,
                "qk_layernorm": False,
                "max_position_embeddings": hf_config.max_position_embeddings,
                "rope_parameters": self.twin_rope(hf_config.rope_parameters, shape)}


ADAPTERS = (PhiAdapter,)
