"""Tiny Hugging Face checkpoints -> GGUF with the ``gguf`` package's writer, as llama.cpp's
``convert_hf_to_gguf.py`` lays them out: ``blk.N.*`` names, Q/K rows permuted for the "normal"
rotary architectures (its ``LlamaModel.permute``), GPT-2's Conv1D weights transposed to Linear
layout, Phi-3's fused ``qkv_proj`` / ``gate_up_proj`` as ``attn_qkv`` / ``ffn_up`` with its
partial rotary width as ``rope.dimension_count`` and longrope factors as ``rope_factors_{long,short}``
tensors (its ``Phi3MiniModel``), 1-D tensors in F32, 2-D weights in the requested type (F32, F16,
BF16, Q8_0 via ``gguf.quants.quantize``, Q4_K via :mod:`tests.support.gguf_q4k`), one type for all or one per
GGUF tensor kind. Written independently of idinspect's reader, so the tests compare two
implementations of the mapping.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.support.gguf_q4k import quantize_q4_k

LLAMA_LAYER = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "input_layernorm": "attn_norm",
               "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
               "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"}
#: Gemma 2/3 (llama.cpp's tensor_mapping): pre-feedforward norm as ffn_norm, post norms of their own.
GEMMA_LAYER = {**LLAMA_LAYER, "post_attention_layernorm": "post_attention_norm",
               "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "ffn_post_norm"}
#: transformers model_type -> GGUF general.architecture, where they differ.
GGUF_ARCH = {"gemma3_text": "gemma3"}
GPT2_LAYER = {"attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_1": "attn_norm", "ln_2": "ffn_norm",
              "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
NORMAL_ROPE = {"llama", "mistral", "granite"}


def permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's ``LlamaModel.permute`` (half-split rows -> interleaved pairs, per head)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(model, out: Path, qtype: str | dict[str, str] = "F32", permute_qk: bool | None = None) -> Path:
    """Write ``model`` (a transformers PreTrainedModel) as a GGUF file at ``out``; ``qtype`` is the
    GGML type of every 2-D weight, or a dict from GGUF tensor kind (``attn_v``, ...) to type with
    ``"*"`` for the rest (llama.cpp's mixes, e.g. Q4_K_M keeps ``attn_v`` in a wider type).
    ``permute_qk`` overrides whether Q/K rows are permuted (default: the "normal" rotary
    architectures only); tests use it to write a deliberately wrong file."""
    import gguf

    cfg = model.config
    arch = cfg.model_type
    writer = gguf.GGUFWriter(str(out), GGUF_ARCH.get(arch, arch))
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
        writer.add_context_length(cfg.max_position_embeddings)
        writer.add_feed_forward_length(cfg.intermediate_size)
        writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        if arch == "gemma3_text":
            _gemma3_metadata(writer, cfg)
        else:
            writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
        if arch == "phi3":
            _phi3_metadata(writer, cfg)
        else:
            writer.add_key_length(head_dim)
            writer.add_value_length(head_dim)
            writer.add_rope_dimension_count(head_dim)
        if getattr(cfg, "sliding_window", None) and arch == "mistral":
            writer.add_sliding_window(cfg.sliding_window)
        if arch == "granite":     # GraniteModel: the multipliers as scales
            writer.add_attention_scale(cfg.attention_multiplier)
            writer.add_embedding_scale(cfg.embedding_multiplier)
            writer.add_residual_scale(cfg.residual_multiplier)
            writer.add_logit_scale(cfg.logits_scaling)
    for new, data in stored_tensors(model, permute_qk):
        _add(writer, new, data, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def stored_tensors(model, permute_qk: bool | None = None):
    """(GGUF name, float32 array as stored before any quantisation) of every tensor GGUF keeps."""
    cfg = model.config
    arch = cfg.model_type
    for name, w in model.state_dict().items():
        new = gguf_name(arch, name)
        if new is None or (name == "lm_head.weight" and cfg.tie_word_embeddings):   # tied: llama.cpp writes no output
            continue
        w = w.detach().to(torch.float32)
        if arch == "gemma3_text" and name.endswith("norm.weight"):
            w = w + 1      # Gemma3Model.modify_tensors: norm_shift, gains stored as 1 + w
        if (arch in NORMAL_ROPE if permute_qk is None else permute_qk) and arch != "gpt2":
            if ".q_proj." in name or ".k_proj." in name:
                w = permute(w, cfg.num_attention_heads if ".q_proj." in name else cfg.num_key_value_heads)
            elif ".qkv_proj." in name:
                hd = w.shape[0] // (cfg.num_attention_heads + 2 * cfg.num_key_value_heads)
                q, k, v = w.split([cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd,
                                   cfg.num_key_value_heads * hd])
                w = torch.cat([permute(q, cfg.num_attention_heads), permute(k, cfg.num_key_value_heads), v])
        if arch == "gpt2" and name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            w = w.T
        yield new, w.contiguous().numpy()


def _add(writer, name: str, data: np.ndarray, qtype: str | dict[str, str]) -> None:
    import gguf

    if isinstance(qtype, dict):
        kind = name.split(".")[-2] if name.startswith("blk.") else name.rsplit(".", 1)[0]
        qtype = qtype.get(kind, qtype["*"])
    if data.ndim == 1 or qtype == "F32":
        writer.add_tensor(name, data.astype(np.float32))
    elif qtype == "F16":
        writer.add_tensor(name, data.astype(np.float16))
    elif qtype == "Q4_K":
        kind = gguf.GGMLQuantizationType.Q4_K
        writer.add_tensor(name, quantize_q4_k(data), raw_dtype=kind)
    else:
        kind = getattr(gguf.GGMLQuantizationType, qtype)
        writer.add_tensor(name, gguf.quants.quantize(data.astype(np.float32), kind), raw_dtype=kind)


def _gemma3_metadata(writer, cfg) -> None:
    """What llama.cpp's ``Gemma3Model`` writes beyond the common keys: the full layers' RoPE base and
    linear scaling, the sliding window (layer types, the sliding RoPE base and the score scale are
    fixed by llama.cpp's loader, not stored)."""
    import gguf

    full, sliding = cfg.rope_parameters["full_attention"], cfg.rope_parameters["sliding_attention"]
    writer.add_rope_freq_base(float(full["rope_theta"]))
    if full.get("rope_type") == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(full["factor"]))
    writer.add_sliding_window(cfg.sliding_window)
    if cfg.query_pre_attn_scalar != cfg.head_dim:
        raise ValueError("llama.cpp scales Gemma 3 scores by head_dim^-1/2 (but the 27B): "
                         f"query_pre_attn_scalar {cfg.query_pre_attn_scalar} cannot be stored")
    # newer converters state what the loader otherwise fixes (every sixth layer full, sliding base 10000)
    swa = [t == "sliding_attention" for t in cfg.layer_types]
    if swa != [(i + 1) % 6 != 0 for i in range(len(swa))]:
        writer.add_sliding_window_pattern(swa)
    if float(sliding["rope_theta"]) != 10000.0:
        writer.add_rope_freq_base_swa(float(sliding["rope_theta"]))


def _phi3_metadata(writer, cfg) -> None:
    """What llama.cpp's ``Phi3MiniModel`` writes beyond the common keys: no key length (head_dim is
    d / H), ``rope.dimension_count = int(partial d) // H``, the original context length, the sliding
    window (0 for none), and for longrope the factors as tensors plus the attention factor."""
    import math

    rope = cfg.rope_parameters
    partial = rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", None) or 1.0)
    rope_dims = int(partial * cfg.hidden_size) // cfg.num_attention_heads
    writer.add_rope_dimension_count(rope_dims)
    original = getattr(cfg, "original_max_position_embeddings", None) or cfg.max_position_embeddings
    writer.add_rope_scaling_orig_ctx_len(original)
    writer.add_sliding_window(getattr(cfg, "sliding_window", None) or 0)
    if rope.get("rope_type", "default") == "longrope":
        scale = cfg.max_position_embeddings / original
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1 else 1.0)
        writer.add_tensor("rope_factors_long.weight", np.asarray(rope["long_factor"], dtype=np.float32))
        writer.add_tensor("rope_factors_short.weight", np.asarray(rope["short_factor"], dtype=np.float32))


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
    layer = GEMMA_LAYER if arch == "gemma3_text" else LLAMA_LAYER
    return f"blk.{i}.{layer[rest.rsplit('.', 1)[0]]}.{kind}"
