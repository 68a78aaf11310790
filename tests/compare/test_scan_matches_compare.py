"""``scan`` is ``compare`` of each entry (issue 36): the same verdict, lineage statistic and p-value as
``compare ENTRY MODEL`` (and the same similarity where the scan compares in full), for full and compact
fingerprints of the model itself, a perturbed copy, independent models, a pruned copy (another depth)
and a copy with non-finite heads; and the scan's prepared distances (:class:`idinspect.compare.nearest.Target`)
are ``distance_matrix``'s bit for bit. A Llama of 12 layers x 16 heads of 4 (192 heads)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as tf

from idinspect.compare import compare_invariants, invariants_of, read_fingerprint
from idinspect.compare.comparison import truncated
from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json
from idinspect.compare.invariants import head_vectors
from idinspect.compare.matching import distance_matrix
from idinspect.compare.nearest import Target
from idinspect.compare.scan import read_database, scan
from idinspect.errors import IdinspectError

CONFIG = {"hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 12, "num_attention_heads": 16,
          "num_key_value_heads": 16, "head_dim": 4, "vocab_size": 64, "max_position_embeddings": 32}


def _llama(seed: int, layers: int = 12):
    torch.manual_seed(seed)
    return tf.LlamaForCausalLM(tf.LlamaConfig(**{**CONFIG, "num_hidden_layers": layers})).eval()


def _variants(A) -> dict:
    """name -> state dict of a model of A's config (or, for ``pruned``, a 10-layer model)."""
    sd = A.state_dict()
    gen = torch.Generator().manual_seed(3)
    noisy = {k: v + 0.02 * v.abs().mean() * torch.randn(v.shape, generator=gen) for k, v in sd.items()}
    broken = {k: v.clone() for k, v in sd.items()}
    broken["model.layers.2.self_attn.q_proj.weight"][:4] = float("nan")        # head 0 of layer 2
    keep = [0, 1, 2, 4, 5, 6, 8, 9, 10, 11]
    pruned = {k: v for k, v in sd.items() if not k.startswith("model.layers.")}
    for k, v in sd.items():
        if k.startswith("model.layers."):
            i, rest = k[len("model.layers."):].split(".", 1)
            if int(i) in keep:
                pruned[f"model.layers.{keep.index(int(i))}.{rest}"] = v
    return {"self": sd, "noisy": noisy, "broken": broken, "pruned": pruned,
            "other-1": _llama(1).state_dict(), "other-2": _llama(2).state_dict()}


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """(the model's invariants, a folder of full and compact fingerprints of its relatives)."""
    root = tmp_path_factory.mktemp("scan-vs-compare")
    folder = root / "db"
    folder.mkdir()
    A = _llama(0)
    for name, sd in _variants(A).items():
        m = _llama(0, 10 if name == "pruned" else 12)
        m.load_state_dict(sd)
        m.save_pretrained(root / name)
        inv = invariants_of(str(root / name))
        (folder / f"{name}.json").write_text(fingerprint_json(inv))
        (folder / f"{name}-compact.json").write_text(fingerprint_json(inv, compact=COMPACT_VALUES))
    return invariants_of(str(root / "self")), folder


def test_scan_rows_are_compare_of_each_entry(database):
    model, folder = database
    rows = scan(model, folder)
    assert len(rows) == 12
    verdicts = {}
    for row in rows:
        entry = read_fingerprint(folder / row["entry"])
        r = compare_invariants(entry, model, permutations=0)
        verdicts[row["entry"]] = row["verdict"]
        assert row["verdict"] == r.verdict, row
        assert row["p_value"] == r.lineage.p_value and row["statistic"] == r.lineage.statistic, row
        assert row["heads"] == r.lineage.heads
        if row["compared"] == "in full":
            assert row["similarity"] == r.similarity
    for form in ("", "-compact"):
        assert verdicts[f"self{form}.json"] == "same-function"
        assert verdicts[f"noisy{form}.json"] == verdicts[f"pruned{form}.json"] == "same-lineage"
        assert verdicts[f"broken{form}.json"] in ("same-lineage", "same-function")
        assert verdicts[f"other-1{form}.json"] == verdicts[f"other-2{form}.json"] == "unrelated"
    assert [r["verdict"] for r in rows] == sorted((r["verdict"] for r in rows),
                                                  key=("same-function", "same-lineage", "unrelated").index)


def test_prepared_distances_are_compares_bit_for_bit(database):
    model, folder = database
    fitted = 0
    for name, entry in read_database(folder):
        m = model if entry.compact_values is None else truncated(model, entry.compact_values)
        target = Target(m.layers)
        if "pruned" in name:
            assert not target.fits(entry.layers)             # another depth: never the prepared path
            continue
        assert target.fits(entry.layers)
        fitted += 1
        D = target.distances(entry.layers)
        assert torch.equal(D, distance_matrix(head_vectors(entry.layers), head_vectors(m.layers), exact=False)), name
        if "broken" in name:                                 # the non-finite head's row: distance 1 (NaN -> 1)
            assert not bool(entry.layers[2].finite[0])
    assert fitted == 10


def test_a_bad_figure_in_a_later_layer_is_named(database, tmp_path):
    """The figures are checked once over all layers stacked; a failure still names its layer and head."""
    _, folder = database
    doc = json.loads((folder / "other-1-compact.json").read_text())
    import base64

    import numpy as np

    from idinspect.compare.fingerprint_check import canonical_digest

    radius = np.frombuffer(base64.b64decode(doc["layers"][7]["radius_qk"]), dtype="<f4").copy()
    radius[5] *= 1e6                                              # far above the range float32 allows
    doc["layers"][7]["radius_qk"] = base64.b64encode(radius.tobytes()).decode("ascii")
    doc["integrity"] = canonical_digest(doc)
    (tmp_path / "db.jsonl").write_text(json.dumps(doc) + "\n")
    with pytest.raises(IdinspectError, match=r"db\.jsonl line 1: layer 7 head 5: radius_qk .* above the largest"):
        list(read_database(tmp_path / "db.jsonl"))


def test_distance_matrix_in_row_blocks_is_the_whole_formula_bit_for_bit(monkeypatch):
    """:func:`distance_matrix` forms its rows a block at a time (memory): with blocks smaller than the
    row count, the same float64 D as the whole-matrix formula, both modes, zero rows and NaN included."""
    import idinspect.compare.matching as matching

    g = torch.Generator().manual_seed(3)
    x = {"qk": torch.rand(37, 6, generator=g, dtype=torch.float64), "ov": torch.rand(37, 4, generator=g, dtype=torch.float64)}
    y = {"qk": torch.rand(29, 6, generator=g, dtype=torch.float64), "ov": torch.rand(29, 4, generator=g, dtype=torch.float64)}
    x["qk"][5] = 0.0
    y["qk"][7] = 0.0
    x["ov"][9, 2] = float("nan")

    def whole(exact: bool) -> torch.Tensor:
        total = torch.zeros(37, 29, dtype=torch.float64)
        for k in ("qk", "ov"):
            a, b = x[k], y[k]
            num = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist" if exact else "use_mm_for_euclid_dist")
            den = torch.sqrt((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :])
            d = torch.where(den > 0, num / den.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(num))
            total += torch.nan_to_num(d.clamp(0.0, 1.0), nan=1.0)
        return total / 2

    monkeypatch.setattr(matching, "ROW_BLOCK", 8)
    for exact in (True, False):
        assert torch.equal(matching.distance_matrix(x, y, exact=exact), whole(exact))
