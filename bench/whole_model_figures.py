"""Whole-model counts at real sizes from shape-only checkpoints (``python -m bench.whole_model_figures``).

Each configuration is written as a safetensors file whose header is complete and whose data is a
sparse hole (no disk used, nothing to download): only the final norm's gain is stored, as distinct
float32 values (the tie term then is 0; a real checkpoint's term is sum m_k(m_k-1)/2 over its own
repeated gain values). The attention count is idinspect's structural count read from the headers
(:func:`idinspect.analysis.whole_model_read.attention_from_headers`); nothing else is read.
"""

from __future__ import annotations

import json
import struct
import sys
import tempfile
from pathlib import Path

import torch

from .specs import LLAMA_1B, LLAMA_8B

CONFIGS = {
    "Llama-3.2-1B": ("LlamaConfig", "LlamaForCausalLM", {**LLAMA_1B, "tie_word_embeddings": True}, "model.norm.weight"),
    "Llama-3.1-8B": ("LlamaConfig", "LlamaForCausalLM", {**LLAMA_8B, "num_hidden_layers": 32, "tie_word_embeddings": False},
                     "model.norm.weight"),
    "GPT-2 small": ("GPT2Config", "GPT2LMHeadModel", {}, "transformer.ln_f.weight"),
    "Mixtral-8x7B": ("MixtralConfig", "MixtralForCausalLM",
                     {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                      "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                      "tie_word_embeddings": False}, "model.norm.weight"),
}
DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32"}


def write_shape_only(folder: Path, config_cls: str, model_cls: str, settings: dict, gain: str) -> Path:
    """config.json and a sparse model.safetensors of the model's parameters (bf16; ``gain`` float32, stored)."""
    import transformers as tf

    config = getattr(tf, config_cls)(**settings)
    config.architectures = [model_cls]
    config.save_pretrained(folder)
    with torch.device("meta"):
        model = getattr(tf, model_cls)(config)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, p in model.named_parameters():
        dtype = torch.float32 if name == gain else torch.bfloat16
        n = p.numel() * dtype.itemsize
        header[name] = {"dtype": DTYPES[dtype], "shape": list(p.shape), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = folder / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        start = f.tell()
        d = header[gain]["shape"][0]
        f.seek(start + header[gain]["data_offsets"][0])
        f.write((1.0 + torch.arange(d, dtype=torch.float32) / d).numpy().tobytes())   # distinct values
        f.truncate(start + offset)
    return folder


def figures() -> dict:
    import idinspect
    from idinspect.analysis.whole_model_read import attention_from_headers, whole_model

    out = {}
    for name, (config_cls, model_cls, settings, gain) in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            with idinspect.load(write_shape_only(Path(tmp), config_cls, model_cls, settings, gain)) as model:
                out[name] = whole_model(model, attention_from_headers(model))
    return out


if __name__ == "__main__":
    json.dump(figures(), sys.stdout, indent=1)
    print()
