"""Hostile matrix: a server that compresses byte ranges and a range cache holding bad bytes.

Against the local hub + CDN (tests/support/hub_server.py). Ranges are asked for with
``Accept-Encoding: identity``; a reply in any content coding is refused before a byte of it is
cached (one line naming the URL and the fix), and a later run asks again and succeeds. A cache
poisoned earlier (by an older idinspect, a crash, a disk) is checked against the safetensors
header before use: a header that does not read is dropped and fetched again, ranges the header
rules out are dropped; offline, the run stops in one line and the next online run succeeds.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from idinspect.sources.remote_cache import FOLDER
from tests.sources.test_remote import _clean, cache, hub  # noqa: F401 - fixtures: local hub, clean settings, cache folder
from tests.support.hostile import run_case, tree_hashes
from tests.support.hub_server import Fault, served_files

REPO = "org/tiny-llama"
RANGES = Path("models--org--tiny-llama") / FOLDER


@pytest.fixture
def model(tiny_dir, tmp_path) -> Path:
    """The served checkpoint, kept in the case folder so that its bytes are checked unchanged."""
    dst = tmp_path / "served"
    shutil.copytree(tiny_dir("llama-gqa"), dst)
    return dst


def range_files(cache: Path) -> dict[str, bytes]:
    return {str(p.relative_to(cache)): p.read_bytes() for p in cache.rglob("*")
            if p.is_file() and re.match(r"^\d+-\d+$", p.name)}


def partials(cache: Path) -> list[Path]:
    return [p for p in cache.rglob(".part-*")]


def local_layers(root: Path, folder: Path) -> list:
    case = run_case(root, str(folder), "--format", "json", code=0, expect=("hf-cache",), protected=(folder,))
    return json.loads(case.out)["layers"]


# A reply in a content coding is refused: (the coding the server names, the request it spoils) --------
CODINGS = ["gzip", "x-gzip", "br", "deflate", "zstd", "GZIP"]
WHICH = {"length": 0, "header": 1, "tensors": 2}


@pytest.mark.parametrize("coding", CODINGS)
@pytest.mark.parametrize("which", list(WHICH))
def test_an_encoded_range_is_refused_and_nothing_is_cached(hub, model, cache, tmp_path, coding, which):
    hub.add_repo(REPO, served_files(model))
    hub.faults.append(Fault("gzip", host="cdn", after=WHICH[which], headers={"Content-Encoding": coding}))
    case = run_case(tmp_path, REPO, "--cache-dir", cache, code=2, expect=("hf-cache",), protected=(model,),
                    names=("model.safetensors", f"Content-Encoding {coding.lower()!r}", "HF_ENDPOINT"))
    assert "asked for identity" in case.err and "nothing was cached" in case.err
    cdn = [e for e in hub.log if e["host"] == "cdn"]
    assert cdn and all(e["accept_encoding"] == "identity" for e in cdn)
    spoiled = next(e["range"] for e in cdn if e["fault"] == "gzip")
    served = (model / "model.safetensors").read_bytes()
    for name, data in range_files(cache).items():         # what is cached is the file's own bytes (never the reply)
        a, b = map(int, Path(name).name.split("-"))
        assert data == served[a:b], name
    assert partials(cache) == []
    # the server behaves again: the next run asks for what it lacks and succeeds
    hub.reset_counts()
    again = run_case(tmp_path, REPO, "--cache-dir", cache, "--format", "json", code=0, expect=("hf-cache",), protected=(model,))
    if which != "tensors":   # (tensor ranges: another layer's thread may have fetched it cleanly in the first run)
        assert any(e["range"] == spoiled for e in hub.log if e["host"] == "cdn")
    for name, data in range_files(cache).items():
        a, b = map(int, Path(name).name.split("-"))
        assert data == served[a:b], name
    assert json.loads(again.out)["layers"] == local_layers(tmp_path, model)


# A cache poisoned before this run: (what is wrong, how to spoil the cache) ---------------------------
def _spoil_length(files: dict[Path, bytes]) -> None:
    path = next(p for p in files if p.name == "0-8")
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00")                 # a gzip member's first 8 bytes


def _spoil_header(files: dict[Path, bytes]) -> None:
    path = next(p for p in files if p.name.startswith("8-"))
    path.write_bytes(b"\x00" * len(files[path]))


def _spoil_header_json(files: dict[Path, bytes]) -> None:
    path = next(p for p in files if p.name.startswith("8-"))
    path.write_bytes(b"[" * len(files[path]))                              # nested too deep to be a header


def _spoil_length_huge(files: dict[Path, bytes]) -> None:
    path = next(p for p in files if p.name == "0-8")
    path.write_bytes((2 ** 62).to_bytes(8, "little"))


def _past_the_end(files: dict[Path, bytes]) -> None:
    folder = next(iter(files)).parent
    (folder / "100000000-100000004").write_bytes(b"abcd")                 # beyond the file's end


def _across_the_boundary(files: dict[Path, bytes]) -> None:
    header = next(p for p in files if p.name.startswith("8-"))
    end = int(header.name.split("-")[1])
    (header.parent / f"{end - 4}-{end + 4}").write_bytes(b"\xff" * 8)     # half header, half tensor data


POISONS = {"length gzip": _spoil_length, "length 2^62": _spoil_length_huge, "header zeros": _spoil_header,
           "header deep": _spoil_header_json, "past the end": _past_the_end, "across the boundary": _across_the_boundary}


def _cached(cache: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in (cache / RANGES).rglob("*") if p.is_file() and re.match(r"^\d+-\d+$", p.name)
            and p.parent.name == "model.safetensors"}


@pytest.mark.parametrize("poison", list(POISONS))
def test_a_poisoned_cache_is_checked_dropped_and_fetched_again(hub, model, cache, tmp_path, poison):
    hub.add_repo(REPO, served_files(model))
    first = run_case(tmp_path, REPO, "--cache-dir", cache, "--format", "json", code=0, expect=("hf-cache",), protected=(model,))
    good = _cached(cache)
    POISONS[poison](good)
    hub.reset_counts()
    again = run_case(tmp_path, REPO, "--cache-dir", cache, "--format", "json", code=0, expect=("hf-cache",), protected=(model,))
    assert json.loads(again.out)["layers"] == json.loads(first.out)["layers"]
    now = _cached(cache)
    assert now == {p: b for p, b in good.items() if p in now} and set(now) <= set(good)   # bad entries gone
    if poison.startswith(("length", "header")):
        assert any(e["host"] == "cdn" for e in hub.log)                  # the server was asked again
    assert partials(cache) == []


@pytest.mark.parametrize("poison", ["length gzip", "length 2^62", "header zeros", "header deep"])
def test_offline_a_poisoned_header_is_dropped_and_named(hub, model, cache, tmp_path, poison):
    hub.add_repo(REPO, served_files(model))
    run_case(tmp_path, REPO, "--cache-dir", cache, code=0, expect=("hf-cache",), protected=(model,), one_line=False)
    POISONS[poison](_cached(cache))
    hub.reset_counts()
    case = run_case(tmp_path, REPO, "--cache-dir", cache, "--offline", code=2, expect=("hf-cache",), protected=(model,),
                    names=("model.safetensors", "run once online"))
    assert "range cache" in case.err and hub.log == []
    run_case(tmp_path, REPO, "--cache-dir", cache, code=0, expect=("hf-cache",), protected=(model,), one_line=False)
    before = tree_hashes(cache / RANGES)
    run_case(tmp_path, REPO, "--cache-dir", cache, "--offline", code=0, expect=("hf-cache",), protected=(model,), one_line=False)
    assert tree_hashes(cache / RANGES) == before
