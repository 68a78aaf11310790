"""``python -m bench.remote_link [--shapes 1b,8b] [--rates 125,500] [--latency-ms 30] [--repeats 2]``:
``idinspect HUB_ID`` over a link of stated bandwidth and latency (issue 40).

The Llama-3.2-1B and Llama-3.1-8B shapes of :mod:`bench.hub_ranges` (tensor data generated on the
fly) are served by the local hub + CDN of ``tests/support/hub_server.py`` in a child process, every
answer paced by one :class:`tests.support.link.Link`: ``rate`` MB/s (1 MB = 10^6 bytes) shared by all
connections, ``latency`` before each answer's first byte (API, resolve, redirect, config, headers and
ranges alike: a redirected range request pays it twice). Alternating within each repeat:

- **plain**: the attention spans (coalesced, in 16 MB pieces) fetched straight from the CDN URLs by
  8 threads with ``httpx``, bodies discarded: what the link itself delivers (no API, no redirects,
  no analysis);
- **idinspect**: ``python -m idinspect HUB_ID --format json`` in a child process into an empty cache,
  the whole process timed (interpreter start and imports count);
- **cached**: the same command again from the range cache it filled (only the revision API call goes
  out): the process's own work without the transfer, under the same load.

Target: idinspect wall <= 1.2 x attention bytes / rate + 2 s. Also reported: idinspect / max(plain,
cached), how close the run comes to the larger of its two parts (transfer, own work) measured
apart (1.0: fully overlapped; on a loaded 2-core machine the own work is the larger). And the ratio wall / target, the
achieved fraction of the link (attention bytes / rate / wall), the request count (the hub's and the
CDN's logs, and idinspect's own ``fetch.requests``), the load average. Results go to stdout and
``bench/results/<stamp>-remote-link.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from .hub_ranges import FULL_RANK_BLOCK, LLAMA_1B, LLAMA_8B, build_repo
from .machine import describe, load_average
from .measure import idinspect_argv, run_child

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
#: repo id, shape, shards, repeating block of the generated data (:data:`.hub_ranges.FULL_RANK_BLOCK` at 8B)
SHAPES = {"1b": ("bench/llama-3.2-1b-shaped", LLAMA_1B, 1, None),
          "8b": ("bench/llama-3.1-8b-shaped", LLAMA_8B, 4, FULL_RANK_BLOCK)}
PIECE, THREADS = 16 << 20, 8


def with_block(files: dict, facts: dict, block: int | None) -> tuple[dict, dict]:
    """``build_repo``'s files with their generated data repeating every ``block`` bytes (None: the default)."""
    if block is not None:
        files = {n: ((*v[:4], block) if isinstance(v, tuple) else v) for n, v in files.items()}
    return files, facts


# the server, in a child process (its own GIL) ---------------------------------------------------

def serve(conn, repos: dict) -> None:
    """Serve ``repos`` (repo id -> files; a tuple ``("pattern", prefix, size, seed[, block])`` is generated data)
    until told to stop. Commands: ``("link", bytes/s, seconds)``, ``"reset"``, ``"counts"``, ``"stop"``."""
    sys.path.insert(0, str(ROOT))
    from tests.support.hub_server import LocalHub, PatternBlob
    from tests.support.link import Link

    with LocalHub() as hub:
        for repo_id, files in repos.items():
            blobs = {n: (PatternBlob(v[1], v[2], seed=v[3], tag=repo_id, **({"block": v[4]} if len(v) > 4 else {}))
                         if isinstance(v, tuple) else v) for n, v in files.items()}
            hub.add_repo(repo_id, blobs)
        shas = {r: {n: b.sha256 for n, b in hub.repos[r].commits[hub.repos[r].refs["main"]].items()} for r in hub.repos}
        conn.send((hub.endpoint, hub.cdn, shas))
        while True:
            cmd = conn.recv()
            if isinstance(cmd, tuple) and cmd[0] == "link":
                hub.link = Link(rate=cmd[1], latency=cmd[2])
                conn.send(True)
            elif cmd == "reset":
                hub.reset_counts()
                conn.send(True)
            elif cmd == "counts":
                requests = {h: sum(1 for e in hub.log if e["host"] == h) for h in ("hub", "cdn")}
                conn.send({"bytes": dict(hub.bytes_served), "requests": requests})
            else:
                break


class Server:
    """The serving child and its pipe."""

    def __init__(self, repos: dict):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, repos), daemon=True)
        self.proc.start()
        self.endpoint, self.cdn, self.shas = self.conn.recv()

    def ask(self, cmd):
        self.conn.send(cmd)
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send("stop")
        self.proc.join(timeout=10)


def client_env(endpoint: str) -> dict:
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=str(ROOT))
    env.pop("HF_TOKEN", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)   # bytecode cached as in a user's install (else each run recompiles)
    return env


# the floor ------------------------------------------------------------------------------------------

def pieces_of(spans: dict) -> list[tuple[str, int, int]]:
    """Attention spans (name -> (file, start, end)) coalesced per file and cut into PIECE-byte pieces."""
    from idinspect.sources.remote_stream import coalesce

    by_file: dict[str, list] = {}
    for fname, a, b in spans.values():
        by_file.setdefault(fname, []).append((a, b))
    return [(f, s, min(s + PIECE, b)) for f, ranges in sorted(by_file.items()) for a, b in coalesce(ranges)
            for s in range(a, b, PIECE)]


def run_plain(cdn: str, shas: dict, jobs: list[tuple[str, int, int]]) -> float:
    """Wall time of fetching ``jobs`` from the CDN with THREADS connections, bodies discarded."""
    import httpx2

    todo = list(reversed(jobs))
    lock = threading.Lock()

    def worker() -> None:
        with httpx2.Client(timeout=None) as client:
            while True:
                with lock:
                    if not todo:
                        return
                    fname, a, b = todo.pop()
                with client.stream("GET", f"{cdn}/blobs/{shas[fname]}", headers={"Range": f"bytes={a}-{b - 1}"}) as r:
                    for _ in r.iter_raw(1 << 20):
                        pass

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


# idinspect -----------------------------------------------------------------------------------------

def run_idinspect(repo_id: str, env: dict, cache: Path, *, fresh: bool = True) -> dict:
    """``idinspect HUB_ID --format json`` in a child: into an empty range cache (``fresh``), or again
    from the cache the previous run left (only the revision API call goes out: the process's own
    work without the transfer, under the same load)."""
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    res = run_child(idinspect_argv(repo_id, "--format", "json", "--cache-dir", str(cache), "--quiet"), env=env)
    if not res.ok:
        raise RuntimeError(f"idinspect {repo_id} failed (exit {res.returncode}): {res.stderr[-2000:]}")
    report = json.loads(res.stdout)
    return {"wall_s": res.wall_s, "user_s": res.user_s, "sys_s": res.sys_s, "max_rss_bytes": res.max_rss_bytes,
            "load_1min": res.load_1min, "fetch": report["model"]["fetch"], "totals": report["totals"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.remote_link", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="1b,8b", help="comma-separated: 1b, 8b")
    p.add_argument("--rates", default="125,500", help="link rates in MB/s (10^6 bytes), comma-separated")
    p.add_argument("--latency-ms", type=float, default=30.0, help="before each answer's first byte")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    shapes = [SHAPES[s.strip()] for s in args.shapes.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    latency = args.latency_ms / 1000
    built = {repo_id: with_block(*build_repo(shape, shards), block) for repo_id, shape, shards, block in shapes}
    server = Server({r: files for r, (files, _) in built.items()})
    env = client_env(server.endpoint)
    tmp = Path(tempfile.mkdtemp(prefix="idinspect-remote-link-"))
    results = {"machine": describe(), "latency_s": latency, "runs": []}
    failed = False
    try:
        for repo_id, _, _, _ in shapes:
            facts = built[repo_id][1]
            jobs = pieces_of(facts["attention_spans"])
            for rate in rates:
                server.ask(("link", rate * 1e6, latency))
                floor_s = facts["attention_bytes"] / (rate * 1e6)
                target_s = 1.2 * floor_s + 2.0
                rows = []
                for rep in range(args.repeats):
                    load = load_average()
                    t_plain = run_plain(server.cdn, server.shas[repo_id], jobs)
                    server.ask("reset")
                    ours = run_idinspect(repo_id, env, tmp / "cache")
                    counts = server.ask("counts")
                    cached = run_idinspect(repo_id, env, tmp / "cache", fresh=False)
                    shutil.rmtree(tmp / "cache", ignore_errors=True)
                    if cached["totals"] != ours["totals"] or cached["fetch"]["bytes_fetched"] != 0:
                        raise RuntimeError(f"{repo_id}: the rerun from the range cache differs or fetched bytes")
                    rows.append({"plain_s": t_plain, "idinspect": ours, "cached": cached, "served": counts,
                                 "load_before": load})
                    print(f"{repo_id} @ {rate:g} MB/s #{rep + 1}: plain {t_plain:.2f} s, idinspect {ours['wall_s']:.2f} s "
                          f"(cpu {ours['user_s'] + ours['sys_s']:.2f} s; target {target_s:.2f} s), from the cache "
                          f"{cached['wall_s']:.2f} s, requests hub {counts['requests']['hub']} cdn "
                          f"{counts['requests']['cdn']}, load {load[0]:.2f}", flush=True)
                wall = statistics.median(r["idinspect"]["wall_s"] for r in rows)
                plain = statistics.median(r["plain_s"] for r in rows)
                cached_s = statistics.median(r["cached"]["wall_s"] for r in rows)
                # overlap: the run against the larger of its two parts measured apart in the same repeat
                overlap = statistics.median(r["idinspect"]["wall_s"] / max(r["plain_s"], r["cached"]["wall_s"])
                                            for r in rows)
                ok = wall <= target_s
                failed |= not ok
                row = {"repo": repo_id, "rate_MBps": rate, "attention_bytes": facts["attention_bytes"],
                       "header_bytes": facts["header_bytes"], "link_floor_s": floor_s, "target_s": target_s,
                       "idinspect_s_median": wall, "plain_s_median": plain, "cached_s_median": cached_s,
                       "overlap_ratio_median": overlap, "ratio_to_target": wall / target_s,
                       "link_fraction": floor_s / wall, "plain_link_fraction": floor_s / plain,
                       "requests": rows[-1]["served"]["requests"], "fetch_requests": rows[-1]["idinspect"]["fetch"]["requests"],
                       "pass": ok, "repeats": rows}
                results["runs"].append(row)
                print(f"{repo_id} @ {rate:g} MB/s, {latency * 1000:g} ms: idinspect {wall:.2f} s vs target "
                      f"{target_s:.2f} s = {wall / target_s:.2f} ({'PASS' if ok else 'FAIL'}); link fraction "
                      f"{floor_s / wall:.2f} (plain {floor_s / plain:.2f}); idinspect / max(plain, from the cache) "
                      f"{overlap:.2f}; requests {row['requests']}", flush=True)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_average_end"] = load_average()
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-remote-link.json"
        out.write_text(json.dumps(results, indent=1))
        print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
