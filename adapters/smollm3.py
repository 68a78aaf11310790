"""SmolLM3: the generic q/k/v/o decoder (biases with ``attention_bias``) in which some layers use no
positional encoding at all (NoPE): ``config.no_rope_layers[i]`` is 1 for a RoPE layer, 0 for a NoPE
layer (by default every fourth layer is NoPE). A NoPE layer's scores depend on positions only
through the causal mask, so its query-key gauge is the whole GL(d_k) again (per kv group), where a
RoPE layer's is the commutant of its rotations. Sliding windows (``use_sliding_window``) follow
``layer_types``.
"""

from __future__ import annotations

from functools import cached_property

from ..errors import IdinspectError
from ..layer.attention_layer import Positional
from .base import Site
from .qkvo_decoder import QKVODecoderAdapter


class SmolLM3Adapter(QKVODecoderAdapter):
    family = "smollm3"
    model_types = ("smollm3",)

    @cached_property
    def _uses_rope(self) -> list[bool]:
        flags = list(self.config.no_rope_layers or [])
        if len(flags) < self.num_layers or any(isinstance(v, float) or v not in (0, 1) for v in flags):
            raise IdinspectError(f"config.json: no_rope_layers is {flags!r}; it needs one entry per layer "
                                 f"({self.num_layers}), 1 for a RoPE layer and 0 for a layer without; fix the config")
        return [bool(v) for v in flags]

    def positional(self, site: Site | None = None) -> Positional:
        """RoPE where ``no_rope_layers[i]`` is 1 (SmolLM3Attention.use_rope), none elsewhere."""
        rope = self._uses_rope[site.layer if site is not None else 0]
        return self._rope if rope else Positional("none")

    def sliding_window(self, site: Site) -> int | None:
        """The window where ``use_sliding_window`` and ``layer_types[i] == "sliding_attention"``."""
        return self.window_by_layer_type(site) if self.config.use_sliding_window else None

    def twin_settings(self, hf_config, shape: dict) -> dict:
        # one layer: the twin proves the model's first layer's kind (RoPE or NoPE)
        return {**super().twin_settings(hf_config, shape), "no_rope_layers": [int(self._uses_rope[0])],
                "use_sliding_window": False, "layer_types": ["full_attention"]}


ADAPTERS = (SmolLM3Adapter,)
