"""GPT-J: unfused q/k/v_proj and ``out_proj``, no biases, multi-head; interleaved RoPE (GPT-J's
rotate_every_two: planes (2p, 2p + 1)) on the first ``rotary_dim`` dims of each head, base 10000,
from a sinusoid table the model builds itself (no RoPE settings in config.json).

Layer i (prefix 'transformer.' for GPTJForCausalLM):
    h.i.attn.q_proj.weight   [d, d]    (likewise k_proj, v_proj)
    h.i.attn.out_proj.weight [d, d]
Old checkpoints also store ``attn.bias`` / ``attn.masked_bias`` (causal-mask buffers).
"""

from __future__ import annotations

from functools import cached_property

from ..errors import IdinspectError
from ..layer.attention_layer import Positional
from ..sources.rope_config import default_rotary_spec
from .base import Adapter, Site
from .qkvo_decoder import qkvo_block

#: create_sinusoidal_positions' base.
GPTJ_ROPE_BASE = 10_000.0


class GPTJAdapter(Adapter):
    family = "gptj"
    model_types = ("gptj",)
    model_tensors = {
        "wte.weight": "embedding",
        "h.{n}.ln_1.(weight|bias)": "norm",
        "h.{n}.mlp.(fc_in|fc_out).(weight|bias)": "mlp",
        "ln_f.(weight|bias)": "norm",
    }
    layer_container = "h"
    block = qkvo_block(False, False, attn="attn", o="out_proj")
    config_names = {"hidden_size": "n_embd", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer",
                    "max_position_embeddings": "n_positions"}
    buffer_suffixes = (".attn.bias", ".attn.masked_bias")
    hf_modules = {"self": ("attn", None)}

    @cached_property
    def _rope(self) -> Positional:
        """GPTJRotaryEmbedding: a table over ``rotary_dim or n_embd`` dims; GPTJAttention rotates the first
        ``rotary_dim`` dims of each head (all of them when it is null, which only fits one head)."""
        stored = self.optional("rotary_dim", 64)
        rd = stored or self.hidden_size
        if isinstance(rd, bool) or not isinstance(rd, int) or rd < 2 or rd % 2 or rd > self.head_dim:
            raise IdinspectError(f"config.json: rotary_dim is {stored!r}; GPT-J rotates an even number of dims of each "
                                 f"head, at most head_dim {self.head_dim}; fix the config")
        return Positional("rope", rotary=default_rotary_spec(GPTJ_ROPE_BASE, rd, "interleaved"))

    def positional(self, site: Site | None = None) -> Positional:
        return self._rope

    def twin_settings(self, hf_config, shape: dict) -> dict:
        partial = self.positional().rotary_dim < self.head_dim
        return {"n_embd": shape["hidden_size"], "n_head": shape["heads"], "n_inner": 16,
                "n_positions": hf_config.n_positions, "rotary_dim": 2 if partial else shape["head_dim"]}


ADAPTERS = (GPTJAdapter,)
