"""Hostile matrix: fingerprint files that are damaged, malformed, oversized or forged.

Every case writes a fingerprint of a tiny float32 Llama (GQA, RoPE) edited the way a broken copy
or a forger would, into the case folder, and runs ``idinspect compare FP MODEL`` through the real
CLI (tests/support/hostile.py :func:`run_case`): exit 2, one line naming the file and the fix, no
traceback, the fingerprint and the model unchanged, nothing left behind. Forged cases are written
twice: with the integrity digest left as it was (the file is then named as damaged) and with it
recomputed, as a forger would (the check that refuses the figure itself must speak). A forged
fingerprint that passes every check (radii at the top of their range) must still never make an
unrelated model compare as the same function.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import torch

from idinspect.compare.fingerprint_check import (
    MAX_FILE_BYTES,
    MAX_HEADS,
    canonical_digest,
    radius_range,
)
from idinspect.compare.json_schema import (
    NotFinite,
    SchemaError,
    load_schema,
    parse_json,
    validate,
)
from tests.support import tiny
from tests.support.cli import run_cli
from tests.support.hostile import deep_json, run_case, tree_hashes

FIX = "idinspect fingerprint MODEL -o FILE"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A float32 tiny Llama and an unrelated one of the same shape (another seed)."""
    root = tmp_path_factory.mktemp("fp-models")
    out = {}
    for name, seed in (("model", 0), ("other", 7)):
        out[name] = tiny.save(tiny.build("llama-gqa", seed=seed), root / name, dtype=torch.float32)
    return out


@pytest.fixture(scope="module")
def fingerprint(models) -> dict:
    res = run_cli("fingerprint", models["model"])
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def enc(a) -> str:
    return base64.b64encode(np.asarray(a, dtype="<f4").tobytes()).decode()


def dec(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").copy()


def setter(*path, value) -> Callable[[dict], None]:
    """An edit that sets fp[path...] = value (a callable value gets the old value)."""
    def edit(fp: dict) -> None:
        node = fp
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value(node[path[-1]]) if callable(value) else value
    return edit


def deleter(*path) -> Callable[[dict], None]:
    def edit(fp: dict) -> None:
        node = fp
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


def array_edit(key: str, fn, layer: int = 0) -> Callable[[dict], None]:
    """An edit of one base64 array of layer ``layer``: fn(float32 values) -> values."""
    return setter("layers", layer, key, value=lambda text: enc(fn(dec(text))))


def poke(index: int, value: float):
    def fn(a: np.ndarray) -> np.ndarray:
        a[index] = value
        return a
    return fn


# (what is edited, the edit, words the one-line message must hold) --------------------------------------
SCHEMA_CASES = {
    "layers not a list": (setter("layers", value={"0": 1}), "layers is an object"),
    "layer without qk": (deleter("layers", 0, "qk"), 'has no "qk"'),
    "heads 2.5": (setter("layers", 0, "structure", "heads", value=2.5), "heads is 2.5"),
    "heads a string": (setter("layers", 0, "structure", "heads", value="4"), "not an integer"),
    "heads 0": (setter("layers", 0, "structure", "heads", value=0), "below the minimum"),
    "heads 10^12": (setter("layers", 0, "structure", "heads", value=10 ** 12), "above the maximum"),
    "d_k 2^40": (setter("layers", 0, "structure", "d_k", value=2 ** 40), "above the maximum"),
    "heads null": (setter("layers", 0, "structure", "heads", value=None), "not an integer"),
    "layer an array": (setter("layers", 0, value=lambda layer: list(layer)), "layers[0] is an array of"),
    "dtype int8": (setter("dtype", value="int8"), "dtype"),
    "gains_folded a string": (setter("gains_folded", value="yes"), "gains_folded"),
    "unit_roundoff a string": (setter("unit_roundoff", value="tiny"), "unit_roundoff"),
    "unit_roundoff 0": (setter("unit_roundoff", value=0.0), "unit_roundoff"),
    "unit_roundoff negative": (setter("unit_roundoff", value=-1e-8), "unit_roundoff"),
    "encoding changed": (setter("encoding", value="base64 float16"), "encoding"),
    "20,000 layers": (setter("layers", value=lambda ls: [dict(ls[0], index=i) for i in range(20_000)]),
                      "20000 items, more than 1024"),
    "nonfinite_heads a string": (setter("layers", 0, "nonfinite_heads", value="0"), "nonfinite_heads"),
    "nonfinite_heads 1.5": (setter("layers", 0, "nonfinite_heads", value=[1.5]), "nonfinite_heads[0]"),
    "nonfinite_heads -1": (setter("layers", 0, "nonfinite_heads", value=[-1]), "nonfinite_heads[0]"),
    "nonfinite_heads true": (setter("layers", 0, "nonfinite_heads", value=[True]), "nonfinite_heads[0]"),
    "nonfinite_heads repeated": (setter("layers", 0, "nonfinite_heads", value=[0, 0]), "repeats an item"),
    "nonfinite_heads 10^9": (setter("layers", 0, "nonfinite_heads", value=[10 ** 9]), "nonfinite_heads[0]"),
    "integrity md5": (setter("integrity", value="md5:00"), "integrity"),
    "version 2": (setter("version", value=2), "version 2 is not supported"),
    "version a string": (setter("version", value="1"), "version '1' is not supported"),
    "version true": (setter("version", value=True), "version True is not supported"),
    "format other": (setter("format", value="idinspect-report"), "not an idinspect fingerprint"),
    "source an object": (setter("source", value={"a": 1}), "source"),
}

SIZE_CASES = {
    "nonfinite head out of range": (setter("layers", 0, "nonfinite_heads", value=[4]), "names head 4"),
    "qk too short": (setter("layers", 0, "qk", value=lambda t: t[:-8]), "base64 characters"),
    "qk too long": (setter("layers", 0, "qk", value=lambda t: t + "AAAA"), "base64 characters"),
    "qk not base64": (setter("layers", 0, "qk", value=lambda t: "!" * len(t)), "not base64"),
    "kv heads do not divide": (setter("layers", 0, "structure", "kv_heads", value=3), "do not divide"),
    "rotary_dim odd": (setter("layers", 0, "structure", "rotary_dim", value=3), "rotary_dim 3"),
    "rotary_dim above d_k": (setter("layers", 0, "structure", "rotary_dim", value=64), "rotary_dim 64"),
    "planes without radii": (setter("layers", 0, "radius_planes", value=None), "planes and radius_planes"),
    "layer index repeated": (setter("layers", 1, "index", value=0), "does not follow"),
    "4096 heads, short arrays": (setter("layers", 0, "structure", value=lambda s: dict(s, heads=4096, kv_heads=2048)),
                                 "base64 characters"),
    "32 GB of heads declared": (setter("layers", value=lambda ls: [
        dict(ls[0], index=i, structure=dict(ls[0]["structure"], heads=4096, kv_heads=4096)) for i in range(16)]),
        f"more than {MAX_HEADS} heads"),
}

FIGURE_CASES = {
    "radius_qk NaN": (array_edit("radius_qk", poke(0, np.nan)), "radius_qk holds nan"),
    "radius_ov +Inf": (array_edit("radius_ov", poke(1, np.inf)), "radius_ov holds inf"),
    "radius_planes -Inf": (array_edit("radius_planes", poke(2, -np.inf)), "radius_planes holds -inf"),
    "qk NaN": (array_edit("qk", poke(0, np.nan)), "qk holds nan"),
    "ov Inf": (array_edit("ov", poke(3, np.inf)), "ov holds inf"),
    "planes NaN": (array_edit("planes", poke(0, np.nan)), "planes holds nan"),
    "singular value negative": (array_edit("qk", poke(0, -1.0)), "qk holds -1.0"),
    "radius negative": (array_edit("radius_ov", poke(0, -1e-6)), "radius_ov holds"),
    "radius_qk 1e30": (array_edit("radius_qk", lambda a: a * 0 + 1e30), "above the largest"),
    "radius_ov 1e30": (array_edit("radius_ov", lambda a: a * 0 + 1e30, layer=1), "above the largest"),
    "radius_planes 1e30": (array_edit("radius_planes", lambda a: a * 0 + 1e30), "above the largest"),
    "radius 1000x": (array_edit("radius_qk", lambda a: a * 1000), "above the largest"),
    "radius 0": (array_edit("radius_qk", lambda a: a * 0), "claims more precision than float32"),
    "radius_planes 0": (array_edit("radius_planes", lambda a: a * 0), "claims more precision than float32"),
    "unit_roundoff of float64": (setter("unit_roundoff", value=2.0 ** -53), "not that of its dtype float32"),
    "unit_roundoff coarser": (setter("unit_roundoff", value=2.0 ** -8), "not that of its dtype float32"),
    "dtype float64, radii of float32": (setter("dtype", value="float64"), "not that of its dtype float64"),
    "dtype and u of float64": (lambda fp: fp.update(dtype="float64", unit_roundoff=2.0 ** -53),
                               "above the largest rounding radius its values allow in float64"),
}


def write_case(root: Path, fp: dict, *, edit=None, reseal: bool = True, raw: bytes | None = None) -> Path:
    """fps/fp.json in ``root``: ``fp`` edited, its integrity recomputed when ``reseal`` (a forger's copy)."""
    folder = root / "fps"
    folder.mkdir()
    path = folder / "fp.json"
    if raw is not None:
        path.write_bytes(raw)
        return path
    doc = json.loads(json.dumps(fp))
    if edit is not None:
        edit(doc)
    if reseal and isinstance(doc, dict) and str(doc.get("integrity")).startswith("sha256:"):
        doc["integrity"] = canonical_digest(doc)
    path.write_text(json.dumps(doc))
    return path


def refused(root: Path, models: dict, path: Path, words: str, command: str = "compare"):
    args = ("compare", path, models["model"]) if command == "compare" else ("fingerprint", path, "--digest")
    before = tree_hashes(models["model"])
    case = run_case(root, *args, code=2, names=("fp.json", words))
    assert FIX in case.err or "this idinspect's 'fingerprint'" in case.err, case.err
    assert tree_hashes(models["model"]) == before
    return case


@pytest.mark.parametrize("command", ["compare", "fingerprint"])
@pytest.mark.parametrize("case", list(SCHEMA_CASES) + list(SIZE_CASES) + list(FIGURE_CASES))
def test_forged_or_malformed_fingerprint_is_refused_by_what_is_wrong(tmp_path, models, fingerprint, case, command):
    edit, words = {**SCHEMA_CASES, **SIZE_CASES, **FIGURE_CASES}[case]
    start = time.perf_counter()
    refused(tmp_path, models, write_case(tmp_path, fingerprint, edit=edit), words, command)
    assert time.perf_counter() - start < 10      # refused by its declared sizes, before any allocation


@pytest.mark.parametrize("case", list(SIZE_CASES) + list(FIGURE_CASES))
def test_an_edit_without_the_integrity_digest_is_named_damaged(tmp_path, models, fingerprint, case):
    edit, _ = {**SIZE_CASES, **FIGURE_CASES}[case]
    refused(tmp_path, models, write_case(tmp_path, fingerprint, edit=edit, reseal=False), "damaged")


DAMAGE = {
    "one base64 character": setter("layers", 1, "ov", value=lambda t: ("B" if t[5] == "A" else "A").join([t[:5], t[6:]])),
    "the source": setter("source", value="/elsewhere"),
    "the model summary": setter("model", "model_type", value="bert"),
    "a structure figure": setter("layers", 0, "structure", "scale", value=0.25),
    "the tool": setter("tool", value="idinspect 9"),
}


@pytest.mark.parametrize("what", list(DAMAGE))
def test_damage_is_named_by_the_integrity_digest(tmp_path, models, fingerprint, what):
    refused(tmp_path, models, write_case(tmp_path, fingerprint, edit=DAMAGE[what], reseal=False), "damaged")


RAW = {
    "100,000 deep": (deep_json(100_000).encode(), "nested 100000 deep"),
    "model summary 40 deep": (None, "nested"),
    "NaN literal": (None, "unit_roundoff is NaN (not a finite number)"),
    "Infinity literal": (None, "unit_roundoff is Infinity (not a finite number)"),
    "1e999": (None, "unit_roundoff is 1e999 (not a finite number)"),
    "not UTF-8": (b'{"format": "\xff\xfe"}', "not UTF-8"),
    "truncated": (None, "not a readable JSON fingerprint"),
    "empty": (b"", "not a readable JSON fingerprint"),
    "a JSON list": (b"[1, 2]", "not an idinspect fingerprint"),
    "a string": (b'"idinspect-fingerprint"', "not an idinspect fingerprint"),
}


def _raw(fp: dict, case: str) -> bytes:
    raw, _ = RAW[case]
    if raw is not None:
        return raw
    doc = json.loads(json.dumps(fp))
    doc.pop("integrity")
    if case == "model summary 40 deep":
        doc["model"] = {"x": json.loads(deep_json(40))}
        return json.dumps(doc).encode()
    if case == "truncated":
        return json.dumps(doc).encode()[:500]
    literal = {"NaN literal": "NaN", "Infinity literal": "Infinity", "1e999": "1e999"}[case]
    return json.dumps(doc).replace(json.dumps(doc["unit_roundoff"]), literal, 1).encode()


@pytest.mark.parametrize("case", list(RAW))
def test_unreadable_fingerprint_files_are_refused(tmp_path, models, fingerprint, case):
    refused(tmp_path, models, write_case(tmp_path, fingerprint, raw=_raw(fingerprint, case)), RAW[case][1])


def test_an_oversized_file_is_refused_by_its_size_unread(tmp_path, models, fingerprint):
    path = write_case(tmp_path, fingerprint, raw=b"")
    with open(path, "wb") as fh:                       # sparse: no disk used
        fh.truncate(MAX_FILE_BYTES + 1)
    refused(tmp_path, models, path, "more than a fingerprint can hold")


# what holds: unrelated models stay unrelated, a forger's best radii included -----------------------
def _at_the_cap(fp: dict) -> None:
    """Every radius at the top of the range its values allow (a forger's widest accepted tolerance)."""
    u = fp["unit_roundoff"]
    for layer in fp["layers"]:
        s = layer["structure"]
        H, dk, dv = s["heads"], s["d_k"], s["d_v"]
        shapes = {"qk": (H, dk), "ov": (H, dv), "planes": (H, s["rotary_dim"] // 2, 2)}
        for kind, shape in shapes.items():
            values = torch.from_numpy(dec(layer[kind]).astype(np.float64).reshape(shape))
            upper = radius_range(values, u, 0.0)[1]
            layer[f"radius_{kind}"] = enc(upper.numpy() * (1 - 2.0 ** -21))


def test_radii_at_the_top_of_their_range_do_not_make_unrelated_models_the_same(tmp_path, models):
    res = run_cli("fingerprint", models["other"])
    path = write_case(tmp_path, json.loads(res.stdout), edit=_at_the_cap)
    case = run_case(tmp_path, "compare", path, models["model"], "--format", "json", code=1, one_line=False)
    record = json.loads(case.out)
    assert record["verdict"] == "unrelated" and record["same_function"]["worst"]["ratio"] > 1e3
    assert record["a"]["integrity"] == "verified"


def test_nan_invariants_of_listed_heads_never_match(tmp_path, models, fingerprint):
    def all_nan(fp: dict) -> None:
        for layer in fp["layers"]:
            H = layer["structure"]["heads"]
            layer["nonfinite_heads"] = list(range(H))
            for key in ("qk", "ov", "planes", "radius_qk", "radius_ov", "radius_planes"):
                layer[key] = enc(dec(layer[key]) * np.nan)
    path = write_case(tmp_path, fingerprint, edit=all_nan)
    case = run_case(tmp_path, "compare", path, models["model"], "--format", "json", code=1, one_line=False)
    assert json.loads(case.out)["verdict"] != "same-function"


def test_a_sound_fingerprint_still_compares(tmp_path, models, fingerprint):
    """The control: the unedited file is the same function as its model; without its integrity
    field (a version-1 file written before it existed) it is read, reported unchecked."""
    for reseal, integrity in ((True, "verified"), (False, "absent")):
        root = tmp_path / integrity
        root.mkdir()
        edit = None if reseal else deleter("integrity")
        path = write_case(root, fingerprint, edit=edit, reseal=reseal)
        case = run_case(root, "compare", path, models["model"], "--format", "json", code=0, one_line=False)
        record = json.loads(case.out)
        assert record["verdict"] == "same-function" and record["a"]["integrity"] == integrity


def test_keys_added_within_the_version_are_read(tmp_path, models, fingerprint):
    """Version 1 only ever gains keys: a newer writer's extra keys (top level, per layer) are ignored
    by this reader, the integrity digest covering them. (A structure key it does not know is a
    property it cannot check on its own side: the layers then differ, and compare says so.)"""
    def newer(fp: dict) -> None:
        fp["future"] = {"x": [1, 2]}
        for layer in fp["layers"]:
            layer["future_array"] = "AAAA"
    path = write_case(tmp_path, fingerprint, edit=newer)
    case = run_case(tmp_path, "compare", path, models["model"], "--format", "json", code=0, one_line=False)
    assert json.loads(case.out)["a"]["integrity"] == "verified"


def test_written_fingerprints_satisfy_the_schema_and_their_digest(models, fingerprint, minilm_dir):
    schema = load_schema("fingerprint.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    mini = json.loads(run_cli("fingerprint", minilm_dir).stdout)
    for fp in (fingerprint, mini):
        jsonschema.validate(fp, schema)
        validate(fp, schema)
        assert fp["integrity"] == canonical_digest(fp)


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_the_schema_checker_agrees_with_jsonschema(fingerprint, case):
    """What idinspect's own checker refuses is what jsonschema refuses (and the reverse)."""
    doc = json.loads(json.dumps(fingerprint))
    SCHEMA_CASES[case][0](doc)
    schema = load_schema("fingerprint.schema.json")
    theirs = jsonschema.Draft202012Validator(schema).is_valid(doc)
    try:
        validate(doc, schema)
        ours = True
    except SchemaError:
        ours = False
    assert ours == theirs


def test_non_finite_literals_are_never_numbers():
    doc = parse_json('{"a": NaN, "b": -Infinity, "c": 1e999, "d": 1.5}')
    assert all(isinstance(doc[k], NotFinite) for k in "abc") and doc["d"] == 1.5
    with pytest.raises(SchemaError, match="not a finite number"):
        validate(doc, {"type": "object", "properties": {"a": {"type": "number"}}})


def test_fingerprint_files_are_never_opened_beyond_regular_files(tmp_path, models):
    fifo = tmp_path / "fps" / "fp.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    from idinspect.compare.fingerprint import read_fingerprint
    from idinspect.errors import IdinspectError

    with pytest.raises(IdinspectError, match="not a regular file"):
        read_fingerprint(fifo)
