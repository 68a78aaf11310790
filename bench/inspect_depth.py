"""``python -m bench.inspect_depth [--shapes 1b,8b,70b] [--repeats 1]``: ``idinspect HUB_ID`` at full depth
against the floor of reading the same attention bytes, at the 1B, 8B and 70B shapes (issue 40: "inspect
within 1.15x the read floor at 1B, 8B and 70B shapes, full depth, not extrapolated").

The Llama-3.2-1B (16 layers), Llama-3.1-8B (32) and Llama-3.1-70B (80; d 8192, 64 heads, 8 kv heads,
24.2 GB of attention) shapes are generated on the fly by the local hub + CDN of
``tests/support/hub_server.py`` in a child process (:mod:`bench.remote_link`'s server, no pacing: the
loopback link at full speed), so no disk holds the 70B's 141 GB. In each repeat, alternating:

- **floor**: a child process that imports torch and reads exactly the attention spans straight from the
  CDN (8 threads with ``httpx``, 16 MB pieces) into float32 tensors, as :func:`bench.workloads.floor`
  reads them from a local folder (no API, no headers, no analysis): the whole process timed, interpreter
  start and imports included as for idinspect;
- **idinspect**: ``python -m idinspect HUB_ID --format json`` in a child process into an empty cache (the
  70B's attention takes more than a quarter of the free disk, so it streams through the memory window),
  the whole process timed, with its CPU seconds (user + sys) and peak RSS.

Prints idinspect / floor with PASS/FAIL against 1.15, the CPU seconds per layer (the analysis' own
cost: on 2 cores it bounds the wall time from below at CPU / 2 whatever the link) and writes
``bench/results/STAMP-inspect-depth.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .hub_ranges import FULL_RANK_BLOCK, LLAMA_1B, LLAMA_8B, build_repo
from .machine import describe, load_average
from .remote_compare import LLAMA_70B
from .measure import run_child
from .remote_link import THREADS, Server, client_env, pieces_of, run_idinspect, with_block

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.15
#: repo id, shape, shards, repeating block of the generated data (:data:`.hub_ranges.FULL_RANK_BLOCK` at 8B, 70B)
SHAPES = {"1b": ("bench/depth-llama-3.2-1b", LLAMA_1B, 1, None),
          "8b": ("bench/depth-llama-3.1-8b", LLAMA_8B, 4, FULL_RANK_BLOCK),
          "70b": ("bench/depth-llama-3.1-70b", LLAMA_70B, 30, FULL_RANK_BLOCK)}


def floor_child(jobs_file: str) -> None:
    """The floor process: fetch the pieces listed in ``jobs_file`` (cdn, sha per file, pieces) and cast each
    to float32 (the bf16 bytes as torch reads them), 8 connections."""
    import threading

    import httpx2
    import torch

    spec = json.loads(Path(jobs_file).read_text())
    todo = [tuple(j) for j in reversed(spec["jobs"])]
    lock = threading.Lock()

    def worker() -> None:
        with httpx2.Client(timeout=None) as client:
            while True:
                with lock:
                    if not todo:
                        return
                    fname, a, b = todo.pop()
                r = client.get(f"{spec['cdn']}/blobs/{spec['shas'][fname]}", headers={"Range": f"bytes={a}-{b - 1}"})
                torch.frombuffer(bytearray(r.content), dtype=torch.bfloat16).float()

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_floor(cdn: str, shas: dict, jobs: list, env: dict, where: Path) -> dict:
    spec = where / "jobs.json"
    spec.write_text(json.dumps({"cdn": cdn, "shas": shas, "jobs": jobs}))
    res = run_child([sys.executable, "-m", "bench.inspect_depth", "--floor-child", str(spec)], env=env)
    if not res.ok:
        raise RuntimeError(f"the floor process failed: {res.stderr[-2000:]}")
    return {"wall_s": res.wall_s, "user_s": res.user_s, "sys_s": res.sys_s}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.inspect_depth", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="1b,8b,70b", help="comma-separated: 1b, 8b, 70b")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--layers", type=int, default=None, help="override the depth (only to try the bench)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--floor-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.floor_child:
        floor_child(args.floor_child)
        return 0
    chosen = [SHAPES[s.strip()] for s in args.shapes.split(",")]
    built = {}
    for repo_id, shape, shards, block in chosen:
        shape = {**shape, **({"num_hidden_layers": args.layers} if args.layers else {})}
        files, facts = with_block(*build_repo(shape, shards), block)
        built[repo_id] = (files, facts, shape["num_hidden_layers"])
    server = Server({r: f for r, (f, _, _) in built.items()})
    env = client_env(server.endpoint)
    tmp = Path(tempfile.mkdtemp(prefix="idinspect-inspect-depth-"))
    results = {"machine": describe(), "target": TARGET, "runs": []}
    failed = False
    try:
        for repo_id, _, _, _ in chosen:
            _, facts, layers = built[repo_id]
            jobs = pieces_of(facts["attention_spans"])
            rows = []
            for rep in range(args.repeats):
                load = load_average()
                floor_run = run_floor(server.cdn, server.shas[repo_id], jobs, env, tmp)
                floor = floor_run["wall_s"]
                ours = run_idinspect(repo_id, env, tmp / "cache")
                shutil.rmtree(tmp / "cache", ignore_errors=True)
                cpu = ours["user_s"] + ours["sys_s"]
                rows.append({"floor_s": floor, "floor": floor_run, "idinspect": ours, "load_before": load})
                print(f"{repo_id} ({layers} layers, {facts['attention_bytes'] / 1e9:.2f} GB of attention) #{rep + 1}: "
                      f"floor {floor:.2f} s, idinspect {ours['wall_s']:.2f} s = {ours['wall_s'] / floor:.2f}x "
                      f"(cpu {cpu:.1f} s, {cpu / layers:.3f} s a layer; peak RSS "
                      f"{ours['max_rss_bytes'] / 2**20:.0f} MiB), load {load[0]:.2f}", flush=True)
            ratio = statistics.median(r["idinspect"]["wall_s"] / r["floor_s"] for r in rows)
            ok = ratio <= TARGET
            failed |= not ok
            results["runs"].append({"repo": repo_id, "layers": layers, "attention_bytes": facts["attention_bytes"],
                                    "ratio_median": ratio, "pass": ok, "repeats": rows})
            print(f"{repo_id}: idinspect / floor {ratio:.2f} (target <= {TARGET}: {'PASS' if ok else 'FAIL'})", flush=True)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_average_end"] = load_average()
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-inspect-depth.json"
        out.write_text(json.dumps(results, indent=1))
        print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
