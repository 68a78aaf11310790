"""Soft-capping (Gemma 2) and attention sinks (gpt-oss): the counts proven on the real HF modules,
and the rule that a non-linear change of the scores makes the key bias live (sinks also the value
bias), seen by the counts, the findings, the gauge and the invariants.

The tiny gemma2/gpt-oss variants (tests/families) run through every generic test; they have full
RoPE, where the key bias is live anyway. The cases here switch the RoPE off (``_rope_off``), so the
key bias's unrotated part is present and the Jacobian says whether it is inert: under soft-capping
or sinks it is not. The singular-value gap stated by ``_clean_gap`` (kept >= 1e-6 s_max, dropped
<= 1e-12 s_max around the 1e-9 cut) holds in every case; measured here: smallest kept 4e-3..2e-2,
largest dropped 1.3e-16..1.7e-16 (the tiny variants through the generic test: 2.6e-6..7e-5 / 1.1e-16..1.7e-16).
"""

from __future__ import annotations

import pytest
import torch
import transformers as tf

import idinspect
from idinspect.analysis import analyze_layer
from idinspect.errors import UnsupportedLayerError
from idinspect.forms import reference_attention
from idinspect.forms.per_head import canonicalize, invariant_errors, structure
from idinspect.forms.per_head.biases import effective_output_bias
from idinspect.layer.attention_layer import Positional
from tests.forms.test_gauge import synthetic_layer
from tests.support.jacobian import RTOL, attention_nullity


def _clean_gap(n) -> None:
    assert n.smallest_kept > 1e3 * RTOL, n
    assert n.largest_dropped < 1e-3 * RTOL, n


def _randomised(cfg, cls):
    cfg._attn_implementation = "eager"          # Gemma 2 and gpt-oss have no sdpa path; exact_softmax keeps float64
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    model = cls(cfg).to(torch.float64).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def _gemma2(softcap: float | None):
    cfg = tf.Gemma2Config(hidden_size=8, num_attention_heads=4, num_key_value_heads=2, head_dim=2, num_hidden_layers=1,
                          intermediate_size=16, vocab_size=32, max_position_embeddings=32, attention_bias=True,
                          attn_logit_softcapping=softcap, query_pre_attn_scalar=2, layer_types=["full_attention"])
    return _randomised(cfg, tf.Gemma2Model)


def _gpt_oss(d: int = 8, H: int = 4, G: int = 2):
    cfg = tf.GptOssConfig(hidden_size=d, num_attention_heads=H, num_key_value_heads=G, head_dim=2, num_hidden_layers=1,
                          intermediate_size=8, vocab_size=32, max_position_embeddings=32, num_local_experts=2,
                          num_experts_per_tok=1, layer_types=["full_attention"],
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    return _randomised(cfg, tf.GptOssModel)


def _rope_off(args, kwargs):
    cos, sin = kwargs["position_embeddings"]
    return args, {**kwargs, "position_embeddings": (torch.ones_like(cos), torch.zeros_like(sin))}


def _case(case: str):
    """(Jacobian nullity of the HF module, idinspect's canonical layer of the same computation,
    the count the shift-invariant rules alone would give)."""
    if case in ("gemma2-softcap-rope-off", "gemma2-no-cap-rope-off"):
        hf = _gemma2(5.0 if case == "gemma2-softcap-rope-off" else None)
        n = attention_nullity(hf, hf.layers[0].self_attn, edit_call=_rope_off)
        layer = idinspect.load(hf).layer(0).replace(positional=Positional("none"))
    elif case == "gpt-oss-rope-off":
        hf = _gpt_oss()
        n = attention_nullity(hf, hf.layers[0].self_attn, edit_call=_rope_off)
        layer = idinspect.load(hf).layer(0).replace(positional=Positional("none"))
    else:                                            # gpt-oss-no-output-bias: G d_v = 8 > d = 6
        hf = _gpt_oss(d=6, H=4, G=4)
        attn = hf.layers[0].self_attn
        layer = idinspect.load(hf).layer(0).replace(b_O=None)
        attn.o_proj.bias = None
        n = attention_nullity(hf, attn)
    return n, layer, structure.unidentified_dims(layer.replace(logit_softcap=None, sinks=None))


#: case: (parameters, unidentified: Jacobian nullity = idinspect's count, count the shift-invariant rules give)
CASES = {
    # d=8, H=4, G=2, d_k=2, all biases, no RoPE: G d_k^2 + G d_v^2 + G d_v (b_V folds: rows sum to one); b_K is live
    "gemma2-softcap-rope-off": (216, 20, 24),
    # the control on the same module: without the cap the key bias is inert again
    "gemma2-no-cap-rope-off": (216, 24, 24),
    # + 4 sinks: G d_k^2 + G d_v^2; neither b_K nor b_V is inert
    "gpt-oss-rope-off": (220, 16, 24),
    # d=6, H=G=4, d_k=2, RoPE, no b_O: G rd + G d_v^2; without sinks G d_v - d = 2 dims of b_V would be redundant
    "gpt-oss-no-output-bias": (220, 24, 26),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_jacobian_nullity_equals_count(case):
    params, unidentified, shift_invariant_count = CASES[case]
    n, layer, naive = _case(case)
    _clean_gap(n)
    assert (n.parameters, n.nullity) == (params, unidentified), n
    structure.require_modelled(layer)
    assert layer.parameter_count() == params
    assert structure.unidentified_dims(layer) == unidentified
    assert naive == shift_invariant_count


def test_reference_attention_equals_hf_module_without_rope():
    """The reference over the canonical form (soft-cap, sinks, every bias live) is the HF module's computation."""
    for hf in (_gemma2(5.0), _gpt_oss()):
        attn = hf.layers[0].self_attn
        from tests.support.jacobian import capture_call, exact_softmax
        args, kwargs = _rope_off(*capture_call(hf, attn, torch.randint(2, 32, (2, 7), generator=torch.Generator().manual_seed(1))))
        x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        kwargs = {**kwargs, "hidden_states": x} if "hidden_states" in kwargs else kwargs
        args = (x, *args[1:]) if args else args
        with torch.no_grad(), exact_softmax():
            y = attn(*args, **kwargs)[0]
        layer = idinspect.load(hf).layer(0).replace(positional=Positional("none"))
        assert float((reference_attention(layer, x) - y).abs().max() / y.abs().max()) <= 1e-12


# --- the live biases in findings, gauge and invariants ------------------------------------------

def _out(layer, seed: int = 3):
    x = torch.randn(2, 7, layer.d_model, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return reference_attention(layer, x)


@pytest.mark.parametrize("kind", ["softcap", "sinks"])
def test_key_bias_is_live(kind):
    layer = synthetic_layer(**({"softcap": 5.0} if kind == "softcap" else {"sinks": True}))
    plain = synthetic_layer()
    assert structure.noop_key_bias_dims(plain) == 12 and structure.noop_key_bias_dims(layer) == 0
    # the move the shift-invariant softmax allows (b_K -> b_K + c) changes this layer's function ...
    shifted = layer.replace(b_K=layer.b_K + 0.5)
    assert float((_out(shifted) - _out(layer)).norm() / _out(layer).norm()) > 1e-3
    assert float((_out(plain.replace(b_K=plain.b_K + 0.5)) - _out(plain)).norm()) <= 1e-12 * float(_out(plain).norm())
    # ... so the invariants see it, the gauge-fixed form keeps b_K, and no noop-bias finding is made
    assert invariant_errors(layer, shifted)["W_QK"].error > 1e-2
    fixed, report = canonicalize(layer)
    assert report.zeroed_key_bias_dims == 0 and torch.count_nonzero(fixed.b_K) == fixed.b_K.numel()
    _, findings = analyze_layer(layer)
    assert "noop-bias" not in {f["rule"] for f in findings}
    assert "noop-bias" in {f["rule"] for f in analyze_layer(plain)[1]}


def test_value_bias_is_live_under_sinks():
    layer = synthetic_layer(sinks=True)
    assert not structure.value_bias_absorbable(layer) and structure.absorbable_value_bias_dims(layer) == 0
    folded = layer.replace(b_O=effective_output_bias(layer), b_V=torch.zeros_like(layer.b_V))  # the fold without sinks
    assert float((_out(folded) - _out(layer)).norm() / _out(layer).norm()) > 1e-3
    errors = invariant_errors(layer, folded)
    assert errors["W_OV"].error > 1e-2 and errors["output_bias"].error > 1e-2
    fixed, report = canonicalize(layer)
    assert not report.folded_value_bias and torch.count_nonzero(fixed.b_V) == fixed.b_V.numel()
    assert "absorbable-bias" not in {f["rule"] for f in analyze_layer(layer)[1]}


def test_sinks_are_an_invariant():
    layer = synthetic_layer(sinks=True)
    moved = layer.replace(sinks=layer.sinks + 0.25)
    assert invariant_errors(layer, moved)["sinks"].error > 1e-2
    assert invariant_errors(layer, layer)["sinks"].error == 0.0
    with pytest.raises(ValueError, match="sinks differ"):
        invariant_errors(layer, layer.replace(sinks=None))
    with pytest.raises(ValueError, match="soft-capping"):
        invariant_errors(layer, layer.replace(logit_softcap=30.0))


def test_position_biases_with_softcap_or_sinks_are_refused():
    layer = synthetic_layer(sinks=True).replace(positional=Positional("alibi", alibi_slopes=torch.ones(4)))
    with pytest.raises(UnsupportedLayerError, match="attention sinks with alibi"):
        analyze_layer(layer)


# --- degenerate weights: the extra freedom with live biases, against the oracle ------------------

def _low_rank_head(lin, head: int, dk: int, g: torch.Generator) -> None:
    """Rows of ``head`` in ``lin`` of rank d_k - 1 (its bias left as it is: live, outside their span)."""
    d = lin.weight.shape[1]
    A = torch.randn(dk, dk - 1, generator=g, dtype=torch.float64)
    lin.weight[head * dk:(head + 1) * dk, :] = A @ torch.randn(dk - 1, d, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("case", ["gpt-oss-WV-rank1", "gemma2-softcap-rope-off-WK-rank1"])
def test_extra_freedom_of_degenerate_weights_with_live_biases(case):
    """A rank-deficient W_V (W_K) whose live bias row keeps [W_V; b_V] ([W_K; b_K]) full rank adds no
    freedom; the shift-invariant rules would have dropped the bias row and counted extra freedom."""
    g = torch.Generator().manual_seed(3)
    if case.startswith("gpt-oss"):
        hf, role, edit = _gpt_oss(), "v_proj", None
    else:
        hf, role, edit = _gemma2(5.0), "k_proj", _rope_off
    attn = hf.layers[0].self_attn
    with torch.no_grad():
        _low_rank_head(getattr(attn, role), 0, 2, g)
    layer = idinspect.load(hf).layer(0)
    if edit is not None:
        layer = layer.replace(positional=Positional("none"))
    counts, _ = analyze_layer(layer)
    n = attention_nullity(hf, attn, edit_call=edit)
    _clean_gap(n)
    assert counts["extra_unidentified"] == 0
    assert n.nullity == counts["unidentified_parameters"] == counts["unidentified_with_weights"]
    plain, _ = analyze_layer(layer.replace(logit_softcap=None, sinks=None))
    assert plain["extra_unidentified"] > 0          # what the bias row prevents


def test_bidirectional_gemma_is_refused_by_setting(tmp_path):
    cfg = tf.Gemma2Config(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4, num_hidden_layers=1,
                          intermediate_size=16, vocab_size=32, use_bidirectional_attention=True)
    tf.Gemma2Model(cfg).save_pretrained(tmp_path)
    with pytest.raises(idinspect.errors.IdinspectError, match="use_bidirectional_attention"):
        idinspect.load(tmp_path)
