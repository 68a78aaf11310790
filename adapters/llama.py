"""Llama, Mistral, Ministral, Mixtral (its experts are MLPs, not read) and Qwen2: the generic q/k/v/o
decoder (:mod:`.qkvo_decoder`) with each type's biases and sliding windows.

Biases: Llama's q/k/v/o follow ``attention_bias``; Qwen2 always has q/k/v biases and never an o_proj
bias; Mistral, Ministral and Mixtral have none. Ministral's window is on the layers ``layer_types``
marks "sliding_attention".
"""

from __future__ import annotations

from .base import Site
from .qkvo_decoder import QKVODecoderAdapter


class LlamaAdapter(QKVODecoderAdapter):
    family = "llama"
    model_types = ("llama", "mistral", "ministral", "mixtral", "qwen2")

    def _biases(self) -> tuple[bool, bool]:
        """(q/k/v have biases, o_proj has a bias), as the modeling code decides."""
        if self.config.model_type == "qwen2":
            return True, False
        if self.config.model_type in ("mistral", "ministral", "mixtral"):
            return False, False
        return super()._biases()

    def sliding_window(self, site: Site) -> int | None:
        """Layer i's window, as the config class resolves it (Qwen2Config.__post_init__: the window only
        with use_sliding_window, and by default on layers i >= max_window_layers). Llama has none."""
        cfg, i = self.config, site.layer
        if cfg.model_type == "ministral":
            return self.window_by_layer_type(site)
        if cfg.model_type in ("mistral", "mixtral"):
            return cfg.sliding_window
        if cfg.model_type != "qwen2":
            return None
        window = cfg.sliding_window if cfg.use_sliding_window else None
        if cfg.layer_types is None:
            return window if window is not None and i >= cfg.max_window_layers else None
        return window if window is not None and cfg.layer_types[i] == "sliding_attention" else None


ADAPTERS = (LlamaAdapter,)
