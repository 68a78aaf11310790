"""The per-variant contract of tests/export/test_export_whole_model.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/export/."""

from __future__ import annotations

import pytest
import torch

from tests.export.test_export_whole_model import (  # noqa: F401
    PRE_LN_VARIANTS,
    VARIANTS,
    _model,
    _round_trip,
)
from tests.support.whole_disguise import disguise, disguise_pre_ln
from tests.support.whole_jacobian import (
    model_class,
    randomised,
)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_disguised_copy_exports_to_the_same_weights_and_function(name, tmp_path):
    out, record = _round_trip(_model(name), disguise, 9, tmp_path, name)
    tied = VARIANTS[name][2]["tie_word_embeddings"]
    for key, t in out.items():
        if key.endswith("layernorm.weight") or (key == "model.norm.weight" and not tied):
            assert torch.equal(t, torch.ones_like(t)), key
    assert record["head"] == ("tied" if tied else "untied")
    assert ("residual_rotation" in {f["symmetry"] for f in record["fixed"]}) == (not tied)
    if not tied:        # the representative basis: the embedding's columns orthogonal, norms descending
        e = out["model.embed_tokens.weight"]
        gram = e.T @ e
        off = gram - torch.diag(torch.diagonal(gram))
        assert float(off.abs().max()) < 1e-12 * float(gram.abs().max())
        assert torch.all(torch.diagonal(gram)[:-1] >= torch.diagonal(gram)[1:])
        assert record["unique"] is True


@pytest.mark.parametrize("name", list(PRE_LN_VARIANTS))
def test_pre_layer_norm_disguised_copy_exports_to_the_same_weights(name, tmp_path):
    config_cls, cls, kw = PRE_LN_VARIANTS[name]
    model = randomised(model_class(cls), model_class(config_cls)(**kw))
    out, record = _round_trip(model, disguise_pre_ln, 12, tmp_path, name)
    for key, t in out.items():
        if ".ln_1." in key or ".ln_2." in key:
            assert torch.equal(t, torch.ones_like(t) if key.endswith("weight") else torch.zeros_like(t)), key
    assert float(out["transformer.wpe.weight"].sum(1).abs().max()) < 1e-12
    assert ("mlp_scalings" in {f["symmetry"] for f in record["fixed"]}) == name.endswith("relu")
    assert {u["symmetry"] for u in record["unfixed"]} == {"global_scale", "log_prob_head_shift", "tie_commutant"}
