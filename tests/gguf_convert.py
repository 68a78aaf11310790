"""Tiny Hugging Face checkpoints -> GGUF with the ``gguf`` package's writer, as llama.cpp's
``convert_hf_to_gguf.py`` lays them out: ``blk.N.*`` names, Q/K rows permuted for the "normal"
rotary architectures (its ``LlamaModel.permute``), GPT-2's Conv1D weights transposed to Linear
layout, 1-D tensors in F32, 2-D weights in the requested type (F32, F16 or Q8_0 via
``gguf.quants.quantize``). Written independently of idinspect's reader, so the tests compare two
implementations of the mapping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

LLAMA_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "input_layernorm": "attn_norm",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
GPT2_LAYER = {"attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_1": "attn_norm", "ln_2": "ffn_norm",
              "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
NORMAL_ROPE = {"llama", "mistral"}


def permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's ``LlamaModel.permute`` (half-split rows -> interleaved pairs, per head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(model, out: Path, qtype: str = "F32") -> Path:
    """Write ``model`` (a transformers PreTrainedModel) as a GGUF file at ``out``."""
    import gguf

    cfg = model.config
    arch = cfg.model_type
    state = {k: v.detach().to(torch.float32) for k, v in model.state_dict().items()}
    writer = gguf.GGUFWriter(str(out), arch)
    if arch == "gpt2":
        writer.add_block_count(cfg.n_layer)
        writer.add_embedding_length(cfg.n_embd)
        writer.add_head_count(cfg.n_head)
        writer.add_context_length(cfg.n_positions)
        writer.add_feed_forward_length(4 * cfg.n_embd)
        writer.add_layer_norm_eps(cfg.layer_norm_epsilon)
    else:
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        writer.add_block_count(cfg.num_hidden_layers)
        writer.add_embedding_length(cfg.hidden_size)
        writer.add_head_count(cfg.num_attention_heads)
        writer.add_head_count_kv(cfg.num_key_value_heads)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_context_length(cfg.max_position_embeddings)
        writer.add_feed_forward_length(cfg.intermediate_size)
        writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
        writer.add_rope_dimension_count(head_dim)
        if getattr(cfg, "sliding_window", None) and arch == "mistral":
            writer.add_sliding_window(cfg.sliding_window)
    for name, w in state.items():
        new = gguf_name(arch, name)
        if new is None:
            continue
        if arch in NORMAL_ROPE and (".q_proj." in name or ".k_proj." in name):
            w = permute(w, cfg.num_attention_heads if ".q_proj." in name else cfg.num_key_value_heads)
        if arch == "gpt2" and name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            w = w.T
        data = w.contiguous().numpy()
        if data.ndim == 1 or qtype == "F32":
            writer.add_tensor(new, data.astype(np.float32))
        elif qtype == "F16":
            writer.add_tensor(new, data.astype(np.float16))
        else:
            kind = getattr(gguf.GGMLQuantizationType, qtype)
            writer.add_tensor(new, gguf.quants.quantize(data.astype(np.float32), kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def gguf_name(arch: str, name: str) -> str | None:
    """The GGUF name of a transformers state-dict key (None: not stored, e.g. GPT-2's mask buffers)."""
    name = name.removeprefix("transformer.").removeprefix("model.")
    kind = name.rsplit(".", 1)[-1]
    if arch == "gpt2":
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            return None
        top = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight", "ln_f.weight": "output_norm.weight",
               "ln_f.bias": "output_norm.bias", "lm_head.weight": None}
        if name in top:
            return top[name]
        _, i, rest = name.split(".", 2)
        return f"blk.{i}.{GPT2_LAYER[rest.rsplit('.', 1)[0]]}.{kind}"
    top = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if name in top:
        return top[name]
    _, i, rest = name.split(".", 2)
    return f"blk.{i}.{LLAMA_LAYER[rest.rsplit('.', 1)[0]]}.{kind}"
