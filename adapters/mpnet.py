"""MPNet: BERT's post-LayerNorm encoder with q/k/v/o (all biased) and a relative-position bias
table that belongs to the model, not to a layer.

Layer i (prefix '' for MPNetModel saves such as all-mpnet-base-v2, 'mpnet.' for task models):
    encoder.layer.i.attention.attn.{q,k,v,o}.{weight [d, d], bias [d]}
    encoder.relative_attention_bias.weight [32, H]        the model's table, read by every layer
The encoder looks the table up once (bidirectional T5 buckets, 32 of them, max_distance 128: fixed
by transformers whatever ``relative_attention_num_buckets`` says) and passes the same bias
(``position_bias``) to every layer. The table is counted once, in block 0 (``owned``), with its
unidentified directions (a constant shift per head, and the one bucket no pair of positions
reaches). Distances up to 91 are needed to reach every bucket: the test variants run 96 tokens.
"""

from __future__ import annotations

from ..errors import IdinspectError
from ..layer.attention_layer import Positional, RelativeBias
from .base import Adapter, Site
from .layout import Block, Projection

SELF = Block("self", tuple(Projection(f"attention.attn.{r}", r) for r in "qkvo"))
TABLE = "encoder.relative_attention_bias.weight"
#: transformers' MPNetEncoder.compute_position_bias(num_buckets=32) and relative_position_bucket(max_distance=128).
BUCKETS, MAX_DISTANCE = 32, 128


class MPNetAdapter(Adapter):
    family = "mpnet"
    model_types = ("mpnet",)
    post_norm = ("embeddings.LayerNorm.weight", "output.LayerNorm.weight")
    model_tensors = {
        "embeddings.(word_embeddings|position_embeddings).weight": "embedding",
        "embeddings.LayerNorm.(weight|bias)": "norm",
        "encoder.layer.{n}.attention.LayerNorm.(weight|bias)": "norm",
        "encoder.layer.{n}.output.LayerNorm.(weight|bias)": "norm",
        "encoder.layer.{n}.(intermediate|output).dense.(weight|bias)": "mlp",
        "pooler.dense.(weight|bias)": "head",
        "lm_head.**": "head",
    }
    layer_container = "encoder.layer"
    block = SELF
    hf_modules = {"self": ("attention.attn", None)}
    #: The model-level table a block reads through its call: (module below the prefix, the call's keyword).
    hf_shared_tables = {"self": ("encoder.relative_attention_bias", "position_bias")}
    #: --prove's twin runs sequences long enough to reach every bucket (distance 91).
    twin_tokens = 96

    def causal(self, site: Site) -> bool:
        return False

    def positional_keys(self) -> list[str]:
        return [f"{self.prefix}{TABLE}"]

    def positional(self, site: Site | None = None) -> Positional:
        if site is None:
            return Positional("relative")
        rows = int(self.optional("relative_attention_num_buckets", BUCKETS))
        if rows != BUCKETS:
            raise IdinspectError(f"config.json: relative_attention_num_buckets is {rows}, but transformers' MPNet "
                                 f"buckets positions into {BUCKETS} whatever the config says (rows past {BUCKETS} would "
                                 "never be read, fewer would fail): this checkpoint does not run as its config says")
        name = f"{self.prefix}{TABLE}"
        table = self._load(name, (BUCKETS, self.n_heads))
        return Positional("relative", relative=RelativeBias(table=table, bidirectional=True, max_distance=MAX_DISTANCE,
                                                            owned=site.layer == 0, tensor_name=name))

    def twin_settings(self, hf_config, shape: dict) -> dict:
        return {"hidden_size": shape["hidden_size"], "num_attention_heads": shape["heads"], "intermediate_size": 16,
                "max_position_embeddings": 2 * self.twin_tokens + 8, "relative_attention_num_buckets": BUCKETS,
                "pad_token_id": 1}


ADAPTERS = (MPNetAdapter,)
