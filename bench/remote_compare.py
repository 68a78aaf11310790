"""``python -m bench.remote_compare [--rate 500] [--latency-ms 30] [--layers 80] [--repeats 1]``:
``idinspect compare HUB_A HUB_B`` of two Llama-3.1-70B-shaped models over a paced link (issue 40).

Two synthetic 70B-shaped checkpoints (d 8192, 80 layers, 64 heads, 8 kv heads, head_dim 128, bf16,
30 shards each, about 141 GB each of which 24.2 GB are attention tensors) are generated on the fly by
the local hub + CDN of ``tests/support/hub_server.py`` in a child process (different seeds, so the
disk holds none of it), every answer paced by one :class:`tests.support.link.Link` (``--rate`` MB/s
of 10^6 bytes shared by all connections, ``--latency-ms`` before each answer). Alternating in each repeat:

- **plain**: both models' attention spans fetched straight from the CDN by 8 threads (bodies
  discarded): what the link itself delivers;
- **compare**: ``python -m idinspect compare A B --format json --expect unrelated`` in a child
  process, the whole process timed, its own peak RSS from ``wait4``;
- **cpu** (``--cpu-bound``, once): the same compare over an unpaced link, whose wall time is the
  analysis' own limit on this machine (fetching over loopback is not free either: see plain).

Targets: compare wall <= 1.3 x (both models' attention bytes / rate); peak RSS <= 1 GB. The 70B
attention bytes take more than a quarter of the free disk here, so the reader streams them through
its memory window (remote_stream.WINDOW) and caches none. Results go to stdout and
``bench/results/<stamp>-remote-compare.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from .hub_ranges import FULL_RANK_BLOCK, build_repo
from .machine import describe, load_average
from .measure import idinspect_argv, run_child
from .remote_link import Server, client_env, pieces_of, run_plain

RESULTS = Path(__file__).resolve().parent / "results"
LLAMA_70B = {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False}
REPOS = ("bench/llama-3.1-70b-shaped-a", "bench/llama-3.1-70b-shaped-b")
RSS_LIMIT = 1 << 30
BLOCK = FULL_RANK_BLOCK


def run_compare(a: str, b: str, env: dict, cache: Path) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    res = run_child(idinspect_argv("compare", a, b, "--format", "json", "--expect", "unrelated", "--cache-dir",
                                   str(cache), "--quiet"), env=env)
    left = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0
    shutil.rmtree(cache, ignore_errors=True)
    if res.returncode not in (0, 1):
        raise RuntimeError(f"compare failed (exit {res.returncode}): {res.stderr[-2000:]}")
    record = json.loads(res.stdout)
    return {"wall_s": res.wall_s, "user_s": res.user_s, "sys_s": res.sys_s, "max_rss_bytes": res.max_rss_bytes,
            "rss_measured": res.rss_measured, "load_1min": res.load_1min, "verdict": record["verdict"],
            "similarity": record.get("similarity"), "cache_bytes_left": left}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.remote_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=500.0, help="link rate in MB/s (10^6 bytes)")
    p.add_argument("--latency-ms", type=float, default=30.0)
    p.add_argument("--layers", type=int, default=80, help="depth (80 is the real model; less only to try the bench)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--cpu-bound", action="store_true", help="also run compare once over an unpaced link")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    shape = {**LLAMA_70B, "num_hidden_layers": args.layers}
    built = {}
    for k, repo in enumerate(REPOS):
        files, facts = build_repo(shape, 30)
        built[repo] = ({n: ((v[0], v[1], v[2], v[3] + 1000 * k, BLOCK) if isinstance(v, tuple) else v)
                        for n, v in files.items()}, facts)
    server = Server({r: f for r, (f, _) in built.items()})
    env = client_env(server.endpoint)
    rate, latency = args.rate * 1e6, args.latency_ms / 1000
    attention = sum(facts["attention_bytes"] for _, facts in built.values())
    floor_s = attention / rate
    target_s = 1.3 * floor_s
    tmp = Path(tempfile.mkdtemp(prefix="idinspect-remote-compare-"))
    results = {"machine": describe(), "rate_MBps": args.rate, "latency_s": latency, "layers": args.layers,
               "attention_bytes_both": attention, "link_floor_s": floor_s, "target_s": target_s, "repeats": []}
    try:
        server.ask(("link", rate, latency))
        for rep in range(args.repeats):
            load = load_average()
            plain = 0.0
            for repo in REPOS:
                plain += run_plain(server.cdn, server.shas[repo], pieces_of(built[repo][1]["attention_spans"]))
            ours = run_compare(*REPOS, env, tmp / "cache")
            results["repeats"].append({"plain_s": plain, "compare": ours, "load_before": load})
            print(f"#{rep + 1}: plain {plain:.1f} s, compare {ours['wall_s']:.1f} s (cpu {ours['user_s'] + ours['sys_s']:.1f} s, "
                  f"peak RSS {ours['max_rss_bytes'] / 2**20:.0f} MiB, verdict {ours['verdict']}), load {load[0]:.2f}",
                  flush=True)
        if args.cpu_bound:
            server.ask(("link", None, 0.0))
            results["unpaced"] = run_compare(*REPOS, env, tmp / "cache")
            u = results["unpaced"]
            print(f"unpaced link: compare {u['wall_s']:.1f} s (cpu {u['user_s'] + u['sys_s']:.1f} s), "
                  f"{attention / u['wall_s'] / 1e6:.0f} MB/s of attention bytes analysed", flush=True)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    wall = statistics.median(r["compare"]["wall_s"] for r in results["repeats"])
    rss = max(r["compare"]["max_rss_bytes"] for r in results["repeats"])
    plain = statistics.median(r["plain_s"] for r in results["repeats"])
    ok_time, ok_rss = wall <= target_s, rss <= RSS_LIMIT
    results.update(compare_s_median=wall, plain_s_median=plain, ratio_to_floor=wall / floor_s, peak_rss_bytes=rss,
                   pass_time=ok_time, pass_rss=ok_rss, load_average_end=load_average())
    print(f"{args.layers} layers x 2 at {args.rate:g} MB/s, {args.latency_ms:g} ms: compare {wall:.1f} s / link floor "
          f"{floor_s:.1f} s = {wall / floor_s:.2f} (target <= 1.3: {'PASS' if ok_time else 'FAIL'}); plain "
          f"{plain / floor_s:.2f} of the floor; peak RSS {rss / 2**20:.0f} MiB (<= 1024: {'PASS' if ok_rss else 'FAIL'})")
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-remote-compare.json"
        out.write_text(json.dumps(results, indent=1))
        print(f"wrote {out}")
    return 0 if ok_time and ok_rss else 1


if __name__ == "__main__":
    raise SystemExit(main())
