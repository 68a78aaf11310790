"""Gemma's norms multiply by 1 + w: compare folds 1 + w (not the stored w), so a non-uniform rescaling
of that gain undone in q/k/v (the same function, every weight changed) stays same-function; with a
gain near 0 stored in bfloat16 the rounding of w, large relative to 1 + w, is bounded per head."""

from __future__ import annotations

import torch
import transformers as tf

from idinspect.compare import compare

CONFIG = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 8, "vocab_size": 64, "max_position_embeddings": 32}


def _gemma(seed: int):
    torch.manual_seed(seed)
    model = tf.GemmaForCausalLM(tf.GemmaConfig(**CONFIG)).double().eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "model.norm.weight":
                p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    return model


def _rescaled(model, c_of_layer):
    """A copy whose input_layernorm gain 1 + w is multiplied by c (per entry) and q/k/v columns divided by c."""
    out = type(model)(model.config).double().eval()
    out.load_state_dict(model.state_dict())
    with torch.no_grad():
        for i, layer in enumerate(out.model.layers):
            c = c_of_layer(i)
            w = layer.input_layernorm.weight
            w.copy_((1 + w) * c - 1)
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.weight.div_(c[None, :])
    return out


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_offset_gain_rescaling_is_same_function(tmp_path):
    A = _gemma(0)
    gen = torch.Generator().manual_seed(1)
    B = _rescaled(A, lambda i: torch.exp(0.7 * torch.randn(CONFIG["hidden_size"], generator=gen, dtype=torch.float64)))
    ids = torch.randint(0, 64, (2, 7), generator=gen)
    assert (_logits(A, ids) - _logits(B, ids)).abs().max() < 1e-5          # same function (RMSNorm runs in float32)
    A.float().save_pretrained(tmp_path / "A")
    B.float().save_pretrained(tmp_path / "B")
    r = compare(tmp_path / "A", tmp_path / "B")
    assert r.verdict == "same-function", r.same_function
    assert r.a.gains_folded and r.b.gains_folded
    # folding matters: the gain changed without q/k/v compensating is another function, and compare says so
    C = type(A)(A.config).double().eval()
    C.load_state_dict(B.state_dict())
    C.model.layers[0].self_attn.q_proj.weight.data.copy_(A.model.layers[0].self_attn.q_proj.weight.data)
    C.float().save_pretrained(tmp_path / "C")
    assert compare(tmp_path / "A", tmp_path / "C").verdict != "same-function"


def test_gain_near_zero_in_bf16_stays_same_function(tmp_path):
    """1 + w = 0.05 on some entries, stored in bf16: w = -0.95 rounds by 2^-8 * 0.95, 19 u relative to the
    gain; the per-head bound covers it without loosening the heads those entries barely touch."""
    A = _gemma(2)
    c = torch.ones(CONFIG["hidden_size"], dtype=torch.float64)
    c[:3] = 0.05
    B = _rescaled(A, lambda i: c / (1 + A.model.layers[i].input_layernorm.weight.detach()) * (1 + 0 * c))
    # B's gains: 1 + w_B = (1 + w_A) * c / (1 + w_A) = c, i.e. 0.05 on three entries
    assert torch.allclose(1 + B.model.layers[0].input_layernorm.weight[:3], torch.full((3,), 0.05, dtype=torch.float64))
    A.to(torch.bfloat16).save_pretrained(tmp_path / "A")
    B.to(torch.bfloat16).save_pretrained(tmp_path / "B")
    r = compare(tmp_path / "A", tmp_path / "B")
    assert r.verdict == "same-function", r.same_function
    assert r.b.gains_folded
    assert r.same_function["worst"]["ratio"] > 1e-3                     # the bound is not vacuous
