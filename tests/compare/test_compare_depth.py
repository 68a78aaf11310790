"""Depth and width changes (issue 36): B drops layers of A (pruning), repeats a range of them (depth
up-scaling) or drops heads; compare aligns B's layers with A's and says which come from which, with
the votes per layer, instead of pairing layers by index. A Llama of 12 layers x 16 heads (192 heads:
enough for the union bound over all 12^L_B alignments to resolve p < 1e-6)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers as tf
from idinspect.reports.compare_html import render_compare_html
from idinspect.reports.compare_text import render_compare_text

from idinspect.compare import compare, compare_invariants, invariants_of

CONFIG = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 12, "num_attention_heads": 16,
          "num_key_value_heads": 16, "head_dim": 4, "vocab_size": 64, "max_position_embeddings": 32}


def _llama(seed: int, layers: int = 12):
    torch.manual_seed(seed)
    return tf.LlamaForCausalLM(tf.LlamaConfig(**{**CONFIG, "num_hidden_layers": layers})).eval()


def _with_layers(model, keep: list[int]):
    """A copy of ``model`` whose layer i is ``model``'s layer keep[i]."""
    out = _llama(0, len(keep))
    sd = model.state_dict()
    new = {}
    for k in out.state_dict():
        if k.startswith("model.layers."):
            i, rest = k[len("model.layers."):].split(".", 1)
            new[k] = sd[f"model.layers.{keep[int(i)]}.{rest}"]
        else:
            new[k] = sd[k]
    out.load_state_dict(new)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("depth")
    A = _llama(0)
    paths = {"A": root / "A", "pruned": root / "pruned", "upscaled": root / "upscaled", "other": root / "other"}
    A.save_pretrained(paths["A"])
    _with_layers(A, [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]).save_pretrained(paths["pruned"])
    _with_layers(A, list(range(8)) + list(range(4, 12))).save_pretrained(paths["upscaled"])
    _llama(5, 10).save_pretrained(paths["other"])
    return paths


def test_pruned_layers_are_aligned(models):
    r = compare(models["A"], models["pruned"])
    assert r.verdict == "same-lineage" and r.lineage.p_value < 1e-6
    assert r.alignment["b_from_a"] == [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]
    assert r.alignment["a_layers_unused"] == [3, 7] and r.alignment["a_layers_repeated"] == []
    assert all(L["votes"] == 16 and L["similarity"] > 0.999999 for L in r.layers)
    text = render_compare_text(r.to_dict())
    assert "B's layers come from A's layers [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]" in text
    html = render_compare_html(r.to_dict())
    assert "come from A&#x27;s layers [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]" in html or \
        "come from A's layers [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]" in html
    assert "from A layer 4" in html                          # B layer 3's row names its source


def test_upscaled_layers_are_aligned(models):
    r = compare(models["A"], models["upscaled"])
    assert r.verdict == "same-lineage" and r.lineage.p_value < 1e-6
    assert r.alignment["b_from_a"] == list(range(8)) + list(range(4, 12))
    assert r.alignment["a_layers_repeated"] == [4, 5, 6, 7]
    # the reverse direction: A's 12 layers found inside the up-scaled model
    back = compare(models["upscaled"], models["A"])
    assert back.verdict == "same-lineage"
    assert [back.alignment["b_from_a"][i] in (i, i + 4) for i in range(4, 8)] == [True] * 4


def test_unrelated_model_of_another_depth_is_unrelated(models):
    r = compare(models["A"], models["other"])
    assert r.verdict == "unrelated" and r.lineage.p_value > 1e-3
    assert r.alignment is not None                        # still aligned, with its (weak) votes shown
    assert max(L["votes"] for L in r.layers) < 16


def test_dropped_heads_are_paired(models):
    """Heads 3, 7 and 11 of layer 5 dropped (at equal depth): every kept head is paired with its source."""
    A = invariants_of(str(models["A"]))
    keep = torch.tensor([h for h in range(16) if h not in (3, 7, 11)])
    L = A.layers[5]
    small = dataclasses.replace(L, qk=L.qk[keep], ov=L.ov[keep], planes=L.planes[keep], radius_qk=L.radius_qk[keep],
                                radius_ov=L.radius_ov[keep], radius_planes=L.radius_planes[keep], finite=L.finite[keep],
                                structure={**L.structure, "heads": 13, "kv_heads": 13})
    B = dataclasses.replace(A, layers=[*A.layers[:5], small, *A.layers[6:]])
    r = compare_invariants(A, B)
    assert r.verdict == "same-lineage"
    pairs = {(p, q) for p, q, _ in r.layers[5]["pairs"]}
    assert pairs == {(int(h), i) for i, h in enumerate(keep)}
    # pruned layers and dropped heads at once
    P = invariants_of(str(models["pruned"]))
    B2 = dataclasses.replace(P, layers=[*P.layers[:4], dataclasses.replace(small, index=4), *P.layers[5:]])
    r2 = compare_invariants(A, B2)
    assert r2.verdict == "same-lineage" and r2.alignment["b_from_a"][4] == 5
    assert {(p, q) for p, q, _ in r2.layers[4]["pairs"]} == pairs
