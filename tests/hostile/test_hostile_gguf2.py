"""Hostile matrix, GGUF part 2: malformed GGUF headers, metadata and quantised blocks.

A valid tiny GGUF (tests/support/gguf_convert.py, Q8_0 attention) is taken apart with the gguf package's
own reader (each key-value pair's raw bytes, each tensor's info, the data) and written back with
one thing changed, the way a broken converter or a hostile author would. Every case is a one-line
error naming the file and what is wrong (exit 2), or, where the file is valid (a 5 MB array,
per-layer counts that agree, non-finite Q8_0 scales), a normal run; never a crash, and nothing
is allocated for what the file cannot hold. The remote cases check that a header claiming 2**40
bytes is refused after reading little of the file.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.support.hostile import run_case

gguf = pytest.importorskip("gguf")

U8, I32, U32, F32, BOOL, STR, ARR, U64, F64 = 0, 5, 4, 6, 7, 8, 9, 10, 12
#: audit's text report wraps at the terminal width: wide enough that a message stays on one line.
WIDE = {"COLUMNS": "1000"}


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key: str, kind: int, value) -> bytes:
    """One key-value pair's bytes (``value`` already encoded when ``kind`` is ARR)."""
    if kind == STR:
        body = s(value)
    elif kind == ARR:
        body = value
    else:
        body = struct.pack("<" + {U8: "B", I32: "i", U32: "I", F32: "f", BOOL: "?", U64: "Q", F64: "d"}[kind], value)
    return s(key) + struct.pack("<I", kind) + body


class Parts:
    """A GGUF file taken apart: raw key-value pairs by key, tensor infos, data; :meth:`write` puts it back."""

    def __init__(self, path: Path):
        r = gguf.GGUFReader(str(path))
        raw = path.read_bytes()
        self.kvs = {name: b"".join(p.tobytes() for p in f.parts) for name, f in r.fields.items()
                    if not name.startswith("GGUF.")}
        self.arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
        self.tensors = [[t.name, [int(d) for d in t.shape], int(t.tensor_type), int(t.data_offset) - r.data_offset]
                        for t in r.tensors]
        self.data = bytearray(raw[r.data_offset:])
        self.alignment = 32
        self.version = 3
        self.magic = b"GGUF"
        self.counts: tuple[int, int] | None = None
        self.cut = 0

    def set(self, key: str, kind: int, value) -> None:
        self.kvs[key] = kv(key, kind, value)

    def arch_key(self, key: str) -> str:
        return f"{self.arch}.{key}"

    def write(self, path: Path) -> Path:
        head = bytearray(self.magic + struct.pack("<I", self.version))
        n_t, n_kv = self.counts or (len(self.tensors), len(self.kvs))
        head += struct.pack("<QQ", n_t, n_kv)
        for raw in self.kvs.values():
            head += raw
        for name, dims, kind, offset in self.tensors:
            head += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            head += struct.pack("<IQ", kind, offset)
        head += b"\0" * (-len(head) % self.alignment)
        out = bytes(head + self.data)
        path.write_bytes(out[:len(out) - self.cut] if self.cut else out)
        return path


@pytest.fixture(scope="module")
def base_gguf(tmp_path_factory) -> Path:
    from tests.sources.test_gguf import wide
    from tests.support.gguf_convert import convert

    out = tmp_path_factory.mktemp("gguf") / "base.gguf"
    return convert(wide("llama"), out, {"*": "F32", "attn_q": "Q8_0", "attn_k": "Q8_0", "attn_v": "Q8_0",
                                        "attn_output": "Q8_0"})


def _q8(parts: Parts) -> int:
    return next(i for i, t in enumerate(parts.tensors) if t[2] == int(gguf.GGMLQuantizationType.Q8_0))


def _nested(depth: int) -> bytes:
    return struct.pack("<IQ", ARR, 1) * depth + struct.pack("<IQ", U8, 0)


STRUCTURE = {
    # case: (edit(parts), words the message must hold)
    "overlap": (lambda p: p.tensors[1].__setitem__(3, p.tensors[0][3]), "overlap"),
    "misaligned": (lambda p: p.tensors[2].__setitem__(3, p.tensors[2][3] + 4), "general.alignment"),
    "nested-100000": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<I", ARR) + _nested(100_000)), "nested"),
    "array-2^62-short": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<IIQ", ARR, U8, 2**62)), "array of"),
    "array-2^62-u64": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<IIQ", ARR, U64, 2**62)), "array of"),
    "string-array-2^40": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<IIQ", ARR, STR, 2**40)), "array of"),
    "string-2^40": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<IQ", STR, 2**40)), "claims"),
    "key-2^40": (lambda p: p.kvs.__setitem__("x", struct.pack("<Q", 2**40) + b"x"), "claims"),
    "kv-count-2^40": (lambda p: setattr(p, "counts", (len(p.tensors), 2**40)), "key-value pairs"),
    "tensor-count-2^40": (lambda p: setattr(p, "counts", (2**40, len(p.kvs))), "tensors"),
    "unknown-value-type": (lambda p: p.kvs.__setitem__("x", s("x") + struct.pack("<IB", 99, 0)), "unknown value type"),
    "zero-dims": (lambda p: p.tensors[0].__setitem__(1, []), "dimensions"),
    "five-dims": (lambda p: p.tensors[0].__setitem__(1, [1, 1, 1, 1, 1]), "dimensions"),
    "dim-zero": (lambda p: p.tensors[0].__setitem__(1, [0] + p.tensors[0][1][1:]), "dimensions"),
    "dims-2^40": (lambda p: p.tensors[0].__setitem__(1, [2**40, 2**20]), "truncated"),
    "unknown-ggml-type": (lambda p: p.tensors[0].__setitem__(2, 99), "GGML type 99"),
    "q8-not-block-multiple": (lambda p: p.tensors[_q8(p)].__setitem__(1, [33] + p.tensors[_q8(p)][1][1:]),
                              "block of 32"),
    "data-one-block-short": (lambda p: setattr(p, "cut", 34), "truncated"),
    "data-one-byte-short": (lambda p: setattr(p, "cut", 1), "truncated"),
    "offset-past-end": (lambda p: p.tensors[-1].__setitem__(3, 2**40), "truncated"),
    "duplicate-tensor": (lambda p: p.tensors.append(list(p.tensors[0])), "listed twice"),
    "alignment-zero": (lambda p: p.set("general.alignment", U32, 0), "general.alignment"),
    "alignment-three": (lambda p: p.set("general.alignment", U32, 3), "general.alignment"),
    "alignment-string": (lambda p: p.set("general.alignment", STR, "32"), "general.alignment"),
    "version-1": (lambda p: setattr(p, "version", 1), "version 1"),
    "version-99": (lambda p: setattr(p, "version", 99), "version 99"),
    "big-endian-version": (lambda p: setattr(p, "version", 3 << 24), "big-endian"),
    "bad-magic": (lambda p: setattr(p, "magic", b"GGML"), "magic"),
}


@pytest.mark.parametrize("command", [(), ("audit",)])
@pytest.mark.parametrize("case", list(STRUCTURE))
def test_malformed_gguf_structure(base_gguf, tmp_path, case, command):
    parts = Parts(base_gguf)
    STRUCTURE[case][0](parts)
    parts.write(tmp_path / "bad.gguf")
    words = STRUCTURE[case][1]
    r = run_case(tmp_path, *command, "bad.gguf", code=2, names=("bad.gguf", words), one_line=not command, env=WIDE)
    if command:
        assert "bad.gguf" in r.out


@pytest.mark.parametrize("size", [0, 3, 10, 23])
def test_tiny_gguf_files(tmp_path, size):
    (tmp_path / "t.gguf").write_bytes((b"GGUF" + struct.pack("<I", 3) + b"\0" * 64)[:size])
    run_case(tmp_path, "t.gguf", code=2, names=("t.gguf", "not a readable GGUF file"))


def test_real_big_endian_gguf_is_refused_by_name(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "be.gguf"), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_block_count(1)
    w.add_tensor("blk.0.attn_q.weight", np.ones((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    run_case(tmp_path, "be.gguf", code=2, names=("be.gguf", "big-endian", "little"))


METADATA = {
    # case: (key, kind, value or None to delete, words)
    "head_count-missing": ("attention.head_count", None, None, "attention.head_count"),
    "head_count-string": ("attention.head_count", STR, "4", "attention.head_count"),
    "head_count-zero": ("attention.head_count", U32, 0, "attention.head_count"),
    "head_count-float": ("attention.head_count", F32, 4.0, "attention.head_count"),
    "head_count-huge": ("attention.head_count", U64, 2**40, "attention.head_count"),
    "head_count-per-layer-differ": ("attention.head_count", ARR, struct.pack("<IQii", I32, 2, 4, 2), "per-layer"),
    "head_count-empty-array": ("attention.head_count", ARR, struct.pack("<IQ", I32, 0), "per-layer"),
    "head_count_kv-above-heads": ("attention.head_count_kv", U32, 8, "attention.head_count_kv"),
    "head_count_kv-string": ("attention.head_count_kv", STR, "2", "attention.head_count_kv"),
    "block_count-2^40": ("block_count", U64, 2**40, "block_count"),
    "block_count-zero": ("block_count", U32, 0, "block_count"),
    "block_count-missing": ("block_count", None, None, "block_count"),
    "block_count-bool": ("block_count", BOOL, True, "block_count"),
    "embedding_length-missing": ("embedding_length", None, None, "embedding_length"),
    "embedding_length-negative": ("embedding_length", I32, -64, "embedding_length"),
    "freq_base-string": ("rope.freq_base", STR, "10000", "rope.freq_base"),
    "freq_base-nan": ("rope.freq_base", F32, float("nan"), "rope.freq_base"),
    "freq_base-inf": ("rope.freq_base", F64, float("inf"), "rope.freq_base"),
    "freq_base-negative": ("rope.freq_base", F32, -1.0, "rope.freq_base"),
    "rms_eps-string": ("attention.layer_norm_rms_epsilon", STR, "1e-6", "layer_norm_rms_epsilon"),
    "context_length-string": ("context_length", STR, "64", "context_length"),
    "key_length-huge": ("attention.key_length", U64, 2**40, "attention.key_length"),
    "rope_dims-above-head": ("rope.dimension_count", U32, 4096, "rope.dimension_count"),
    "sliding_window-string": ("attention.sliding_window", STR, "4096", "attention.sliding_window"),
}


@pytest.mark.parametrize("command", [(), ("audit",)])
@pytest.mark.parametrize("case", list(METADATA))
def test_malformed_gguf_metadata(base_gguf, tmp_path, case, command):
    key, kind, value, words = METADATA[case]
    parts = Parts(base_gguf)
    full = parts.arch_key(key)
    if kind is None:
        parts.kvs.pop(full)
    else:
        parts.set(full, kind, value)
    parts.write(tmp_path / "bad.gguf")
    code = 2
    r = run_case(tmp_path, *command, "bad.gguf", code=code, names=("bad.gguf", words), one_line=not command, env=WIDE)
    assert "convert the file again" in (r.err if not command else r.out)


ARCH = {
    "missing": None, "number": (U32, 7), "control": (STR, "ll\x1b]52;c;QUFB\x07ama"), "empty": (STR, ""),
}


@pytest.mark.parametrize("case", list(ARCH))
def test_architecture_field(base_gguf, tmp_path, case):
    parts = Parts(base_gguf)
    if ARCH[case] is None:
        parts.kvs.pop("general.architecture")
    else:
        parts.set("general.architecture", *ARCH[case])
    parts.write(tmp_path / "bad.gguf")
    r = run_case(tmp_path, "bad.gguf", code=2, names=("bad.gguf", "not supported"))
    assert "\x1b" not in r.err


@pytest.mark.parametrize("kind,size", [(U8, 5 << 20), (STR, 5 << 20), (F32, 5 << 20)])
def test_five_megabyte_array_is_refused_by_key_at_once(base_gguf, tmp_path, kind, size):
    """An array of millions of elements (which the gguf package would parse one by one, for minutes)
    is refused by its key before parsing."""
    import time

    parts = Parts(base_gguf)
    one = {U8: b"\1", STR: s(""), F32: b"\0\0\0\0"}[kind]
    count = size // len(one)
    parts.kvs["big.array"] = s("big.array") + struct.pack("<IIQ", ARR, kind, count) + one * count
    parts.write(tmp_path / "big.gguf")
    start = time.perf_counter()
    run_case(tmp_path, "big.gguf", code=2, names=("big.gguf", "big.array", f"array of {count} elements"))
    assert time.perf_counter() - start < 5


def test_vocabulary_sized_arrays_read(base_gguf, tmp_path):
    """An honest vocabulary (30,000 tokens with scores) is read, not refused."""
    parts = Parts(base_gguf)
    parts.kvs["tokenizer.ggml.tokens"] = (s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARR, STR, 30_000)
                                          + s("tok") * 30_000)
    parts.kvs["tokenizer.ggml.scores"] = (s("tokenizer.ggml.scores") + struct.pack("<IIQ", ARR, F32, 30_000)
                                          + b"\0\0\0\0" * 30_000)
    parts.write(tmp_path / "big.gguf")
    r = run_case(tmp_path, "big.gguf", "--format", "json", code=0)
    assert json.loads(r.out)["totals"]


def test_per_layer_counts_that_agree_read(base_gguf, tmp_path):
    parts = Parts(base_gguf)
    parts.set(parts.arch_key("attention.head_count"), ARR, struct.pack("<IQii", I32, 2, 4, 4))
    parts.write(tmp_path / "ok.gguf")
    base = run_case(tmp_path, base_gguf, "--format", "json", code=0)
    got = run_case(tmp_path, "ok.gguf", "--format", "json", code=0)
    assert json.loads(got.out)["layers"] == json.loads(base.out)["layers"]


def _scale(parts: Parts, value: float, block: int = 0) -> None:
    """Set the fp16 scale of Q8_0 block ``block`` of the first Q8_0 tensor."""
    i = _q8(parts)
    at = parts.tensors[i][3] + 34 * block
    parts.data[at:at + 2] = np.array([value], dtype=np.float16).tobytes()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("command,code", [((), 0), (("audit",), 1), (("--format", "json"), 0)])
def test_nonfinite_q8_0_scale_is_a_finding(base_gguf, tmp_path, value, command, code):
    parts = Parts(base_gguf)
    _scale(parts, value, block=1)
    parts.write(tmp_path / "nan.gguf")
    if command and command[0] == "audit":
        r = run_case(tmp_path, "audit", "nan.gguf", code=code, one_line=False, env=WIDE)
        assert "non-finite" in r.out
    else:
        r = run_case(tmp_path, "nan.gguf", *command, code=code)
        assert ("NaN" in r.out or "Inf" in r.out), r.out[-2000:]
    assert "model.layers.0.self_attn.q_proj.weight" in r.out    # the finding names the tensor


# --- remote: a header that claims more than the file holds is refused after reading little --------

REMOTE_HEADERS = {
    "string-2^40": struct.pack("<IQ", STR, 2**40),
    "array-2^62": struct.pack("<IIQ", ARR, U8, 2**62),
    "nested-deep": struct.pack("<I", ARR) + _nested(100_000),
    "string-array-2^40": struct.pack("<IIQ", ARR, STR, 2**40),
}


@pytest.fixture
def hub(monkeypatch):
    from huggingface_hub import constants as hf_constants

    from idinspect import cli as cli_module
    from tests.support.hub_server import LocalHub

    monkeypatch.setitem(cli_module._DEBUG, "on", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    with LocalHub() as server:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


@pytest.mark.parametrize("case", list(REMOTE_HEADERS))
def test_remote_gguf_header_bounded_by_the_format(hub, tmp_path, case):
    from tests.support.hub_server import PatternBlob

    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + s("general.architecture") + struct.pack("<I", STR) + s("llama") \
        + s("x") + REMOTE_HEADERS[case]
    size = 64 << 20
    hub.add_repo("org/g", {"m.gguf": PatternBlob(head, size, tag=case)})
    work = tmp_path / "work"
    work.mkdir()
    run_case(work, "org/g:m.gguf", "--cache-dir", tmp_path / "cache", code=2, names=("m.gguf", "not a readable GGUF"))
    assert hub.bytes_served["cdn"] <= 4 << 20, hub.bytes_served
