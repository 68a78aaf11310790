"""The per-variant contract of tests/forms/test_findings.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""


import pytest
import torch

import idinspect
from tests.forms.test_findings import _by_rule  # noqa: F401
from tests.support import tiny


@pytest.mark.parametrize("variant, noop, absorbable", [
    ("llama-gqa", False, False),     # no biases at all
    ("llama-bias", False, True),     # rotated key bias is live; o_proj bias takes the value bias
    ("qwen2", False, False),         # no o_proj bias: the value bias is live
])
def test_rope_bias_findings(variant, noop, absorbable, tiny_dir):
    result = idinspect.inspect(tiny_dir(variant))
    assert bool(_by_rule(result, "noop-bias")) == noop
    assert bool(_by_rule(result, "absorbable-bias")) == absorbable
    assert not _by_rule(result, "rank-deficient-head")


@pytest.mark.parametrize("variant", ["bert", "llama-gqa", "llama-head-dim"])
def test_spectra_are_the_singular_values_of_the_explicit_products(variant, tiny_dir, tmp_path):
    """Gram/Cholesky heads and QR-fallback heads (one made ill-conditioned) both match torch's SVD."""
    from idinspect.forms.per_head.spectra import MAX_FACTOR_CONDITION, head_spectra

    layer = tiny.float64_layer(idinspect.load(tiny_dir(variant)).layer(0))
    W_Q = layer.W_Q.clone()
    W_Q[0, :, 0] *= 1e4                          # cond(W_Q^0) ~ 1e4 > 1e3: takes the QR path
    assert torch.linalg.cond(W_Q[0]) > MAX_FACTOR_CONDITION
    layer = layer.replace(W_Q=W_Q)
    s = head_spectra(layer)
    for h in range(layer.n_heads):
        g = layer.kv_head(h)
        qk = torch.linalg.svdvals(layer.W_Q[h] @ layer.W_K[g].T)[:layer.d_k]
        ov = torch.linalg.svdvals(layer.W_V[g] @ layer.W_O[h])[:layer.d_v]
        assert torch.allclose(s.qk[h], qk, rtol=1e-9, atol=1e-12 * qk[0])
        assert torch.allclose(s.ov[h], ov, rtol=1e-9, atol=1e-12 * ov[0])
        if layer.positional.kind == "rope":
            for p, (a, b) in enumerate(layer.positional.rotary.plane_columns()):
                plane = torch.linalg.svdvals(layer.W_Q[h][:, [a, b]] @ layer.W_K[g][:, [a, b]].T)[:2]
                assert torch.allclose(s.qk_planes[h, p], plane, rtol=1e-9, atol=1e-12 * plane[0])


@pytest.mark.parametrize("variant", ["gpt2", "bert"])
def test_findings_list_the_stored_tensors_they_concern(variant, tiny_dir):
    """``tensors`` holds stored names (no slices, each once) that the checkpoint really has;
    ``tensor`` is the same place for people, with the fused tensor's slice."""
    path = tiny_dir(variant)
    result = idinspect.inspect(path)
    assert result["findings"]
    with idinspect.load(path) as model:
        keys = set(model.reader.keys())
    for f in result["findings"]:
        assert f["tensors"] and len(set(f["tensors"])) == len(f["tensors"])
        assert set(f["tensors"]) <= keys, f["tensors"]
        assert all(name in f["tensor"] for name in f["tensors"])
    if variant == "gpt2":
        noop = _by_rule(result, "noop-bias")[0]
        assert noop["tensor"].endswith("]") and noop["tensors"] == [noop["tensor"].split("[")[0]]
