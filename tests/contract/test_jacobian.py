"""The counts are proven, not asserted: for every supported family and variant, the nullity of the
Jacobian of the real Hugging Face attention module (float64, sdpa, several random batches) equals
the unidentified count idinspect reports for that layer. The MATH.md table is checked the same way
on modules built to its shapes."""

import pytest
import torch
import transformers as tf

import idinspect
import idinspect.analysis
from idinspect.forms.per_head import structure
from idinspect.layer.attention_layer import (
    AttentionLayer,
    Positional,
    QKNorm,
    RotarySpec,
)
from tests.support import tiny
from tests.support.jacobian import (
    NEAR_EXACT_RTOL,
    NEAR_RTOL,
    RTOL,
    attention_nullity,
    attention_singular_values,
    bands,
    jacobian_bands,
)


def _clean_gap(n) -> None:
    """The cut sits in a wide gap, so the count does not depend on RTOL."""
    assert n.smallest_kept > 1e3 * RTOL, n
    assert n.largest_dropped < 1e-3 * RTOL, n


def _check_counts(n, layer: dict, where) -> None:
    """Exact nullity = unidentified; with a q/k norm, also nearly null = near_unidentified, each cut
    (NEAR_EXACT_RTOL, NEAR_RTOL) in a gap of at least 10x on both sides."""
    assert n.parameters == layer["attention_parameters"], where
    if not layer.get("near_unidentified"):
        _clean_gap(n)
        assert n.nullity == layer["unidentified_parameters"], (where, n.nullity)
        return
    b = bands(n)
    assert (b.exact, b.near) == (layer["unidentified_parameters"], layer["near_unidentified"]), (where, b)
    assert b.largest_exact < 0.1 * NEAR_EXACT_RTOL < 0.01 * b.smallest_near, (where, b)
    assert b.largest_near < 0.1 * NEAR_RTOL < 0.01 * b.smallest_kept, (where, b)


def _attention_blocks(hf) -> int:
    """Attention modules of a live model, counted without idinspect: the outermost modules whose
    class name ends in "Attention" (BertAttention holds BertSelfAttention; an ALBERT group's module
    is one, however many layers run it)."""
    mods = [m for m in hf.modules() if type(m).__name__.endswith("Attention")]
    return sum(1 for m in mods if not any(o is not m and any(c is m for c in o.modules()) for o in mods))


@pytest.mark.parametrize("variant", sorted(tiny.VARIANTS))
def test_reported_unidentified_equals_jacobian_nullity(variant, tiny_dir):
    hf = tiny.build(variant)
    result = idinspect.inspect(tiny_dir(variant), spectra=False)
    # every attention module is counted, or named in the report as left out (SigLIP's pooling head)
    assert len(result["layers"]) + len(result["model"].get("not_analysed", [])) == _attention_blocks(hf)
    adapter = idinspect.load(hf).adapter
    exact, tokens = adapter.exact_float64, tiny.VARIANTS[variant].tokens or 8
    for i, layer in enumerate(result["layers"]):
        src, dst = tiny.attention_modules(hf, i)
        table = adapter.shared_table(i)
        if layer.get("near_unidentified") and not layer.get("qk_norm"):   # MLA's bands; q/k norms: _check_counts
            s, P, _ = attention_singular_values(hf, src, dst, seed=i, exact=exact, tokens=tokens, table=table)
            assert P == layer["attention_parameters"], (variant, i)
            assert jacobian_bands(s) == (layer["unidentified_parameters"], layer["near_unidentified"]), (variant, i)
            continue
        n = attention_nullity(hf, src, dst, seed=i, exact=exact, tokens=tokens, table=table)
        _check_counts(n, layer, (variant, i))
    assert result["totals"]["unidentified_parameters"] == sum(x["unidentified_parameters"] for x in result["layers"])


# --- the MATH.md table, on modules built to its shapes ---------------------------------------------

def _canonical(H: int, G: int, d: int, dk: int, biases: str = "", rotary_dim: int = 0) -> AttentionLayer:
    """A zero canonical layer of the given shape (structural counts read only shapes and biases)."""
    z = torch.zeros
    pos = Positional("none")
    if rotary_dim:
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
        pos = Positional("rope", rotary=RotarySpec("half", rotary_dim, inv_freq))
    return AttentionLayer(index=0, W_Q=z(H, d, dk), W_K=z(G, d, dk), W_V=z(G, d, dk), W_O=z(H, dk, d),
                          b_Q=z(H, dk) if "q" in biases else None, b_K=z(G, dk) if "k" in biases else None,
                          b_V=z(G, dk) if "v" in biases else None, b_O=z(d) if "o" in biases else None,
                          positional=pos)


def _randomised(model):
    model._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = model.to(torch.float64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def _bert(d: int, H: int, drop_biases: str = ""):
    cfg = tf.BertConfig(hidden_size=d, num_attention_heads=H, num_hidden_layers=1, intermediate_size=16,
                        vocab_size=32, max_position_embeddings=32)
    cfg._attn_implementation = "sdpa"
    hf = _randomised(tf.BertModel(cfg, add_pooling_layer=False))
    attn = hf.encoder.layer[0].attention
    for role, lin in zip("qkvo", (attn.self.query, attn.self.key, attn.self.value, attn.output.dense)):
        if role in drop_biases:
            lin.bias = None
    return hf, attn.self, attn.output.dense


def _llama(cls, d: int, H: int, G: int, dk: int):
    cfg = cls(hidden_size=d, num_attention_heads=H, num_key_value_heads=G, head_dim=dk, num_hidden_layers=1,
              intermediate_size=16, vocab_size=32, max_position_embeddings=32)
    cfg._attn_implementation = "sdpa"
    hf = _randomised(tf.AutoModel.from_config(cfg))
    return hf, hf.layers[0].self_attn


def _rope_off(args, kwargs):
    cos, sin = kwargs["position_embeddings"]
    return args, {**kwargs, "position_embeddings": (torch.ones_like(cos), torch.zeros_like(sin))}


def _table_case(case: str):
    """(nullity result, canonical layer whose structural count must match) for one MATH.md row."""
    if case == "mha-h2-nobias":
        hf, src, dst = _bert(8, 2, drop_biases="qkvo")
        return attention_nullity(hf, src, dst), _canonical(2, 2, 8, 4)
    if case == "mha-h4-nobias":
        hf, src, dst = _bert(8, 4, drop_biases="qkvo")
        return attention_nullity(hf, src, dst), _canonical(4, 4, 8, 2)
    if case == "mha-h2-qkvo":
        hf, src, dst = _bert(8, 2)
        return attention_nullity(hf, src, dst), _canonical(2, 2, 8, 4, "qkvo")
    if case == "mha-h2-qkv":
        hf, src, dst = _bert(8, 2, drop_biases="o")
        return attention_nullity(hf, src, dst), _canonical(2, 2, 8, 4, "qkv")
    if case == "gqa-h4-g2-norope":
        hf, attn = _llama(tf.LlamaConfig, 8, 4, 2, 2)
        return attention_nullity(hf, attn, edit_call=_rope_off), _canonical(4, 2, 8, 2)
    if case == "rope-mha-h2-half":
        hf, attn = _llama(tf.LlamaConfig, 8, 2, 2, 4)
        return attention_nullity(hf, attn), idinspect.load(hf).layer(0)
    if case == "rope-mha-h2-interleaved":
        cfg = tf.GPTJConfig(n_embd=8, n_head=2, rotary_dim=4, n_layer=1, n_inner=16, vocab_size=32, n_positions=32)
        cfg._attn_implementation = "sdpa"
        hf = _randomised(tf.GPTJModel(cfg))
        layer = _canonical(2, 2, 8, 4, rotary_dim=4)
        layer = layer.replace(positional=Positional("rope", rotary=RotarySpec("interleaved", 4, layer.positional.rotary.inv_freq)))
        return attention_nullity(hf, hf.h[0].attn), layer
    if case == "rope-gqa-h4-g2-dk2":
        hf, attn = _llama(tf.LlamaConfig, 8, 4, 2, 2)
        return attention_nullity(hf, attn), idinspect.load(hf).layer(0)
    if case == "rope-gqa-d12":
        hf, attn = _llama(tf.LlamaConfig, 12, 4, 2, 4)
        return attention_nullity(hf, attn), idinspect.load(hf).layer(0)
    if case == "qwen2-d12":
        hf, attn = _llama(tf.Qwen2Config, 12, 4, 2, 4)
        return attention_nullity(hf, attn), idinspect.load(hf).layer(0)
    if case == "partial-rope-neox":
        cfg = tf.GPTNeoXConfig(hidden_size=12, num_attention_heads=2, num_hidden_layers=1, intermediate_size=16,
                               vocab_size=32, max_position_embeddings=32, rotary_pct=1 / 3, attention_bias=True)
        cfg._attn_implementation = "sdpa"
        hf = _randomised(tf.GPTNeoXModel(cfg))
        assert hf.rotary_emb.inv_freq.numel() == 1            # 2 of the 6 head dims rotate
        return attention_nullity(hf, hf.layers[0].attention), _canonical(2, 2, 12, 6, "qkvo", rotary_dim=2)
    raise KeyError(case)


MATH_TABLE = {  # case: (params, unidentified), from ../shared/MATH.md
    "mha-h2-nobias": (256, 64),
    "mha-h4-nobias": (256, 32),
    "mha-h2-qkvo": (288, 80),
    "mha-h2-qkv": (280, 72),
    "gqa-h4-g2-norope": (192, 16),
    "rope-mha-h2-half": (256, 40),
    "rope-mha-h2-interleaved": (256, 40),
    "rope-gqa-h4-g2-dk2": (192, 12),
    "rope-gqa-d12": (576, 40),
    "qwen2-d12": (608, 40),
    "partial-rope-neox": (624, 128),
}


@pytest.mark.parametrize("case", sorted(MATH_TABLE))
def test_math_table(case):
    params, unidentified = MATH_TABLE[case]
    n, layer = _table_case(case)
    _clean_gap(n)
    assert (n.parameters, n.nullity) == (params, unidentified)
    structure.require_modelled(layer)
    assert layer.parameter_count() == params
    assert structure.unidentified_dims(layer) == unidentified


def test_math_table_hf_modules(tiny_dir):
    """The last two rows are the tiny llama-bias and qwen2 checkpoints themselves."""
    for variant, (params, unidentified) in {"llama-bias": (816, 48), "qwen2": (800, 40)}.items():
        layer = idinspect.inspect(tiny_dir(variant), spectra=False)["layers"][0]
        assert (layer["attention_parameters"], layer["unidentified_parameters"]) == (params, unidentified)


def test_oracle_sees_a_real_difference():
    """Guard against a vacuous oracle: with the RoPE switched off a RoPE module gains the full GL(d_k)."""
    hf, attn = _llama(tf.LlamaConfig, 8, 4, 2, 2)
    on = attention_nullity(hf, attn)
    off = attention_nullity(hf, attn, edit_call=_rope_off)
    assert (on.nullity, off.nullity) == (12, 16)


# --- what the weights add: degenerate factors, checked against the oracle -------------------------

def _projections(hf, variant):
    src, dst = tiny.attention_modules(hf, 0)
    if variant.startswith("bert"):
        return {"q": src.query, "k": src.key, "v": src.value, "o": dst}
    return {"q": src.q_proj, "k": src.k_proj, "v": src.v_proj, "o": src.o_proj}


def _low_rank_rows(role, head, rank=None, bias=None):
    """Rows of head ``head`` in projection ``role`` with rank ``rank`` (default d_k - 1);
    ``bias``: "zero" zeroes the head's bias, "rows" puts it in the row space of the new rows."""
    def edit(lin, d, dk, g):
        L, k = lin[role], dk - 1 if rank is None else rank
        A = torch.randn(dk, k, generator=g, dtype=torch.float64)
        L.weight[head * dk:(head + 1) * dk, :] = A @ torch.randn(k, d, generator=g, dtype=torch.float64)
        if bias == "zero":
            L.bias[head * dk:(head + 1) * dk] = 0
        elif bias == "rows":
            L.bias[head * dk:(head + 1) * dk] = A @ torch.randn(k, generator=g, dtype=torch.float64)
    return edit


def _low_rank_out(head, rank):
    def edit(lin, d, dk, g):
        lin["o"].weight[:, head * dk:(head + 1) * dk] = (torch.randn(d, rank, generator=g, dtype=torch.float64)
                                                        @ torch.randn(rank, dk, generator=g, dtype=torch.float64))
    return edit


def _zero_plane(role, head, plane):
    def edit(lin, d, dk, g):
        rows = [head * dk + plane, head * dk + plane + dk // 2]
        lin[role].weight[rows, :] = 0
        if lin[role].bias is not None:
            lin[role].bias[rows] = 0
    return edit


def _output_sum_rank_one(lin, d, dk, g):
    """S_0 = W_O^0 + W_O^1 of rank 1 (Qwen2, kv group 0), all heads still full rank."""
    A = torch.randn(d, dk, generator=g, dtype=torch.float64)
    lin["o"].weight[:, 0:dk] = A
    lin["o"].weight[:, dk:2 * dk] = -A + torch.randn(d, 1, generator=g, dtype=torch.float64) @ torch.randn(1, dk, generator=g, dtype=torch.float64)


DEGENERATE = {  # case: (variant, edit, extra unidentified dims the oracle must see)
    "bert-WQ-rank3-live-bQ": ("bert", _low_rank_rows("q", 1), 0),
    "bert-WQ-rank3-bQ0": ("bert", _low_rank_rows("q", 1, bias="zero"), 12),
    "bert-WK-rank3": ("bert", _low_rank_rows("k", 1), 13),
    "bert-WV-rank3": ("bert", _low_rank_rows("v", 1), 12),
    "llama-WQ-rank3": ("llama-mha", _low_rank_rows("q", 1), 0),
    "llama-Q-plane-zero": ("llama-mha", _zero_plane("q", 1, 0), 30),
    "llama-K-plane-zero": ("llama-mha", _zero_plane("k", 1, 1), 30),
    "llama-dead-head": ("llama-mha", _low_rank_out(2, 0), 172),
    "gqa-dead-head": ("llama-gqa", _low_rank_out(0, 0), 64),
    "gqa-WV-rank3": ("llama-gqa", _low_rank_rows("v", 0), 28),
    "qwen2-WV-rank3-live-bV": ("qwen2", _low_rank_rows("v", 0), 20),
    "qwen2-WV-rank3-bV-in-rows": ("qwen2", _low_rank_rows("v", 0, bias="rows"), 28),
    "qwen2-K-plane-zero": ("qwen2", _zero_plane("k", 0, 0), 66),
    "qwen2-output-sum-rank1": ("qwen2", _output_sum_rank_one, 3),
}


@pytest.mark.parametrize("case", sorted(DEGENERATE))
def test_extra_freedom_of_degenerate_weights_equals_jacobian_nullity(case):
    variant, edit, extra = DEGENERATE[case]
    hf = tiny.build(variant)
    d = hf.config.hidden_size
    dk = getattr(hf.config, "head_dim", None) or d // hf.config.num_attention_heads
    with torch.no_grad():
        edit(_projections(hf, variant), d, dk, torch.Generator().manual_seed(3))
    counts, findings = idinspect.analysis.analyze_layer(idinspect.load(hf).layer(0))
    n = attention_nullity(hf, *tiny.attention_modules(hf, 0))
    _clean_gap(n)
    assert counts["extra_unidentified"] == extra
    assert n.nullity == counts["unidentified_parameters"] + extra == counts["unidentified_with_weights"]
    flagged = any(f["rule"] == "rank-deficient-head" for f in findings)
    # every gain from a head's factors is flagged; the sum of a group's output maps (reached only
    # through a live value bias) is no head's rank, so that gain shows only in extra_unidentified
    assert flagged == (case != "qwen2-output-sum-rank1")


def test_structural_redundant_value_bias_equals_jacobian_nullity():
    """Qwen2 with G d_v = 16 > d = 8: a live value bias acts through one d-vector (MATH.md has no row)."""
    hf, attn = _llama(tf.Qwen2Config, 8, 4, 4, 4)
    layer = idinspect.load(hf).layer(0)
    assert structure.redundant_value_bias_dims(layer) == 8
    n = attention_nullity(hf, attn)
    _clean_gap(n)
    assert n.nullity == structure.unidentified_dims(layer) == 4 * (4 + 16) + 8


# --- q/k norms: the numbers at d=16, H=4, G=2, d_k=4, on the tiny checkpoints themselves ------

QK_NORM_TABLE = {  # variant: (params, exact unidentified, nearly unidentified)
    "qwen3": (776, 34, 6),        # G d_v^2 = 32 + d_k/2 = 2 gain trades; H + G per-head scales
    "gemma3-text": (776, 34, 6),  # the same with (1 + w) gains, a sliding and a full layer
    "olmo2": (792, 36, 2),        # 32 + G d_k/2 = 4; one scale per projection
}


@pytest.mark.parametrize("variant", sorted(QK_NORM_TABLE))
def test_qk_norm_table(variant, tiny_dir):
    params, unidentified, near = QK_NORM_TABLE[variant]
    hf = tiny.build(variant)
    exact = idinspect.load(hf).adapter.exact_float64
    for i, layer in enumerate(idinspect.inspect(tiny_dir(variant), spectra=False)["layers"]):
        assert (layer["attention_parameters"], layer["unidentified_parameters"], layer["near_unidentified"]) == (
            params, unidentified, near)
        n = attention_nullity(hf, *tiny.attention_modules(hf, i), seed=i, exact=exact)
        _check_counts(n, layer, (variant, i))


def test_qk_norm_float32_casts_would_fake_broken_symmetries():
    """Negative control: without the family's float64 patch (Gemma 3's RMSNorm forms 1 + w in float32)
    the two exact gain trades look broken at ~1e-8: they fall into the nearly-null band."""
    hf = tiny.build("gemma3-text")
    b = bands(attention_nullity(hf, *tiny.attention_modules(hf, 0)))
    assert (b.exact, b.near) == (32, 8)


def test_llama4_attention_counts():
    """Llama 4: the derived counts of hand-made canonical layers (independent of its adapter, which the
    generic tests prove on the ``llama4-text`` variant) against its real module, with its float32 casts
    (the weightless RMSNorm's x.float(), RoPE's complex64 view) patched to float64 by hand.
    RoPE layer, L2 norm after RoPE: G rd/2 + G d_v^2 exact, H + G nearly null; NoPE layer (no norm,
    temperature-tuned queries): the plain G d_k^2 + G d_v^2."""
    from transformers.models.llama4 import modeling_llama4 as m

    def rotate(xq, xk, freqs):
        freqs = freqs.to(torch.complex128)
        q, k = (torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous()) for x in (xq, xk))
        return (torch.view_as_real(q * freqs[:, :, None, :]).flatten(3),
                torch.view_as_real(k * freqs[:, :, None, :]).flatten(3))

    cfg = tf.Llama4TextConfig(hidden_size=16, intermediate_size=32, intermediate_size_mlp=32, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=4, vocab_size=64,
                              max_position_embeddings=64, use_qk_norm=True, no_rope_layers=[1, 0], num_local_experts=1,
                              attention_chunk_size=64, rms_norm_eps=1e-6)
    hf = _randomised(tf.Llama4ForCausalLM(cfg))
    rope = _canonical(4, 2, 16, 4, rotary_dim=4).replace(qk_norm=QKNorm("l2", "head", 1e-6))
    nope = _canonical(4, 2, 16, 4)
    original = (m.apply_rotary_emb, m.Llama4TextWeightlessRMSNorm.forward)
    m.apply_rotary_emb = rotate
    m.Llama4TextWeightlessRMSNorm.forward = lambda self, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                                            + self.variance_epsilon)
    try:
        for i, layer in enumerate((rope, nope)):
            attn = hf.model.layers[i].self_attn
            assert bool(attn.use_rope) == (layer is rope) and hasattr(attn, "qk_norm") == (layer is rope)
            n = attention_nullity(hf, attn, seed=i)
            summary = {"attention_parameters": layer.parameter_count(),
                       "unidentified_parameters": structure.unidentified_dims(layer),
                       "near_unidentified": structure.near_unidentified_dims(layer)}
            assert (summary["unidentified_parameters"], summary["near_unidentified"]) == ((36, 6) if i == 0 else (64, 0))
            _check_counts(n, summary, ("llama4", i))
    finally:
        m.apply_rotary_emb, m.Llama4TextWeightlessRMSNorm.forward = original
