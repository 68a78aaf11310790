"""Partial reads of hub checkpoints against a real local hub + CDN (tests/support/hub_server.py) on 127.0.0.1.

huggingface_hub is pointed at the local hub as ``HF_ENDPOINT`` would (its ``ENDPOINT`` and URL
template); every request goes through the library's own client. The servers count the bytes they
send, so "only the headers and the attention tensors" is checked byte for byte.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

import idinspect
from idinspect import cli as cli_module
from idinspect.sources import remote_http, remote_stream
from idinspect.sources.remote import coalesce
from idinspect.sources.remote_cache import FOLDER, RangeCache
from idinspect.sources.safetensors_format import tensor_spans
from tests.support.cli import run_cli
from tests.support.hub_server import BytesBlob, Fault, LocalHub, served_files
from tests.support.link import Link

REPO = "org/tiny-llama"
DEFAULT_PROBE = remote_stream.HEADER_PROBE


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setitem(cli_module._DEBUG, "on", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(remote_http, "BASE_BACKOFF_S", 0.0)
    # the length alone, then the JSON: not a byte past the header, so the counts below are exact
    # (the default probe, which reads a tiny shard whole, has its own test)
    monkeypatch.setattr(remote_stream, "HEADER_PROBE", 8)


@pytest.fixture
def hub(monkeypatch):
    with LocalHub() as server:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


@pytest.fixture
def sharded(tiny_dir) -> Path:
    return tiny_dir("llama-gqa", max_shard_size="20KB")


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


def inspect_json(*args: str) -> dict:
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def expected_bytes(folder: Path) -> tuple[int, int]:
    """(header bytes, attention bytes) of a local checkpoint, from its own reader and adapter."""
    model = idinspect.load(folder)
    reader = model.reader
    headers = 0
    for fname in reader.shard_files:
        with open(folder / fname, "rb") as f:
            headers += 8 + int.from_bytes(f.read(8), "little")
    spans = {fname: tensor_spans(folder / fname) for fname in reader.shard_files}
    attention = 0
    for i in range(model.num_layers):
        for key in model.adapter.attention_keys(i):
            start, end = spans[reader.file_of(key)][key]
            attention += end - start
    return headers, attention


def one_line_error(r, match: str) -> str:
    assert r.code == 2, (r.code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.search(match, lines[0]), lines[0]
    return lines[0]


def blob_path(hub: LocalHub, name: str) -> str:
    """The CDN path of file ``name`` of REPO's main (faults aimed at one file: shards are read in parallel)."""
    repo = hub.repos[REPO]
    return f"/blobs/{repo.commits[repo.refs['main']][name].sha256}"


def validator():
    import jsonschema

    schema = json.loads((Path(idinspect.__file__).parent / "schemas" / "report.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def partial_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.name.startswith(".part-")]


def fetch_threads_since(before: set[threading.Thread]) -> list[str]:
    """Names of the warm-up and fetch threads alive now that were not in ``before``."""
    return [t.name for t in set(threading.enumerate()) - before if t.name in ("idinspect-warm", "idinspect-fetch")]


# reading only what inspection needs ------------------------------------------------------------

def test_hub_id_reads_headers_and_attention_bytes_only(hub, sharded, cache):
    commit = hub.add_repo(REPO, served_files(sharded))
    got = inspect_json(REPO, "--cache-dir", str(cache))
    local = inspect_json(str(sharded))
    assert got["totals"] == local["totals"] and got["layers"] == local["layers"]
    assert got["findings"] == local["findings"]
    headers, attention = expected_bytes(sharded)
    fetch = got["model"]["fetch"]
    assert hub.bytes_served["cdn"] == fetch["bytes_fetched"] == headers + attention    # ratio exactly 1
    assert fetch["header_bytes"] == headers and fetch["attention_bytes"] == attention
    assert fetch["checkpoint_bytes"] == sum(p.stat().st_size for p in sharded.glob("*.safetensors"))
    assert got["model"]["revision"] == commit == fetch["commit"]
    validator().validate(got)                                       # "fetch" is part of the contract
    resolves = [e for e in hub.log if "/resolve/" in e["path"]]
    assert resolves and all(f"/resolve/{commit}/" in e["path"] for e in resolves)   # pinned to the commit
    assert all(e["range"] for e in hub.log if e["host"] == "cdn")                  # never a whole file
    ours = [e for e in hub.log if e["path"] != "/api/agent-harnesses"]   # the library's own user-agent lookup
    assert all("hf_hub/" in (e["user_agent"] or "") for e in ours)          # the library's client
    ranged = [e for e in hub.log if e["host"] == "cdn" and not e["range"].startswith("bytes=0-7")
              and not re.match(r"bytes=8-", e["range"])]
    assert len(ranged) == fetch["requests"] - 2 * len(list(sharded.glob("*.safetensors")))


def test_one_request_per_header_and_the_probe_bytes_are_used(hub, sharded, cache, monkeypatch):
    """The default probe reads each shard's length and JSON in one request; what it fetched past the
    header is cached as tensor bytes, so the CDN sends the union of probes and attention spans, once."""
    monkeypatch.setattr(remote_stream, "HEADER_PROBE", DEFAULT_PROBE)
    hub.add_repo(REPO, served_files(sharded))
    got = inspect_json(REPO, "--cache-dir", str(cache))
    local = inspect_json(str(sharded))
    assert got["layers"] == local["layers"] and got["totals"] == local["totals"]
    shards = sorted(sharded.glob("*.safetensors"))
    probes = [e for e in hub.log if e["host"] == "cdn" and e["range"].startswith("bytes=0-")]
    assert len(probes) == len(shards)                                  # one round trip per shard's header
    model = idinspect.load(sharded)
    wanted = {p.name: [(0, min(DEFAULT_PROBE, p.stat().st_size))] for p in shards}
    for i in range(model.num_layers):
        for key in model.adapter.attention_keys(i):
            fname = model.reader.file_of(key)
            wanted[fname].append(tensor_spans(sharded / fname)[key])
    union = sum(b - a for spans in wanted.values() for a, b in coalesce(spans))
    assert hub.bytes_served["cdn"] == got["model"]["fetch"]["bytes_fetched"] == union


def test_second_run_and_offline_come_from_the_cache(hub, sharded, cache, monkeypatch):
    hub.add_repo(REPO, served_files(sharded))
    first = inspect_json(REPO, "--cache-dir", str(cache))
    hub.reset_counts()
    second = inspect_json(REPO, "--cache-dir", str(cache))
    assert hub.bytes_served["cdn"] == 0 and second["model"]["fetch"]["bytes_fetched"] == 0
    assert [e["path"] for e in hub.log if e["path"] != "/api/agent-harnesses"] == [f"/api/models/{REPO}"]       # the revision is still resolved online
    assert second["layers"] == first["layers"]
    hub.reset_counts()
    offline = inspect_json(REPO, "--cache-dir", str(cache), "--offline")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    env_offline = inspect_json(f"{REPO}@{first['model']['revision']}", "--cache-dir", str(cache))
    assert hub.log == []
    assert offline["layers"] == env_offline["layers"] == first["layers"]
    assert offline["model"]["revision"] == first["model"]["revision"]


def test_offline_without_the_ranges(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    one_line_error(run_cli(REPO, "--cache-dir", str(cache), "--offline"),
                   rf"{REPO} is not in the local cache .* offline mode is on")
    assert hub.log == []


def test_offline_with_a_range_missing_names_it(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    inspect_json(REPO, "--cache-dir", str(cache))
    ranges = sorted(p for p in (cache / "models--org--tiny-llama" / FOLDER).rglob("*-*") if p.is_file()
                    and re.match(r"^\d+-\d+$", p.name) and not p.name.startswith("0-"))
    victim = next(p for p in ranges if not p.name.startswith("8-"))
    victim.unlink()
    one_line_error(run_cli(REPO, "--cache-dir", str(cache), "--offline"),
                   r"bytes \d+-\d+ are not in the range cache .* offline mode is on")


def test_moved_branch_is_seen_and_the_run_stays_pinned(hub, sharded, tiny_dir, cache):
    """main moves right after the first run resolved it: that run reads its own commit to the end;
    the next run resolves again and reads the new commit (the cache does not hide the move)."""
    old = hub.add_repo(REPO, served_files(sharded))
    other = tiny_dir("llama-gqa", max_shard_size="30KB")
    new = hub.add_repo(REPO, served_files(other), commit="b" * 40)
    hub.repos[REPO].refs["main"] = old
    hub.move_after = (1, REPO, "main", new)
    first = inspect_json(REPO, "--cache-dir", str(cache))
    assert first["model"]["revision"] == old
    assert hub.repos[REPO].refs["main"] == new          # it did move during the run
    assert all(old in e["path"] for e in hub.log if "/resolve/" in e["path"])
    hub.reset_counts()
    second = inspect_json(REPO, "--cache-dir", str(cache))
    assert second["model"]["revision"] == new and hub.bytes_served["cdn"] > 0
    assert all(new in e["path"] for e in hub.log if "/resolve/" in e["path"])


def test_answer_for_another_commit_stops_the_run(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    hub.faults.append(Fault("wrong_commit", host="hub", path="-of-"))
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)), r"answered for commit f{40} .* the revision moved during the run")
    assert partial_files(cache) == []


# faults ----------------------------------------------------------------------------------------

def test_429_with_retry_after_is_waited_out(hub, sharded, cache, monkeypatch):
    waits = []
    monkeypatch.setattr(remote_http.time, "sleep", waits.append)
    hub.add_repo(REPO, served_files(sharded))
    hub.faults += [Fault("status", host="cdn", status=429, headers={"Retry-After": "2"}),
                   Fault("status", host="hub", path="/api/models", status=429, headers={"Retry-After": "1"})]
    got = inspect_json(REPO, "--cache-dir", str(cache))
    assert 2.0 in waits and 1.0 in waits
    headers, attention = expected_bytes(sharded)
    assert got["model"]["fetch"]["bytes_fetched"] == headers + attention


def test_429_asking_too_long_a_wait_stops(hub, sharded, cache, monkeypatch):
    monkeypatch.setattr(remote_http.time, "sleep", lambda s: pytest.fail(f"slept {s}"))
    hub.add_repo(REPO, served_files(sharded))
    hub.faults.append(Fault("status", host="cdn", status=429, headers={"Retry-After": "3600"}))
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)), r"rate limited by the hub \(HTTP 429, Retry-After 3600 s\)")
    assert partial_files(cache) == []


def test_dropped_connections_resume_from_the_first_missing_byte(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    hub.faults += [Fault("drop", host="cdn", keep=0.5) for _ in range(3)]
    got = inspect_json(REPO, "--cache-dir", str(cache))
    headers, attention = expected_bytes(sharded)
    assert hub.bytes_served["cdn"] == headers + attention       # nothing fetched twice
    assert got["layers"] == inspect_json(str(sharded))["layers"]


def test_short_206_answers_are_completed(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    hub.faults += [Fault("short", host="cdn", keep=0.25) for _ in range(4)]
    got = inspect_json(REPO, "--cache-dir", str(cache))
    headers, attention = expected_bytes(sharded)
    assert hub.bytes_served["cdn"] == headers + attention
    assert got["layers"] == inspect_json(str(sharded))["layers"]


def test_verify_downloads_whole_files(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    r = run_cli("verify", REPO, REPO, "--cache-dir", str(cache), "--no-functional")
    assert r.code == 0, r.stderr
    assert hub.bytes_served["cdn"] >= sum(p.stat().st_size for p in sharded.glob("*.safetensors"))
    assert all(e["range"] is None for e in hub.log if e["host"] == "cdn" and e["method"] == "GET")


def test_a_connection_that_keeps_dropping_is_a_clean_error(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    first = blob_path(hub, "model-00001-of-00003.safetensors")
    hub.faults += [Fault("drop", host="cdn", path=first, keep=0.0) for _ in range(remote_http.MAX_TRIES)]
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)), r"network error reading bytes .*6 tries")
    assert partial_files(cache) == []


def test_server_errors_are_retried_then_reported(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    hub.faults += [Fault("status", host="cdn", status=503)]
    inspect_json(REPO, "--cache-dir", str(cache))
    shutil.rmtree(cache)
    first = blob_path(hub, "model-00001-of-00003.safetensors")
    hub.faults += [Fault("status", host="cdn", path=first, status=500) for _ in range(remote_http.MAX_TRIES)]
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)), r"the hub answered HTTP 500")
    assert partial_files(cache) == []


def test_server_ignoring_range_is_stopped(hub, tiny_dir, cache):
    folder = tiny_dir("llama-gqa")
    hub.add_repo(REPO, served_files(folder))
    hub.faults.append(Fault("ignore_range", host="cdn"))
    line = one_line_error(run_cli(REPO, "--cache-dir", str(cache)),
                          r"model.safetensors: the server ignored the Range request .* Pass --download")
    size = (folder / "model.safetensors").stat().st_size
    assert f"{size} bytes" in line
    ranges = cache / "models--org--tiny-llama" / FOLDER
    assert [p for p in ranges.rglob("*") if p.is_file() and p.parent.name == "model.safetensors"] == []
    assert partial_files(cache) == []


def test_gated_repo_needs_a_token(hub, sharded, cache, monkeypatch):
    hub.add_repo(REPO, served_files(sharded), gated=True)
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)),
                   rf"{REPO} is gated: accept its terms at {re.escape(hub.endpoint)}/{REPO} and pass --token or set HF_TOKEN")
    one_line_error(run_cli(REPO, "--cache-dir", str(cache), "--token", "hf_wrong"), rf"{REPO} is gated")
    hub.reset_counts()
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    inspect_json(REPO, "--cache-dir", str(cache))
    assert all(e["auth"] == "Bearer hf_good" for e in hub.log if e["host"] == "hub")
    assert all(e["auth"] is None for e in hub.log if e["host"] == "cdn")   # the token never leaves the hub


@pytest.mark.parametrize("source, match", [("org/missing", r"org/missing: not a local directory, and no such model"),
                                           (f"{REPO}@v9", r"no revision 'v9' on the hub")])
def test_not_found(hub, sharded, cache, source, match):
    hub.add_repo(REPO, served_files(sharded))
    one_line_error(run_cli(source, "--cache-dir", str(cache)), match)


def test_repository_without_safetensors(hub, cache):
    hub.add_repo(REPO, {"config.json": b'{"model_type": "llama"}', "pytorch_model.bin": b"x" * 100})
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)), r"only pickle weights \(pytorch_model.bin\) and no safetensors")


def test_a_file_missing_from_the_repository_is_named(hub, sharded, cache):
    """A 404 on a file the checkpoint needs, seen before asking for it: the shard an index names,
    config.json (a GGUF-only repository points at the org/name:file.gguf form)."""
    files = served_files(sharded)
    del files["model-00002-of-00003.safetensors"]
    hub.add_repo(REPO, files)
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)),
                   r"names shard model-00002-of-00003.safetensors, which the repository does not hold")
    hub.add_repo("org/only-gguf", {"README.md": b"x", "m-Q4_K.gguf": b"GGUF"})
    one_line_error(run_cli("org/only-gguf", "--cache-dir", str(cache)),
                   r"org/only-gguf@\w{12}: no config.json in the repository; it holds GGUF files: inspect one as "
                   r"org/only-gguf:m-Q4_K.gguf$")
    assert partial_files(cache) == []


def test_a_failed_open_stops_the_warm_up_fetch_before_returning(hub, sharded, cache):
    """The warm-up starts fetching attention tensors before the command knows the checkpoint is
    incomplete; when the command fails, that fetch is stopped before the call returns (a library
    caller, or the next test, never sees a write outliving the call)."""
    files = served_files(sharded)
    del files["model-00002-of-00003.safetensors"]
    hub.add_repo(REPO, files)
    hub.link = Link(rate=1e5, latency=0.0)      # slow enough that the speculated tensors are still coming
    before = set(threading.enumerate())
    one_line_error(run_cli(REPO, "--cache-dir", str(cache)),
                   r"names shard model-00002-of-00003.safetensors, which the repository does not hold")
    assert fetch_threads_since(before) == []
    assert any(e["range"] and e["range"] != "bytes=0-7" for e in hub.log if e["host"] == "cdn")  # it had started
    assert partial_files(cache) == []


def test_a_warm_up_never_taken_is_stopped_when_the_command_fails(hub, sharded, cache):
    """compare warms both hub ids; when A fails, B's warm-up (never taken) is stopped before the
    command returns, not left reading headers into the cache."""
    hub.add_repo(REPO, served_files(sharded))
    hub.link = Link(rate=2e4, latency=0.2)     # B's header reads are still under way when A fails
    before = set(threading.enumerate())
    one_line_error(run_cli("compare", "org/missing", REPO, "--cache-dir", str(cache)),
                   r"org/missing: not a local directory, and no such model")
    assert fetch_threads_since(before) == []
    assert partial_files(cache) == []


def test_unreachable_hub_uses_the_range_cache(hub, sharded, cache, monkeypatch):
    hub.add_repo(REPO, served_files(sharded))
    first = inspect_json(REPO, "--cache-dir", str(cache))
    monkeypatch.setattr(hf_constants, "ENDPOINT", "http://127.0.0.1:9")    # nothing listens on port 9
    monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")
    again = inspect_json(REPO, "--cache-dir", str(cache))
    assert again["layers"] == first["layers"]
    one_line_error(run_cli("org/other", "--cache-dir", str(cache)), r"org/other: network error")


def test_export_still_downloads_whole_files(hub, sharded, cache, tmp_path):
    hub.add_repo(REPO, served_files(sharded))
    r = run_cli("export", REPO, str(tmp_path / "out"), "--cache-dir", str(cache))
    assert r.code == 0, r.stderr
    total = sum(p.stat().st_size for p in sharded.glob("*.safetensors"))
    assert hub.bytes_served["cdn"] >= total
    assert all(e["range"] is None for e in hub.log if e["host"] == "cdn" and e["method"] == "GET")


def test_download_flag_fetches_whole_files(hub, sharded, cache):
    hub.add_repo(REPO, served_files(sharded))
    got = inspect_json(REPO, "--cache-dir", str(cache), "--download")
    assert "fetch" not in got["model"]
    assert hub.bytes_served["cdn"] == sum(p.stat().st_size for p in sharded.glob("*.safetensors"))


def test_progress_shows_bytes_fetched(hub, sharded, cache, monkeypatch):
    from idinspect.progress import ProgressReporter

    seen = []
    monkeypatch.setattr(ProgressReporter, "download_bytes",
                        lambda self, name, desc, done, total: seen.append((desc, done, total)))
    hub.add_repo(REPO, served_files(sharded))
    r = run_cli(REPO, "--cache-dir", str(cache), "--progress", "always")
    assert r.code == 0, r.stderr
    _headers, attention = expected_bytes(sharded)
    fetching = [s for s in seen if s[0].startswith("fetching attention tensors")]
    assert fetching and fetching[-1][1] == fetching[-1][2] == attention      # the bar ends at every planned byte


# pieces -------------------------------------------------------------------------------------------

def test_coalesce():
    assert coalesce([(10, 20), (0, 10), (30, 40), (35, 50), (60, 60)]) == [(0, 20), (30, 50), (60, 60)]


def test_range_cache_writes_whole_ranges_or_nothing(tmp_path):
    c = RangeCache(tmp_path, "a" * 40)
    with c.writer("f.safetensors", 0, 4) as out:
        out.write(b"abcd")
    with pytest.raises(OSError), c.writer("f.safetensors", 10, 20) as out:
        out.write(b"short")
    with pytest.raises(RuntimeError), c.writer("f.safetensors", 20, 22) as out:
        out.write(b"xy")
        raise RuntimeError("killed mid-write")
    assert c.spans("f.safetensors") == [(0, 4)]
    assert c.missing("f.safetensors", 2, 12) == [(4, 12)]
    assert sorted(os.listdir(tmp_path / ("a" * 40) / "f.safetensors")) == ["0-4"]
    buf = bytearray(3)
    c.read_into("f.safetensors", 1, memoryview(buf))
    assert bytes(buf) == b"bcd"


def test_server_counts_are_a_real_measure(hub):
    """Positive control: the CDN counter sees every byte of a plain ranged GET."""
    import httpx2

    hub.add_repo(REPO, {"model.safetensors": BytesBlob(bytes(range(256)) * 4)})
    blob = hub.repos[REPO].commits[hub.repos[REPO].refs["main"]]["model.safetensors"]
    r = httpx2.get(f"{hub.cdn}/blobs/{blob.sha256}", headers={"Range": "bytes=10-109"})
    assert r.status_code == 206 and len(r.content) == 100 and hub.bytes_served["cdn"] == 100
