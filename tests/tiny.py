"""Tiny random Hugging Face models for tests, built from transformers configs and save_pretrained.

Every parameter (biases and norms included) is randomised so that zeros hide nothing.
``VARIANTS`` names each family/variant the adapters must handle.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers as tf

_LLAMA = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4, vocab_size=64, max_position_embeddings=64)


def _llama(**kw):
    return tf.LlamaConfig(**{**_LLAMA, **kw})


VARIANTS: dict[str, tuple] = {
    # name: (config factory, model class)
    "bert": (lambda: tf.BertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                                   vocab_size=64, max_position_embeddings=64), tf.BertForMaskedLM),
    "bert-base-model": (lambda: tf.BertConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                                              intermediate_size=32, vocab_size=64, max_position_embeddings=64), tf.BertModel),
    "bert-decoder": (lambda: tf.BertConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                                           vocab_size=64, max_position_embeddings=64, is_decoder=True), tf.BertForMaskedLM),
    "roberta": (lambda: tf.RobertaConfig(hidden_size=16, num_attention_heads=4, num_hidden_layers=2, intermediate_size=32,
                                         vocab_size=64, max_position_embeddings=64), tf.RobertaForMaskedLM),
    "gpt2": (lambda: tf.GPT2Config(n_embd=16, n_head=4, n_layer=2, vocab_size=64, n_positions=64), tf.GPT2LMHeadModel),
    "gpt2-base-model": (lambda: tf.GPT2Config(n_embd=16, n_head=2, n_layer=2, vocab_size=64, n_positions=64), tf.GPT2Model),
    "gpt2-inverse-layer-scale": (lambda: tf.GPT2Config(n_embd=16, n_head=4, n_layer=3, vocab_size=64, n_positions=64,
                                                       scale_attn_by_inverse_layer_idx=True), tf.GPT2LMHeadModel),
    "llama-mha": (lambda: _llama(), tf.LlamaForCausalLM),
    "llama-gqa": (lambda: _llama(num_key_value_heads=2), tf.LlamaForCausalLM),
    "llama-mqa": (lambda: _llama(num_key_value_heads=1), tf.LlamaForCausalLM),
    "llama-bias": (lambda: _llama(num_key_value_heads=2, attention_bias=True), tf.LlamaForCausalLM),
    "llama-head-dim": (lambda: _llama(num_key_value_heads=2, head_dim=8), tf.LlamaForCausalLM),
    "llama3-rope": (lambda: _llama(num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=256,
                                   rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 64}), tf.LlamaForCausalLM),
    "llama-yarn": (lambda: _llama(num_key_value_heads=2, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                                                           "factor": 4.0, "original_max_position_embeddings": 16}),
                   tf.LlamaForCausalLM),
    "llama-base-model": (lambda: _llama(num_key_value_heads=2), tf.LlamaModel),
    "mistral": (lambda: tf.MistralConfig(**{**_LLAMA, "num_key_value_heads": 2, "sliding_window": 4}), tf.MistralForCausalLM),
    "qwen2": (lambda: tf.Qwen2Config(**{**_LLAMA, "num_key_value_heads": 2}), tf.Qwen2ForCausalLM),
}


def build(variant: str, dtype: torch.dtype = torch.float64, seed: int = 0):
    """A randomised HF model of ``variant`` in ``dtype`` (eval mode, sdpa attention)."""
    make_config, cls = VARIANTS[variant]
    config = make_config()
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = cls(config).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def save(model, directory: Path, max_shard_size: str | None = None, dtype: torch.dtype | None = None) -> Path:
    """save_pretrained into ``directory`` (optionally sharded / cast); returns the directory."""
    if dtype is not None:
        model = model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(directory, **kwargs)
    return Path(directory)


def attention_modules(model, i: int):
    """(module whose input is the attention's hidden states, module whose output is W_O z + b_O) of layer i."""
    base = getattr(model, "base_model", model)
    mt = model.config.model_type
    if mt in ("bert", "roberta"):
        layer = base.encoder.layer[i]
        return layer.attention.self, layer.attention.output.dense
    if mt == "gpt2":
        attn = base.h[i].attn
        return attn, attn
    attn = base.layers[i].self_attn
    return attn, attn


def capture_attention(model, input_ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Run ``model`` and return, per layer, (attention input hidden states, attention output)."""
    records: list[dict] = [dict() for _ in range(model.config.num_hidden_layers)]
    handles = []
    for i in range(model.config.num_hidden_layers):
        src, dst = attention_modules(model, i)

        def pre(module, args, kwargs, i=i):
            records[i]["x"] = (kwargs.get("hidden_states") if "hidden_states" in kwargs else args[0]).detach().clone()

        def post(module, args, output, i=i):
            out = output[0] if isinstance(output, tuple) else output
            records[i]["y"] = out.detach().clone()

        handles.append(src.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(dst.register_forward_hook(post))
    try:
        with torch.no_grad():
            model(input_ids=input_ids)
    finally:
        for h in handles:
            h.remove()
    return [(r["x"], r["y"]) for r in records]


def float64_layer(layer):
    """A canonical layer with every tensor cast to float64 (the reference the analyzer's lean,
    stored-dtype path is compared with)."""
    return layer.replace(**{role: t.to(torch.float64) for role, t in layer.tensors().items()})
