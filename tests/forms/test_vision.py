"""Vision families beyond the generic tests: ViT under both tensor naming schemes, CLIP/SigLIP towers
reported per stack in every format, and SigLIP's attention-pooling head (left out of the counts by
name; its own count derived in docs/mathematics.md and proven here on the real HF module)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf
from torch.func import functional_call

import idinspect
from tests.contract.test_export import outputs, read_all, rel
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.jacobian import single_thread


@pytest.fixture(scope="module")
def renamed_vit(tmp_path_factory):
    """(ViT saved as save_pretrained writes it, the same model saved under transformers 5's names)."""
    hf = tiny.build("vit")
    original, renamed = tmp_path_factory.mktemp("vit-original"), tmp_path_factory.mktemp("vit-renamed")
    hf.save_pretrained(original)
    hf.save_pretrained(renamed, save_original_format=False)
    return original, renamed


def test_vit_reads_both_naming_schemes_alike(renamed_vit):
    original, renamed = (idinspect.load(d) for d in renamed_vit)
    assert "vit.encoder.layer.0.attention.attention.query.weight" in original.reader
    assert "vit.layers.0.attention.q_proj.weight" in renamed.reader
    assert "vit.encoder.layer.0.attention.attention.query.weight" not in renamed.reader
    assert renamed.adapter.attention_keys(1) == [f"vit.layers.1.attention.{p}_proj.{w}" for p in "qkvo"
                                                 for w in ("weight", "bias")]
    for a, b in zip(original.layers(), renamed.layers()):
        for role, t in a.tensors().items():
            assert torch.equal(t, getattr(b, role)), role
    for i in range(renamed.num_layers):                      # write-back under the renamed names, bit-exact
        for name, t in renamed.adapter.write_layer(renamed.layer(i)).items():
            assert torch.equal(t, renamed.reader.get(name)), name
    assert idinspect.inspect(original)["totals"] == idinspect.inspect(renamed)["totals"]


def test_renamed_vit_exports_through_stock_transformers(renamed_vit, tmp_path):
    _, renamed = renamed_vit
    result = run_cli("export", renamed, tmp_path / "out")
    assert result.code == 0, result.stderr
    ids = torch.zeros(2, 1, dtype=torch.long)
    assert rel(outputs(renamed, ids), outputs(tmp_path / "out", ids)) <= 1e-12
    before, after = read_all(renamed), read_all(tmp_path / "out")
    assert sorted(before) == sorted(after)                    # the names stay as they were
    assert not torch.equal(before["vit.layers.0.attention.q_proj.weight"], after["vit.layers.0.attention.q_proj.weight"])


def test_towers_are_reported_per_stack_in_every_format(tiny_dir, tmp_path):
    src = tiny_dir("clip")
    res = run_cli(src, "--format", "json")
    assert res.code == 0, res.stderr
    result = json.loads(res.stdout)
    model, totals = result["model"], result["totals"]
    assert model["stacks"] == ["text", "vision"]
    assert model["stack_sizes"] == {"text": {"layers": 2, "hidden_size": 16, "heads": 4, "kv_heads": 4, "head_dim": 4},
                                    "vision": {"layers": 1, "hidden_size": 8, "heads": 2, "kv_heads": 2, "head_dim": 4}}
    assert [x["causal"] for x in result["layers"]] == [True, True, False]      # CLIP's text tower is causal
    for name in ("text", "vision"):
        rows = [x for x in result["layers"] if x["stack"] == name]
        for key in ("attention_parameters", "unidentified_parameters"):
            assert totals["stacks"][name][key] == sum(x[key] for x in rows)
    assert sum(s["unidentified_parameters"] for s in totals["stacks"].values()) == totals["unidentified_parameters"]
    text = run_cli(src)
    assert text.code == 0 and "sizes per stack" in text.stdout
    assert "text: H=4, G=4, d_k=4, d=16, 2 blocks" in text.stdout and "vision: H=2, G=2, d_k=4, d=8, 1 block;" in text.stdout
    res = run_cli(src, "--html", tmp_path / "r.html")
    assert res.code == 0, res.stderr
    html = (tmp_path / "r.html").read_text()
    assert "Per stack" in html and "vision: H=2, G=2, d_k=4, d=8, 1 block;" in html
    assert "causal" not in json.dumps(totals)


def test_siglip_pooling_head_is_named_as_not_analysed(tiny_dir, tmp_path):
    src = tiny_dir("siglip")
    res = run_cli(src, "--format", "json")
    assert res.code == 0, res.stderr
    result = json.loads(res.stdout)
    [head] = result["model"]["not_analysed"]
    assert head["module"] == "vision_model.head"
    assert head["tensors"] == ["vision_model.head.attention.in_proj_bias", "vision_model.head.attention.in_proj_weight",
                               "vision_model.head.attention.out_proj.bias", "vision_model.head.attention.out_proj.weight",
                               "vision_model.head.probe"]
    assert head["parameters"] == 4 * 8 * 8 + 4 * 8 + 8
    assert [x["causal"] for x in result["layers"]] == [False, False, False]   # SigLIP's text tower is not causal
    assert "Not analysed" in run_cli(src).stdout
    assert "not_analysed" not in json.loads(run_cli(tiny_dir("clip"), "--format", "json").stdout)["model"]


def pooling_head_unidentified(H: int, d: int) -> int:
    """docs/mathematics.md, "Attention pooling with a learned query": per head 2k(d + 1) - d on the
    QK side (only u_h = W_K^h q_h reaches the output) and k^2 + k on the VO side, k = d / H."""
    k = d // H
    return H * (2 * k * (d + 1) - d + k * k + k)


@pytest.mark.parametrize("d, H", [(8, 2), (6, 3), (8, 4)])
def test_pooling_head_nullity_equals_the_derived_count(d, H):
    """The Jacobian of SigLIP's real head attention (nn.MultiheadAttention, query = the learned probe,
    keys and values N(0, 1) patches) with respect to its four parameters has the derived nullity."""
    config = tf.SiglipVisionConfig(hidden_size=d, num_attention_heads=H, num_hidden_layers=1, intermediate_size=8,
                                   image_size=8, patch_size=4)
    head = tf.models.siglip.modeling_siglip.SiglipMultiheadAttentionPoolingHead(config).double()
    g = torch.Generator().manual_seed(d)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    names, values = zip(*((n, p.detach()) for n, p in head.attention.named_parameters()))
    P = sum(v.numel() for v in values)
    X = torch.randn(-(-3 * P // (2 * d)), 5, d, generator=g, dtype=torch.float64)   # 1.5 P output rows
    probe = head.probe.detach().expand(X.shape[0], 1, d)

    def output(*theta):
        return functional_call(head.attention, dict(zip(names, theta)), (probe, X, X))[0].reshape(-1)

    with single_thread():
        J = torch.autograd.functional.jacobian(output, values, vectorize=True)
        s = torch.linalg.svdvals(torch.cat([j.reshape(j.shape[0], -1) for j in J], dim=1))
    rank = int((s > 1e-9 * s[0]).sum())
    assert s[rank - 1] / s[0] > 1e-4 and (rank == s.numel() or s[rank] / s[0] < 1e-13)
    assert P - rank == pooling_head_unidentified(H, d)
