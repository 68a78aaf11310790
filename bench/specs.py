"""The synthetic checkpoints the benchmark builds: real shapes, random weights.

Each :class:`ModelSpec` names a transformers config, the model class whose parameter names the
checkpoint uses, the storage dtype and the shard size. ``FULL`` and ``QUICK`` are the model sets of
the two benchmark modes; ``role`` says which target a model serves (``main`` for the time ratios,
``rss-small``/``rss-large`` for the 16- vs 32-layer memory pair, ``case``/``case-large`` for the
non-Llama case: Phi-3-mini widths at two depths, inspect / floor judged on the deeper one).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

#: Bump when the builder's output changes, so cached checkpoints are rebuilt.
BUILDER_VERSION = 1

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

LLAMA_1B = {
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "rope_parameters": LLAMA3_ROPE, "tie_word_embeddings": True,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
}


#: Phi-3-mini (microsoft/Phi-3-mini-4k-instruct) widths: fused qkv_proj, 32 heads of 96, no GQA.
PHI3_MINI = {
    "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 32000, "pad_token_id": 32000, "hidden_act": "silu", "sliding_window": 2047,
}


@dataclass(frozen=True)
class ModelSpec:
    """One synthetic checkpoint."""

    name: str
    model_type: str                  # "llama", "phi3", "gpt2" or "bert"
    model_class: str                 # transformers class whose parameter names are stored
    config: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"           # storage dtype: "bfloat16" or "float32"
    max_shard_size: int = 1_000_000_000   # bytes, as save_pretrained's "1GB"
    role: str = "main"               # "main", "rss-small", "rss-large", "case", "case-large", "extra" or a "scale*" role (SCALE)
    causal_lm: bool = True           # baseline loads AutoModelForCausalLM (else AutoModel)
    seed: int = 0                    # weight seed (a second, unrelated checkpoint of the same shape)

    @property
    def layers(self) -> int:
        return int(self.config.get("num_hidden_layers") or self.config.get("n_layer") or 12)

    def digest(self) -> str:
        """Short hash of everything that determines the files (cache key)."""
        payload = json.dumps({"v": BUILDER_VERSION, "type": self.model_type, "cls": self.model_class,
                              "config": self.config, "dtype": self.dtype, "shard": self.max_shard_size},
                             sort_keys=True)
        if self.seed:                # seed 0 keeps the digests (and caches) of earlier builds
            payload += f"seed={self.seed}"
        return hashlib.sha256(payload.encode()).hexdigest()[:10]

    def make_config(self):
        """The transformers config object (dtype and architectures set as save_pretrained would)."""
        import torch
        import transformers as tf

        cls = {"llama": tf.LlamaConfig, "phi3": tf.Phi3Config, "gpt2": tf.GPT2Config,
               "bert": tf.BertConfig}[self.model_type]
        config = cls(**self.config)
        config.dtype = getattr(torch, self.dtype)
        config.architectures = [self.model_class]
        return config


LLAMA_8B = {
    **LLAMA_1B, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False,
    "rope_parameters": {**LLAMA3_ROPE, "factor": 8.0},
}
LLAMA_70B = {**LLAMA_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
             "num_key_value_heads": 8, "head_dim": 128}


def llama_at_scale(size: str, layers: int, role: str) -> ModelSpec:
    """A Llama-3.1-8B (``size="8b"``) or Llama-3.1-70B (``"70b"``) shaped checkpoint, full width, with
    only ``layers`` decoder layers (bf16, 2 GB shards): the per-layer cost at scale without 16 or
    140 GB on disk (issue 20). Times for the full depth are extrapolated from two depths."""
    base = {"8b": LLAMA_8B, "70b": LLAMA_70B}[size]
    return ModelSpec(name=f"llama-{size}-{layers}l", model_type="llama", model_class="LlamaForCausalLM",
                     config={**base, "num_hidden_layers": layers}, dtype="bfloat16",
                     max_shard_size=2_000_000_000, role=role)


#: The scale set (``python -m bench.run --scale``): two 8B depths (the per-layer slope) and a 70B
#: shape with two full-width layers. About 16 GB on disk; skipped when the disk is short.
SCALE: tuple[ModelSpec, ...] = (
    llama_at_scale("8b", 2, "scale-slope"), llama_at_scale("8b", 8, "scale"), llama_at_scale("70b", 2, "scale-wide"),
)


def llama(name: str, layers: int, role: str) -> ModelSpec:
    """A Llama-3.2-1B-shaped checkpoint with ``layers`` decoder layers (bf16, ~1 GB shards)."""
    return ModelSpec(name=name, model_type="llama", model_class="LlamaForCausalLM",
                     config={**LLAMA_1B, "num_hidden_layers": layers}, dtype="bfloat16", role=role)


def phi3(name: str, layers: int, role: str) -> ModelSpec:
    """A Phi-3-mini-shaped checkpoint with ``layers`` decoder layers (bf16, ~1 GB shards): the
    benchmark's non-Llama case (fused [Q | K | V] ``qkv_proj`` split by the generic engine)."""
    return ModelSpec(name=name, model_type="phi3", model_class="Phi3ForCausalLM",
                     config={**PHI3_MINI, "num_hidden_layers": layers}, dtype="bfloat16", role=role)


GPT2_SMALL = ModelSpec(name="gpt2-small", model_type="gpt2", model_class="GPT2LMHeadModel",
                       config={"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                               "n_positions": 1024}, role="extra")
BERT_BASE = ModelSpec(name="bert-base", model_type="bert", model_class="BertForMaskedLM",
                      config={"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                              "intermediate_size": 3072, "vocab_size": 30522,
                              "max_position_embeddings": 512}, role="extra", causal_lm=False)

FULL: tuple[ModelSpec, ...] = (
    llama("llama-1b-16l", 16, "main"),
    llama("llama-1b-32l", 32, "rss-large"),
    GPT2_SMALL,
    BERT_BASE,
    phi3("phi3-mini-8l", 8, "case"),
    phi3("phi3-mini-16l", 16, "case-large"),
)

#: Development mode: the real widths, fewer layers (2 vs 4 stands in for 16 vs 32).
QUICK: tuple[ModelSpec, ...] = (
    llama("llama-1b-2l", 2, "main"),
    llama("llama-1b-4l", 4, "rss-large"),
    GPT2_SMALL,
    BERT_BASE,
    phi3("phi3-mini-2l", 2, "case"),
    phi3("phi3-mini-4l", 4, "case-large"),
)


def compare_pair(layers: int, size: str = "1b") -> tuple[ModelSpec, ModelSpec]:
    """Two Llama-3.2-1B-shaped (``size="8b"``: Llama-3.1-8B-shaped) checkpoints with ``layers`` layers
    and different weight seeds (the compare benchmark, :mod:`bench.compare_bench`); the first is the
    main (or scale) benchmark's checkpoint."""
    a = llama(f"llama-1b-{layers}l", layers, "main") if size == "1b" else llama_at_scale(size, layers, "scale")
    return a, ModelSpec(**{**a.__dict__, "name": f"{a.name}-seed1", "seed": 1, "role": "extra"})


def by_role(specs: tuple[ModelSpec, ...], role: str) -> ModelSpec | None:
    """The first spec with ``role`` (``main`` doubles as ``rss-small``)."""
    for spec in specs:
        if spec.role == role or (role == "rss-small" and spec.role == "main"):
            return spec
    return None
