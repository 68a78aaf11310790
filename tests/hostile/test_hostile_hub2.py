"""Hostile matrix, hub part 2: a hub (tests/support/hub_server.py) that answers with unsafe names, malformed
JSON, wrong bytes or one byte at a time.

Every case runs the real CLI against the local hub and checks what the matrix promises (exit
status, no traceback, one line naming the URL or file and the fix) and, for the security cases,
that nothing was created anywhere outside the cache. Slow servers are held to a tiny deadline
through the settings the guard reads (IDINSPECT_HUB_DEADLINE, IDINSPECT_HUB_READ_TIMEOUT).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from idinspect import cli as cli_module
from idinspect.sources import remote_http
from tests.support.hostile import run_case
from tests.support.hub_server import Fault, LocalHub, served_files

REPO = "org/tiny"
#: (command-line prefix, what it reads): ranges (the default), whole files, an export.
COMMANDS = {"ranges": (), "download": ("--download",)}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setitem(cli_module._DEBUG, "on", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(remote_http, "BASE_BACKOFF_S", 0.0)


@pytest.fixture
def hub(monkeypatch, tiny_dir):
    with LocalHub() as server:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        server.add_repo(REPO, served_files(tiny_dir("llama-gqa")))
        yield server


def _cache(tmp_path: Path) -> Path:
    return tmp_path / "a" / "b" / "cache"


def outside(tmp_path: Path) -> set[str]:
    """Every path under ``tmp_path`` but the cache (where nothing may ever appear)."""
    cache = _cache(tmp_path)
    return {str(p) for p in tmp_path.rglob("*") if p != cache and cache not in p.parents and p not in cache.parents}


def run_hub(tmp_path: Path, *args, code: int, names=(), env=None, mode: str = "ranges"):
    """Run ``idinspect REPO ARGS`` from ``tmp_path/cwd`` with the cache at ``tmp_path/a/b/cache`` (so
    that a ``../../../../x`` commit under ``models--org--tiny/idinspect-ranges`` would land in ``tmp_path/a``)."""
    work, cache = tmp_path / "cwd", _cache(tmp_path)
    work.mkdir(exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    before = outside(tmp_path)
    result = run_case(work, *args, *COMMANDS[mode], "--cache-dir", cache, code=code, names=names, env=env or {})
    assert outside(tmp_path) == before, f"created outside the cache: {sorted(outside(tmp_path) - before)}"
    for p in cache.rglob("*"):
        assert p.resolve().is_relative_to(cache.resolve()), p
    return result


def api_fault(hub: LocalHub, edit=None, *, body: bytes | None = None, status: int = 200, headers=None, times: int = 1):
    """Answer the revision API with ``edit(real JSON)`` (or ``body``) ``times`` times."""
    if body is None:
        data = hub.api_body(REPO)
        edit(data)
        body = json.dumps(data).encode()
    hub.faults.append(Fault("body", host="hub", path="/api/models/", status=status, body=body,
                            headers={"Content-Type": "application/json", **(headers or {})}, times=times))


# --- security: a server-provided commit sha or file name never becomes a path ----------------------

BAD_SHAS = {
    "dotdot": "../../../../x",
    "dotdot-hex": "../../" + "a" * 34,
    "absolute": "/tmp/idinspect-pwned",
    "short": "a" * 39,
    "long": "a" * 41,
    "not-hex": "g" * 40,
    "upper": "A" * 40,
    "newline": "a" * 40 + "\n",
    "integer": 1234567890,
    "null": None,
    "list": ["a" * 40],
    "empty": "",
}


@pytest.mark.parametrize("mode", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_SHAS))
def test_commit_sha_is_validated_before_it_names_a_folder(hub, tmp_path, case, mode):
    api_fault(hub, lambda d: d.__setitem__("sha", BAD_SHAS[case]), times=10)
    run_hub(tmp_path, REPO, code=2, mode=mode, names=(f"/api/models/{REPO}", "commit sha", "HF_ENDPOINT"))


BAD_NAMES = {
    "dotdot": "../../x.safetensors",
    "dotdot-deep": "../../../../../../tmp/x.safetensors",
    "inner-dotdot": "sub/../../x.safetensors",
    "absolute": "/tmp/x.safetensors",
    "backslash": "..\\..\\x.safetensors",
    "empty-part": "a//model.safetensors",
    "dot": "./model.safetensors",
    "control": "x\x1b]52;c;QUFB\x07.safetensors",
    "nul": "x\x00.safetensors",
    "drive": "C:x.safetensors",
    "empty": "",
    "number": 5,
}


@pytest.mark.parametrize("mode", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_NAMES))
def test_listed_file_name_is_validated(hub, tmp_path, case, mode):
    def edit(d):
        d["siblings"].append({"rfilename": BAD_NAMES[case], "size": 10, "blobId": "b" * 40,
                              "lfs": {"sha256": "c" * 64, "size": 10, "pointerSize": 134}})
    api_fault(hub, edit, times=10)
    r = run_hub(tmp_path, REPO, code=2, mode=mode, names=(f"/api/models/{REPO}", "not a relative path", "HF_ENDPOINT"))
    assert "\x1b" not in r.err and "\x07" not in r.err


BAD_HEADERS = {
    "commit-dotdot": ("config.json", {"X-Repo-Commit": "../../../../x"}, "commit sha"),
    "commit-short": ("config.json", {"X-Repo-Commit": "abc"}, "commit sha"),
    "etag-dotdot": ("config.json", {"ETag": '"../../../../x"'}, "ETag"),
    "etag-slash": ("config.json", {"ETag": '"a/b"'}, "ETag"),
    "linked-etag-dotdot": ("model.safetensors", {"X-Linked-Etag": '"../../../../x"'}, "ETag"),
    "linked-etag-control": ("model.safetensors", {"X-Linked-Etag": '"a\x1b[2Jb"'}, "ETag"),
}


@pytest.mark.parametrize("mode", list(COMMANDS))
@pytest.mark.parametrize("case", list(BAD_HEADERS))
def test_unsafe_header_names_are_refused(hub, tmp_path, case, mode):
    fname, headers, what = BAD_HEADERS[case]
    hub.faults.append(Fault("headers", host="hub", path=f"/{fname}", headers=headers, times=50))
    run_hub(tmp_path, REPO, code=2, mode=mode, names=(fname, what, "HF_ENDPOINT"))


# --- security: bytes that do not match the hub's digests ----------------------------------------

CORRUPT = {
    # case: (host, path part, mode, extra args, expected digest kind)
    "weights-download": ("cdn", "/blobs/", "download", (), "sha256"),
    "config-ranges": ("hub", "/config.json", "ranges", (), "git blob sha"),
    "config-download": ("hub", "/config.json", "download", (), "git blob sha"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_downloaded_bytes_are_checked_against_the_hub_digest(hub, tmp_path, case):
    host, path, mode, extra, kind = CORRUPT[case]
    hub.faults.append(Fault("corrupt", host=host, path=path, times=50))
    fname = "config.json" if "config" in case else "model.safetensors"
    r = run_hub(tmp_path, REPO, *extra, code=2, mode=mode, names=(fname, kind, "expected", "got", "retry"))
    blob = hub.repos[REPO].commits[hub.repos[REPO].refs["main"]][fname]
    assert (blob.sha256 if kind == "sha256" else blob.git_sha) in r.err
    cache = _cache(tmp_path)
    left = [p for p in cache.rglob(fname) if p.exists()]
    assert not left, f"the corrupt copy stayed in the cache: {left}"


def test_export_refuses_corrupt_download(hub, tmp_path):
    hub.faults.append(Fault("corrupt", host="cdn", path="/blobs/", times=50))
    work = tmp_path / "work"
    work.mkdir()
    run_case(work, "export", REPO, "out", "--cache-dir", work / "cache", code=2,
             names=("model.safetensors", "sha256", "expected"), expect=("cache",))
    assert not (work / "out").exists()


def test_clean_download_still_passes(hub, tmp_path):
    """The checks above refuse only bad answers: the same hub, honest, is read and exported."""
    run_hub(tmp_path, REPO, code=0, mode="download")
    run_hub(tmp_path, REPO, code=0, mode="ranges")
    r = run_hub(tmp_path, REPO, "--offline", code=0, mode="ranges")
    assert "unidentified" in r.out


# --- malformed API answers: one line naming the URL --------------------------------------------

def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _sibling(key, value, sub=None):
    def edit(d):
        target = d["siblings"][0]
        if sub:
            target = target.setdefault(sub, {})
        target[key] = value
    return edit


MALFORMED = {
    "html": (b"<!DOCTYPE html><html><body>Bad gateway</body></html>", "HTML page"),
    "truncated": (None, "not valid JSON"),
    "empty": (b"", "not valid JSON"),
    "list": (b"[1, 2]", "not an object"),
    "string": (b'"hello"', "not an object"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    "nul": (b"\x00\x00\x00", "not valid JSON"),
    "sha-int": (_set("sha", 5), "commit sha"),
    "siblings-string": (_set("siblings", "model.safetensors"), "siblings as a str"),
    "siblings-dict": (_set("siblings", {"a": 1}), "siblings as a dict"),
    "siblings-of-strings": (_set("siblings", ["config.json"]), "sibling that is a str"),
    "size-string": (_sibling("size", "123"), "not a non-negative integer"),
    "size-negative": (_sibling("size", -1), "not a non-negative integer"),
    "size-float": (_sibling("size", 1.5), "not a non-negative integer"),
    "size-bool": (_sibling("size", True), "not a non-negative integer"),
    "lfs-string": (_sibling("lfs", "x"), "not an object"),
    "lfs-sha-short": (_sibling("sha256", "abc", sub="lfs"), "not 64 hex digits"),
    "lfs-sha-int": (_sibling("sha256", 7, sub="lfs"), "not 64 hex digits"),
    "lfs-size-string": (_sibling("size", "10", sub="lfs"), "not a non-negative integer"),
    "blob-id-int": (_sibling("blobId", 12), "not 40 hex digits"),
    "duplicate": (lambda d: d["siblings"].append(dict(d["siblings"][0])), "lists a file twice"),
}


@pytest.mark.parametrize("mode", list(COMMANDS))
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_api_answer_is_one_line_naming_the_url(hub, tmp_path, case, mode):
    edit, what = MALFORMED[case]
    if edit is None:
        body = json.dumps(hub.api_body(REPO)).encode()
        api_fault(hub, body=body[:len(body) // 2], times=10)
    elif isinstance(edit, bytes):
        api_fault(hub, body=edit, times=10)
    else:
        api_fault(hub, edit, times=10)
    run_hub(tmp_path, REPO, code=2, mode=mode, names=(f"/api/models/{REPO}", what, "HF_ENDPOINT"))


RETRY_AFTER = ["nan", "inf", "-inf", "-5", "soon", "Wed, 21 Oct 2015 07:28:00 GMT", "1e999", "\x1b[2J"]


@pytest.mark.parametrize("after", RETRY_AFTER)
def test_429_with_odd_retry_after_backs_off_then_succeeds(hub, tmp_path, after):
    hub.faults.append(Fault("status", host="hub", path="/api/models/", status=429, headers={"Retry-After": after}))
    run_hub(tmp_path, REPO, code=0)


@pytest.mark.parametrize("after", ["nan", "3600", "1e999"])
def test_429_to_the_end_names_the_url(hub, tmp_path, after):
    hub.faults.append(Fault("status", host="hub", path="/api/models/", status=429, headers={"Retry-After": after},
                            times=20))
    run_hub(tmp_path, REPO, code=2, names=(f"/api/models/{REPO}", "429", "retry later"))


@pytest.mark.parametrize("after", ["nan", "-1", "inf"])
def test_429_on_ranges_with_odd_retry_after(hub, tmp_path, after):
    hub.faults.append(Fault("status", host="cdn", path="/blobs/", status=429, headers={"Retry-After": after}, times=2))
    run_hub(tmp_path, REPO, code=0)


# --- slow servers: read timeout and deadline -----------------------------------------------------

DRIP = {
    # case: (host, path part, mode)
    "api": ("hub", "/api/models/", "ranges"),
    "api-download": ("hub", "/api/models/", "download"),
    "config": ("hub", "/config.json", "ranges"),
    "config-download": ("hub", "/config.json", "download"),
    "ranges": ("cdn", "/blobs/", "ranges"),
    "whole-file": ("cdn", "/blobs/", "download"),
    "tree": ("hub", "/tree/", "download"),
}


@pytest.mark.parametrize("case", list(DRIP))
def test_slow_drip_stops_at_the_deadline(hub, tmp_path, case):
    host, path, mode = DRIP[case]
    hub.faults.append(Fault("drip", host=host, path=path, delay=0.05, times=50))
    r = run_hub(tmp_path, REPO, code=2, mode=mode, env={"IDINSPECT_HUB_DEADLINE": "0.4"},
                names=("http://127.0.0.1", "bytes in", "IDINSPECT_HUB_DEADLINE"))
    assert "deadline" in r.err


@pytest.mark.parametrize("case", ["api", "config", "ranges"])
def test_stalled_server_stops_at_the_read_timeout(hub, tmp_path, case):
    host, path, mode = DRIP[case]
    hub.faults.append(Fault("drip", host=host, path=path, delay=1.5, times=50))
    run_hub(tmp_path, REPO, code=2, mode=mode, env={"IDINSPECT_HUB_READ_TIMEOUT": "0.3"},
            names=("http://127.0.0.1", "read timeout", "IDINSPECT_HUB_READ_TIMEOUT"))


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon", ""])
def test_bad_deadline_setting_is_named(hub, tmp_path, value):
    if value == "":
        run_hub(tmp_path, REPO, code=0, env={"IDINSPECT_HUB_DEADLINE": value})
        return
    run_hub(tmp_path, REPO, code=2, env={"IDINSPECT_HUB_DEADLINE": value},
            names=("IDINSPECT_HUB_DEADLINE", "positive number of seconds"))


class _NoSleep:
    """``time`` for huggingface_hub's retry loop: sleeping does not wait."""

    def __getattr__(self, name):
        import time

        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        pass


TREE = {
    "dotdot-path": "../../../x.safetensors",
    "absolute-path": "/tmp/x.safetensors",
    "dotdot-config": "../config.json",
}


@pytest.mark.parametrize("case", list(TREE))
def test_hostile_tree_listing_on_download(hub, tmp_path, case, monkeypatch):
    """snapshot_download's own listing (the tree API, which --download reads after the validated
    revision API) naming a path outside the snapshot: never fetched or written, one line naming the
    repository and HF_ENDPOINT. huggingface_hub's own backoff (~20 s over its retries) is not waited
    out here."""
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", _NoSleep())
    entries = [{"type": "file", "oid": "b" * 40, "size": 5, "path": TREE[case],
                "lfs": {"oid": "c" * 64, "size": 5, "pointerSize": 134}}]
    hub.faults.append(Fault("body", host="hub", path="/tree/", body=json.dumps(entries).encode(),
                            headers={"Content-Type": "application/json"}, times=10))
    run_hub(tmp_path, REPO, mode="download", code=2, names=(REPO,))


TREE_GARBAGE = {
    "html": b"<html><body>proxy error</body></html>",
    "truncated": b'[{"type": "file", "path": "config.json"',
    "not-a-list": b'{"a": 1}',
    "list-of-numbers": b"[1, 2, 3]",
}


@pytest.mark.parametrize("case", list(TREE_GARBAGE))
def test_garbage_tree_listing_on_download(hub, tmp_path, case, monkeypatch):
    """The tree API answering garbage: one line naming the repository (after huggingface_hub's own
    retries, not waited out here), nothing written outside the cache."""
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", _NoSleep())
    hub.faults.append(Fault("body", host="hub", path="/tree/", body=TREE_GARBAGE[case],
                            headers={"Content-Type": "application/json"}, times=20))
    run_hub(tmp_path, REPO, mode="download", code=2, names=(REPO,))
