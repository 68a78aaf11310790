"""Background fetching of a hub checkpoint's planned tensors (idinspect/sources/remote_stream.py),
against the real local hub + CDN on 127.0.0.1, with and without a paced link (tests/support/link.py).

Every run here must give the local inspection's counts: what changes is where the bytes wait
(range cache or memory window), how they are split, and the pace they arrive at.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants as hf_constants

from idinspect import cli as cli_module
from idinspect.sources import remote_http, remote_stream
from tests.support.cli import run_cli
from tests.support.hub_server import Fault, LocalHub, served_files
from tests.support.link import Link

REPO = "org/tiny-llama"


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setitem(cli_module._DEBUG, "on", False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(remote_http, "BASE_BACKOFF_S", 0.0)


@contextlib.contextmanager
def _serve(monkeypatch, link: Link | None = None) -> Iterator[LocalHub]:
    with LocalHub(link=link) as server:
        monkeypatch.setattr(hf_constants, "ENDPOINT", server.endpoint)
        monkeypatch.setattr(hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
        yield server


@pytest.fixture
def sharded(tiny_dir) -> Path:
    return tiny_dir("llama-gqa", max_shard_size="20KB")


def inspect_json(*args: str) -> dict:
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def range_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*-*") if p.is_file() and p.parent.name.endswith(".safetensors")]


def same_counts(got: dict, local: dict) -> None:
    assert got["totals"] == local["totals"] and got["layers"] == local["layers"]
    assert got["findings"] == local["findings"]


@pytest.mark.parametrize("chunk", [remote_stream.CHUNK, 1000])
def test_memory_window_gives_the_local_counts_and_caches_no_tensor(monkeypatch, sharded, tmp_path, chunk):
    """Planned bytes over the disk share stream through memory: a window smaller than one tensor
    (pieces of 1000 bytes, tensors over several pieces and pieces over two tensors) still reads
    every byte once, and no tensor range is left in the cache."""
    monkeypatch.setattr(remote_stream, "DISK_SHARE", 0.0)
    monkeypatch.setattr(remote_stream, "WINDOW", 1500)
    monkeypatch.setattr(remote_stream, "CHUNK", chunk)
    monkeypatch.setattr(remote_stream, "HEADER_PROBE", 8)
    local = inspect_json(str(sharded))
    with _serve(monkeypatch) as hub:
        hub.add_repo(REPO, served_files(sharded))
        got = inspect_json(REPO, "--cache-dir", str(tmp_path / "c"))
        fetch = got["model"]["fetch"]
        assert hub.bytes_served["cdn"] == fetch["header_bytes"] + fetch["attention_bytes"]
    same_counts(got, local)
    cached = range_files(tmp_path / "c")
    assert cached and all(int(p.name.split("-")[1]) <= 8 + 2048 for p in cached)   # headers only (tiny shards)


def test_paced_link_delivers_the_bytes_intact(monkeypatch, sharded, tmp_path):
    """A throttled, delayed link (shared bandwidth, latency before every answer) changes no count."""
    link = Link(rate=2e6, latency=0.01, burst=4096)
    local = inspect_json(str(sharded))
    with _serve(monkeypatch, link) as hub:
        hub.add_repo(REPO, served_files(sharded))
        got = inspect_json(REPO, "--cache-dir", str(tmp_path / "c"))
        assert link.bytes_sent >= hub.bytes_served["cdn"] > got["model"]["fetch"]["attention_bytes"]
    same_counts(got, local)


def test_a_failed_piece_stops_the_run_with_one_line(monkeypatch, sharded, tmp_path):
    """A piece that keeps failing is raised by the read that waits for it: one line, exit 2."""
    monkeypatch.setattr(remote_stream, "HEADER_PROBE", 8)
    with _serve(monkeypatch) as hub:
        hub.add_repo(REPO, served_files(sharded))
        hub.faults.append(Fault("status", host="cdn", status=500, after=6, times=100))   # headers pass, pieces fail
        r = run_cli(REPO, "--cache-dir", str(tmp_path / "c"), "--format", "json")
    assert r.code == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_link_paces_bytes_and_delays_answers():
    """Positive control of the bench's link: a paced GET takes at least bytes / rate + latency."""
    import time

    import httpx2

    with LocalHub(link=Link(rate=4e6, latency=0.05, burst=1)) as hub:
        hub.add_repo(REPO, {"model.safetensors": bytes(400_000)})
        blob = hub.repos[REPO].commits[hub.repos[REPO].refs["main"]]["model.safetensors"]
        t0 = time.monotonic()
        r = httpx2.get(f"{hub.cdn}/blobs/{blob.sha256}", headers={"Range": "bytes=0-399999"})
        took = time.monotonic() - t0
    assert r.status_code == 206 and len(r.content) == 400_000
    assert took >= 0.05 + 0.1 * 0.9


@pytest.mark.parametrize("to_disk", [True, False])
def test_replan_drops_unstarted_tensors_and_adds_new_ones(tmp_path, monkeypatch, to_disk):
    """A prefetch started on a guess (remote_warm) and re-planned to the adapter's tensors fetches the
    new ones, never starts the dropped ones, and reads give the served bytes."""
    from idinspect.sources.remote_cache import RangeCache
    from idinspect.sources.remote_http import RangeFetcher, RemoteFile
    from idinspect.sources.remote_stream import Prefetch

    data = bytes(range(256)) * 64                       # 16 KiB
    with _serve(monkeypatch, Link(rate=2e5, latency=0.0)) as hub:
        commit = hub.add_repo(REPO, {"model.safetensors": data})
        files = {"model.safetensors": RemoteFile("model.safetensors", len(data), None)}
        cache = RangeCache(tmp_path, commit)
        fetcher = RangeFetcher(REPO, commit, None)
        guess = {f"t{i}": ("model.safetensors", 1024 * i, 1024 * (i + 1)) for i in range(16)}
        p = Prefetch(cache, fetcher, files, guess, to_disk=to_disk, window=4096, workers=2, chunk=1024)
        plan = {"t1": guess["t1"], "x": ("model.safetensors", 100, 300)}    # t1 kept, x new, the rest dropped
        p.replan(plan)
        for name, (_, a, b) in plan.items():
            buf = bytearray(b - a)
            if not p.read(name, "model.safetensors", a, memoryview(buf)):
                cache.read_into("model.safetensors", a, memoryview(buf))
            assert bytes(buf) == data[a:b]
        p.close()
        served = hub.bytes_served["cdn"]
    assert "bytes=100-299" in [e["range"] for e in hub.log if e["host"] == "cdn"]
    # t1 (1 KiB), x and at most the pieces already in flight when re-planned (2 workers): not 16 KiB
    assert 1024 + 200 <= served < 4096


def test_a_read_drops_each_piece_as_it_arrives(tmp_path, monkeypatch):
    """A read that waits for its tensor's pieces copies and drops each as it arrives, so a tensor larger
    than the window is never held twice (pieces and the tensor being filled): at 70B width a 128 MiB
    W_Q per layer worker did, 100+ MiB of the process's peak."""
    from idinspect.sources.remote_cache import RangeCache
    from idinspect.sources.remote_http import RangeFetcher, RemoteFile
    from idinspect.sources.remote_stream import Prefetch

    data = bytes(range(256)) * 256                      # 64 KiB: one tensor of 16 pieces of 4 KiB
    # 4 KiB every 40 ms: the reader copies a piece long before the next two arrive, even on a busy machine
    with _serve(monkeypatch, Link(rate=1e5, latency=0.0)) as hub:
        commit = hub.add_repo(REPO, {"model.safetensors": data})
        files = {"model.safetensors": RemoteFile("model.safetensors", len(data), None)}
        held: list[int] = []
        arrived: list[int] = []
        p = Prefetch(RangeCache(tmp_path, commit), RangeFetcher(REPO, commit, None), files,
                     {"w": ("model.safetensors", 0, len(data))}, to_disk=False, window=4096, workers=2, chunk=4096)
        p.on_bytes = lambda n: (arrived.append(n), held.append(p._held))
        out = bytearray(len(data))
        assert p.read("w", "model.safetensors", 0, memoryview(out))
        p.close()
    assert bytes(out) == data
    assert sum(arrived) == len(data) and len(arrived) >= 16 and p._held == 0
    # pieces in flight (2 workers) and a few not yet copied, never the whole tensor (64 KiB; waiting
    # for every piece before copying, held reaches it)
    assert max(held) <= len(data) // 2, held


def test_memory_mode_reuses_piece_maps_within_the_window(tmp_path, monkeypatch):
    """A stream of many pieces through a small window takes each piece's map from those already
    read (a fresh map costs page faults and zeroing on every byte: about a quarter of the fetch's CPU
    on a fast link) while maps kept plus bytes held stay within the window; the bytes read are the
    served ones although every reused map held another piece's bytes."""
    import mmap as real_mmap
    import types

    from idinspect.sources.remote_cache import RangeCache
    from idinspect.sources.remote_http import RangeFetcher, RemoteFile
    from idinspect.sources.remote_stream import Prefetch

    created: list[int] = []

    def counting_mmap(fd, size, *args, **kw):
        created.append(size)
        return real_mmap.mmap(fd, size, *args, **kw)

    monkeypatch.setattr(remote_stream, "mmap", types.SimpleNamespace(mmap=counting_mmap))
    data = bytes((i * 7 + i // 4096) % 251 for i in range(256 << 10))   # 256 KiB, no two pieces alike
    piece, window = 4096, 16384
    with _serve(monkeypatch) as hub:
        commit = hub.add_repo(REPO, {"model.safetensors": data})
        files = {"model.safetensors": RemoteFile("model.safetensors", len(data), None)}
        names = {f"t{i}": ("model.safetensors", i * piece, (i + 1) * piece) for i in range(len(data) // piece)}
        p = Prefetch(RangeCache(tmp_path, commit), RangeFetcher(REPO, commit, None), files, names,
                     to_disk=False, window=window, workers=2, chunk=piece)
        bound: list[int] = []
        p.on_bytes = lambda n: bound.append(p._held + sum(len(m) for m in p._maps._kept))
        for name, (_, a, b) in names.items():
            out = bytearray(b - a)
            assert p.read(name, "model.safetensors", a, memoryview(out))
            assert bytes(out) == data[a:b], name
        p.close()
    assert len(names) == 64 and max(bound) <= window
    # the ramp's quarter pieces, then at most the window's worth of full ones (64 without reuse)
    assert len(created) <= 2 + window // piece + 2, created


def test_allocator_threshold_is_fixed_on_glibc():
    """The resident-set fix of long remote reads (process_memory) takes effect where glibc runs."""
    import platform

    from idinspect.sources.process_memory import return_large_blocks

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt's M_MMAP_THRESHOLD is glibc's")
    assert return_large_blocks() and return_large_blocks()       # set, and idempotent


def _wait_for(predicate, seconds: float = 20.0) -> bool:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def test_read_ahead_lets_the_stream_run_past_the_window(monkeypatch, sharded, tmp_path):
    """A reader whose memory plan leaves room (``Model.read_ahead``) lets the planned tensors streamed
    through memory be fetched that far ahead of its reads: with a window of 1500 bytes the rest of
    the model arrives while nothing more is read, and a budget below the window keeps the window."""
    import idinspect

    monkeypatch.setattr(remote_stream, "DISK_SHARE", 0.0)
    monkeypatch.setattr(remote_stream, "WINDOW", 1500)
    monkeypatch.setattr(remote_stream, "CHUNK", 1000)
    with _serve(monkeypatch) as hub:
        hub.add_repo(REPO, served_files(sharded))
        with idinspect.load(REPO, cache_dir=str(tmp_path / "c")) as model:
            reader = model.reader
            model.read_ahead(10)
            assert reader._window == 1500
            model.read_ahead(1 << 20)
            model.layer(0)
            prefetch = reader._prefetch
            assert prefetch is not None and not prefetch.to_disk and prefetch.window == 1 << 20
            planned = reader.planned_bytes()
            assert planned > 4 * 1500
            # every planned byte is fetched (and held) with only layer 0 read: the window would stop it at ~1500
            waiting = (remote_stream._PENDING, remote_stream._RUNNING)
            assert _wait_for(lambda: prefetch._active == 0 and
                             all(p.state not in waiting for ps in prefetch._of.values() for p in ps)), prefetch._held
            assert prefetch._held == sum(p.end - p.start for p in {id(p): p for ps in prefetch._of.values() for p in ps}.values())
            assert prefetch._held > 4 * 1500


def test_compare_and_inspect_give_their_spare_budget_to_read_ahead(monkeypatch, sharded, tmp_path):
    """compare's pass (:data:`parallel.STREAM_BYTES`) and inspect's (:data:`parallel.IN_FLIGHT_BYTES`)
    pass what their layers in flight leave of their budget to the reader: a 70B-wide layer (288 MiB)
    is far larger than the default window, and a pass that read it window by window left the link
    idle while it worked (70B remote compare 216 -> 169 s)."""
    import idinspect
    from idinspect.analysis.analyzer import analyze
    from idinspect.compare.invariants import model_invariants
    from idinspect.numerics import parallel

    monkeypatch.setattr(remote_stream, "DISK_SHARE", 0.0)
    monkeypatch.setattr(remote_stream, "WINDOW", 1500)
    with _serve(monkeypatch) as hub:
        hub.add_repo(REPO, served_files(sharded))
        for run, budget in ((model_invariants, parallel.STREAM_BYTES), (analyze, parallel.IN_FLIGHT_BYTES)):
            with idinspect.load(REPO, cache_dir=str(tmp_path / run.__name__)) as model:
                run(model)
                window = model.reader._window
            assert budget // 2 < window <= budget, (run.__name__, window)
