"""CLIP and SigLIP: a text tower and a vision tower in one checkpoint, each its own stack and width.

Layer i of each tower (prefix '' for CLIPModel / SiglipModel saves):
    text_model.encoder.layers.i.self_attn.{q,k,v,out}_proj.{weight [d_t, d_t], bias [d_t]}      stack "text"
    vision_model.encoder.layers.i.self_attn.{q,k,v,out}_proj.{weight [d_v, d_v], bias [d_v]}    stack "vision"
A one-tower model (CLIPTextModel, SiglipVisionModel, ...) holds one of them as ``encoder.layers.i``
below its prefix: '' as transformers 5 saves it, 'text_model.' / 'vision_model.' in older saves and
in CLIPTextModelWithProjection.
The towers' sizes come from ``text_config`` and ``vision_config`` (hidden_size, num_attention_heads,
num_hidden_layers each), or from the top level for the one-tower model types (``clip_text_model``,
``clip_vision_model``, ``siglip_text_model``, ``siglip_vision_model``). Blocks are numbered text
first, then vision. CLIP's text tower is causal; SigLIP's is not; vision towers are bidirectional.
Pre-norm (``layer_norm1``), all four biases, scale hd^-1/2, positions added to the embeddings.

SigLIP's vision tower ends in a pooling head (``vision_model.head``: ``nn.MultiheadAttention`` whose
query is a learned ``probe`` vector, fused ``in_proj_weight``). It is attention, but not of the
form the counts model (its query input is a constant), so it is left out of the counts by name:
:meth:`ClipAdapter.unanalysed` lists it, and every report says so.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from ..errors import IdinspectError
from .base import Adapter, Site
from .layout import Block, Projection

SELF = Block("self", (Projection("self_attn.q_proj", "q"), Projection("self_attn.k_proj", "k"),
                      Projection("self_attn.v_proj", "v"), Projection("self_attn.out_proj", "o")))
TOWERS = {"text": "text_model.encoder.layers", "vision": "vision_model.encoder.layers"}
#: model_type -> the towers its checkpoints hold.
HOLDS = {"clip": ("text", "vision"), "siglip": ("text", "vision"),
         "clip_text_model": ("text",), "clip_vision_model": ("vision",),
         "siglip_text_model": ("text",), "siglip_vision_model": ("vision",)}
HEAD_REASON = ("SigLIP's attention-pooling head: its query is a learned probe vector, not a hidden state, so "
               "W_Q, b_Q and the probe reach the output only through one query per head; the per-head gauge "
               "count does not apply to it and idinspect does not count it")


class ClipAdapter(Adapter):
    family = "clip"
    model_types = tuple(HOLDS)
    model_tensors = {
        "**embeddings.(token_embedding.weight|patch_embedding.weight|patch_embedding.bias|class_embedding)": "embedding",
        "**embeddings.position_embedding.weight": "position",
        "**encoder.layers.{n}.(layer_norm1|layer_norm2).(weight|bias)": "norm",
        "**encoder.layers.{n}.mlp.(fc1|fc2).(weight|bias)": "mlp",
        "(text_model.|vision_model.)?(final_layer_norm|post_layernorm|pre_layrnorm).(weight|bias)": "norm",
        "(text_model.|vision_model.)?head.(weight|bias)": "head",
        "(vision_model.)?head.(layernorm|mlp.fc1|mlp.fc2).(weight|bias)": "head",
        "(logit_bias|logit_scale|text_projection.weight|visual_projection.weight)": "head",
    }
    pre_norm = ("layer_norm1.weight",)
    hf_modules = {"self": ("self_attn", None)}

    def __init__(self, config, reader):
        self.towers = HOLDS[config.model_type]
        super().__init__(config, reader)
        for tower in self.towers:
            d, H = self.tower(tower, "hidden_size"), self.tower(tower, "num_attention_heads")
            if d % H:
                raise IdinspectError(f"config.json: the {tower} tower's hidden_size {d} is not divisible by its "
                                     f"{H} attention heads; fix the config")

    # sizes ------------------------------------------------------------------------------
    def tower(self, tower: str, name: str) -> Any:
        """Setting ``name`` of ``tower``: from ``{tower}_config`` for a two-tower model (config.json's
        stored value, else transformers' sub-config's), from the top level for a one-tower model."""
        if len(self.towers) == 1:
            return getattr(self.config, name)
        sub = getattr(self.config, f"{tower}_config")
        if isinstance(sub, dict):
            if name in sub:
                return sub[name]
            sub = getattr(self.config.full_config(), f"{tower}_config")
        return getattr(sub, name)

    def _tower_path(self, tower: str) -> str:
        return TOWERS[tower] if len(self.towers) > 1 else "encoder.layers"

    def _tower_sizes(self, tower: str) -> tuple[int, int, int, int]:
        d, H = int(self.tower(tower, "hidden_size")), int(self.tower(tower, "num_attention_heads"))
        return H, H, d // H, d

    def sizes(self, site: Site) -> tuple[int, int, int, int]:
        return self._tower_sizes(site.stack)

    @property
    def hidden_size(self) -> int:
        return self._tower_sizes(self.towers[0])[3]

    @property
    def n_heads(self) -> int:
        return self._tower_sizes(self.towers[0])[0]

    @property
    def head_dim(self) -> int:
        return self._tower_sizes(self.towers[0])[2]

    @property
    def num_layers(self) -> int:
        return sum(int(self.tower(t, "num_hidden_layers")) for t in self.towers)

    @cached_property
    def sites(self) -> list[Site]:
        """Text tower layers, then vision tower layers."""
        return [Site(f"{self._tower_path(t)}.{i}", t, i, SELF) for t in self.towers
                for i in range(int(self.tower(t, "num_hidden_layers")))]

    # per-block facts ------------------------------------------------------------------------
    def scale(self, site: Site) -> float:
        return self.sizes(site)[2] ** -0.5

    def causal(self, site: Site) -> bool:
        return site.stack == "text" and self.config.model_type.startswith("clip")

    def unanalysed(self) -> list[dict]:
        """Attention modules the checkpoint holds that are not counted, with their tensors and why."""
        if "vision" not in self.towers or not self.config.model_type.startswith("siglip"):
            return []
        head = f"{self.prefix}{'vision_model.' if len(self.towers) > 1 else ''}head"
        names = [k for k in self.reader.keys() if k.startswith(f"{head}.attention.") or k == f"{head}.probe"]
        if not names:
            return []
        parameters = 0
        for k in names:
            n = 1
            for s in self.reader.shape(k):
                n *= s
            parameters += n
        return [{"module": head, "tensors": sorted(names), "parameters": parameters,
                 "reason": HEAD_REASON}]

    def twin_settings(self, hf_config, shape: dict) -> dict:
        tower = {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "num_hidden_layers": 1,
                 "intermediate_size": 16}
        text = {**tower, "vocab_size": 32, "max_position_embeddings": 16}
        vision = {**tower, "image_size": 8, "patch_size": 2, "num_channels": 1}
        if len(self.towers) == 1:
            return text if self.towers == ("text",) else vision
        return {"text_config": text, "vision_config": vision}


ADAPTERS = (ClipAdapter,)
