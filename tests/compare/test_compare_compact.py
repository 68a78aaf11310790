"""Compact fingerprints (``fingerprint --compact``) and ``idinspect scan MODEL DB`` (issue 36).

The size bound is checked at the Llama-3.2-1B attention shape (16 layers x 32 heads of 64, 8 kv heads,
RoPE with 32 planes) on synthetic invariants (the size depends on the shape only); the verdicts of
the compact form are checked against the full form's on the trained small Llama's disguised,
fine-tuned, quantised and independent relatives; scan must rank the right fingerprint first among
many, and a bad database entry is a one-line error naming it."""

from __future__ import annotations

import json
import math

import pytest
import torch

from idinspect.compare import (
    compare_invariants,
    fingerprint_dict,
    invariants_of,
    read_fingerprint,
)
from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json
from idinspect.compare.invariants import LayerInvariants, ModelInvariants
from idinspect.compare.scan import read_database, scan
from idinspect.errors import IdinspectError
from tests.support import compare_models as cm
from tests.support.cli import run_cli


def _one_b_shape(seed: int = 0) -> ModelInvariants:
    gen = torch.Generator().manual_seed(seed)
    H, dk, P, u = 32, 64, 32, 2.0 ** -8
    inv_freq = [500000.0 ** (-2 * i / dk) for i in range(P)]
    layers = []
    for i in range(16):
        def spectrum(*shape):
            return torch.rand(*shape, generator=gen, dtype=torch.float64).sort(dim=-1, descending=True).values + 0.01
        qk, ov, planes = spectrum(H, dk), spectrum(H, dk), spectrum(H, P, 2)
        structure = {"heads": H, "kv_heads": 8, "d_model": 2048, "d_k": dk, "d_v": dk, "positional": "rope",
                     "rotary_dim": dk, "scale": 0.125, "causal": True, "pairing": "half", "inv_freq": inv_freq,
                     "attention_factor": 1.0}
        radius = lambda s: 4 * u * torch.linalg.vector_norm(s, dim=-1)
        layers.append(LayerInvariants(i, qk, ov, planes, radius(qk), radius(ov), radius(planes),
                                      torch.ones(H, dtype=torch.bool), structure))
    return ModelInvariants(source="synthetic 1B shape", model={}, dtype="bfloat16", unit_roundoff=2.0 ** -8,
                           gains_folded=True, layers=layers)


def test_compact_fingerprint_fits_64kb_at_the_1b_shape(tmp_path):
    inv = _one_b_shape()
    full, compact = fingerprint_json(inv), fingerprint_json(inv, compact=COMPACT_VALUES)
    assert len(compact.encode()) <= 64 * 1024 < len(full.encode())
    path = tmp_path / "c.json"
    path.write_text(compact)
    back = read_fingerprint(path)                      # passes every check of a fingerprint file
    assert back.compact_values == COMPACT_VALUES
    assert back.layers[3].qk.shape == (32, COMPACT_VALUES) and back.layers[3].planes is None
    assert torch.allclose(back.layers[3].qk, inv.layers[3].qk[:, :COMPACT_VALUES], rtol=1e-6)
    # the compact radius cap uses the values left out (<= the smallest kept), never the kept ones alone
    assert bool((back.layers[3].radius_qk >= inv.layers[3].radius_qk.to(torch.float32).to(torch.float64) * (1 - 1e-6)).all())


def test_compact_rejects_planes_and_bad_values(tmp_path):
    fp = fingerprint_dict(_one_b_shape(), compact=COMPACT_VALUES)
    fp["compact"]["values"] = 9                        # shapes no longer match what the layers hold
    from idinspect.compare.fingerprint_check import canonical_digest

    fp["integrity"] = canonical_digest(fp)
    (tmp_path / "bad.json").write_text(json.dumps(fp))
    with pytest.raises(IdinspectError, match="base64 characters"):
        read_fingerprint(tmp_path / "bad.json")


@pytest.fixture(scope="module")
def llamas(tmp_path_factory):
    return cm.llama_set(tmp_path_factory.mktemp("compact"))


def test_compact_verdicts_agree_with_full(llamas, tmp_path):
    A = invariants_of(str(llamas["A"]))
    (tmp_path / "full.json").write_text(fingerprint_json(A))
    (tmp_path / "compact.json").write_text(fingerprint_json(A, compact=COMPACT_VALUES))
    full, compact = read_fingerprint(tmp_path / "full.json"), read_fingerprint(tmp_path / "compact.json")
    expected = {"D": "same-function", "F": "same-lineage", "Q": "same-lineage", "C": "unrelated"}
    for key, verdict in expected.items():
        other = invariants_of(str(llamas[key]))
        rf, rc = compare_invariants(full, other), compare_invariants(compact, other)
        assert rf.verdict == rc.verdict == verdict, (key, rf.verdict, rc.verdict)
        assert rc.same_function["compact_values"] == COMPACT_VALUES
        if verdict == "same-lineage":
            assert rc.lineage.p_value < 1e-6


@pytest.fixture(scope="module")
def database(llamas, tmp_path_factory):
    """A folder and a JSONL file of 40 fingerprints: 39 independently initialised small Llamas and A's."""
    root = tmp_path_factory.mktemp("db")
    folder = root / "db"
    folder.mkdir()
    lines = []
    with cm.one_thread():
        for s in range(39):
            m = cm.small_llama(100 + s)
            m.save_pretrained(root / "m")
            text = fingerprint_json(invariants_of(str(root / "m")), compact=COMPACT_VALUES if s % 2 else None)
            (folder / f"random-{s:02d}.json").write_text(text)
            lines.append(json.dumps(json.loads(text), separators=(",", ":")))
    a = fingerprint_json(invariants_of(str(llamas["A"])), compact=COMPACT_VALUES)
    (folder / "the-base.json").write_text(a)
    lines.insert(17, a.strip())
    (root / "db.jsonl").write_text("\n".join(lines) + "\n")
    return folder, root / "db.jsonl"


def test_scan_ranks_the_right_fingerprint_first(llamas, database):
    folder, jsonl = database
    for db in (folder, jsonl):
        rows = scan(invariants_of(str(llamas["F"])), db)
        assert len(rows) == 40
        assert rows[0]["entry"] in ("the-base.json", "line 18"), rows[0]
        assert rows[0]["verdict"] == "same-lineage" and rows[0]["p_value"] < 1e-6
        assert all(r["verdict"] == "unrelated" for r in rows[1:])
    rows = scan(invariants_of(str(llamas["D"])), folder)
    assert rows[0]["entry"] == "the-base.json" and rows[0]["verdict"] == "same-function"
    assert math.isfinite(rows[0]["similarity"])


def test_scan_cli_and_bad_entries(llamas, database, tmp_path):
    folder, jsonl = database
    r = run_cli("scan", llamas["F"], jsonl, "--top", "3")
    assert r.code == 0, r.stderr
    assert "line 18" in r.stdout.splitlines()[2]
    bad = jsonl.read_text().splitlines()
    doc = json.loads(bad[4])
    doc["dtype"] = "float16"                                            # content no longer matches its digest
    bad[4] = json.dumps(doc)
    bad[6] = "{not json"
    (tmp_path / "bad.jsonl").write_text("\n".join(bad) + "\n")
    with pytest.raises(IdinspectError, match=r"bad\.jsonl line 5: damaged"):
        list(read_database(tmp_path / "bad.jsonl"))
    r = run_cli("scan", llamas["F"], tmp_path / "bad.jsonl")
    assert r.code == 2 and not r.stdout
    message = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(message) == 1 and "bad.jsonl line 5" in message[0], r.stderr
    (folder / "zz-broken.json").write_text("[1, 2")
    try:
        with pytest.raises(IdinspectError, match="zz-broken.json"):
            list(read_database(folder))
    finally:
        (folder / "zz-broken.json").unlink()
