"""``python -m bench.hub_ranges [--8b] [--repeats N]``: bytes and time of partial hub reads (issue 17).

Serves Llama-3.2-1B-shaped (and with ``--8b`` Llama-3.1-8B-shaped, 4 shards) checkpoints from the
local hub + CDN of ``tests/support/hub_server.py``, run in a child process so that serving does not share
this process's GIL. Tensor data is generated on the fly (bf16 values in a repeating pseudo-random
block), so multi-GB checkpoints need neither memory nor disk on the server side.

Measured per model, alternating within each repeat:

- **idinspect**: ``idinspect.load(hub id)`` into an empty cache, then every layer's attention tensors
  read (resolve, config.json, index, one header probe per shard, the planned ranges fetched in the
  background in layer order, 8 in flight, written to the range cache); bytes counted by the CDN server;
- **plain**: the same coalesced ranges fetched by one ``httpx`` client straight from the CDN URL,
  one after another, bodies discarded (the floor: no hub round trips, no cache writes, no redirects).

Reported: CDN bytes / (attention bytes + header bytes) (target <= 1.02), total checkpoint bytes,
idinspect time / plain time. Results go to stdout and ``bench/results/<stamp>-hub-ranges.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

LLAMA_1B = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256, "tie_word_embeddings": True}
LLAMA_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "tie_word_embeddings": False}
#: Bytes of a repeating random block whose period is no whole number of rows at the 8B and 70B widths
#: (128 rows of 16 KB and a bit): every head full rank, no two heads alike. The generator's default
#: 1 MiB block is 128 rows of an 8B matrix (every head the same block) and 64 of a 70B one (rank 64):
#: both take the analysis down slow paths no real checkpoint takes (8B: 0.87 s of CPU a layer
#: against 0.34 s with this block).
FULL_RANK_BLOCK = 2 * (1 << 20) + 4098


def llama_config(shape: dict) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "attention_bias": False, "mlp_bias": False,
            "rope_theta": 500000.0, "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
            "rope_scaling": {"factor": 32.0 if shape["hidden_size"] == 2048 else 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                             "rope_type": "llama3"}, **shape}


def llama_tensors(c: dict) -> list[tuple[str, list[int]]]:
    """(name, shape) of every tensor in the order safetensors stores them (sorted names)."""
    d, i, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    H, G = c["num_attention_heads"], c["num_key_value_heads"]
    out = [("model.embed_tokens.weight", [c["vocab_size"], d]), ("model.norm.weight", [d])]
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", [c["vocab_size"], d]))
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [(p + "input_layernorm.weight", [d]), (p + "post_attention_layernorm.weight", [d]),
                (p + "mlp.gate_proj.weight", [i, d]), (p + "mlp.up_proj.weight", [i, d]),
                (p + "mlp.down_proj.weight", [d, i]), (p + "self_attn.q_proj.weight", [H * hd, d]),
                (p + "self_attn.k_proj.weight", [G * hd, d]), (p + "self_attn.v_proj.weight", [G * hd, d]),
                (p + "self_attn.o_proj.weight", [d, H * hd])]
    return sorted(out)


def safetensors_prefix(tensors: list[tuple[str, list[int]]]) -> tuple[bytes, int, dict[str, tuple[int, int]]]:
    """(8-byte length + JSON header padded to 8, file size, name -> absolute [start, end)) for bf16 tensors."""
    header, pos = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 2
        for s in shape:
            n *= s
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    base = 8 + len(text)
    spans = {k: (base + v["data_offsets"][0], base + v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"}
    return struct.pack("<Q", len(text)) + text, base + pos, spans


def build_repo(shape: dict, shards: int) -> tuple[dict, dict]:
    """Files for LocalHub (bytes or PatternBlob args) and the byte accounting."""
    config = llama_config(shape)
    tensors = llama_tensors(config)
    sizes = [2 * _prod(s) for _, s in tensors]
    budget = sum(sizes) / shards
    groups, cur, acc = [], [], 0
    for t, size in zip(tensors, sizes):
        if cur and acc + size > budget and len(groups) < shards - 1:
            groups.append(cur)
            cur, acc = [], 0
        cur.append(t)
        acc += size
    groups.append(cur)
    files, spans, headers, total = {"config.json": json.dumps(config).encode()}, {}, 0, 0
    names = ["model.safetensors"] if shards == 1 else [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
    weight_map = {}
    for k, (fname, group) in enumerate(zip(names, groups)):
        prefix, size, where = safetensors_prefix(group)
        files[fname] = ("pattern", prefix, size, k)
        headers += len(prefix)
        total += size
        spans.update({n: (fname, *se) for n, se in where.items()})
        weight_map.update({n: fname for n in where})
    if shards > 1:
        files["model.safetensors.index.json"] = json.dumps({"metadata": {"total_size": total},
                                                            "weight_map": weight_map}).encode()
    attention = {n: s for n, s in spans.items() if ".self_attn." in n}
    return files, {"header_bytes": headers, "attention_bytes": sum(b - a for _, a, b in attention.values()),
                   "checkpoint_bytes": total, "attention_spans": attention}


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


# the server, in a child process ------------------------------------------------------------------

def serve(conn, repos: dict) -> None:
    sys.path.insert(0, str(ROOT))
    from tests.support.hub_server import LocalHub, PatternBlob

    with LocalHub() as hub:
        for repo_id, files in repos.items():
            blobs = {n: (PatternBlob(v[1], v[2], seed=v[3], tag=repo_id) if isinstance(v, tuple) else v)
                     for n, v in files.items()}
            hub.add_repo(repo_id, blobs)
        conn.send((hub.endpoint, hub.cdn, {r: {n: b.sha256 for n, b in hub.repos[r].commits[hub.repos[r].refs["main"]].items()}
                                         for r in hub.repos}))
        while True:
            cmd = conn.recv()
            if cmd == "counts":
                conn.send(dict(hub.bytes_served))
            elif cmd == "reset":
                hub.reset_counts()
                conn.send(True)
            else:
                break


# the measurements ----------------------------------------------------------------------------------

def run_idinspect(repo_id: str, cache: Path) -> tuple[float, dict]:
    import idinspect

    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    model = idinspect.load(repo_id, cache_dir=cache)
    for i in range(model.num_layers):      # the planned tensors arrive in the background: read them all
        for key in model.adapter.attention_keys(i):
            model.reader.get(key)
    elapsed = time.perf_counter() - t0
    summary = model.fetch_summary()
    model.close()
    return elapsed, summary


def run_plain(cdn: str, shas: dict, spans: dict) -> float:
    import httpx2

    from idinspect.sources.remote import coalesce

    by_file: dict[str, list] = {}
    for fname, a, b in spans.values():
        by_file.setdefault(fname, []).append((a, b))
    t0 = time.perf_counter()
    with httpx2.Client(timeout=None) as client:
        for fname, ranges in sorted(by_file.items()):
            for a, b in coalesce(ranges):
                with client.stream("GET", f"{cdn}/blobs/{shas[fname]}", headers={"Range": f"bytes={a}-{b - 1}"}) as r:
                    for _ in r.iter_raw(1 << 20):
                        pass
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hub_ranges", description=__doc__.split("\n\n")[0])
    p.add_argument("--8b", dest="eight", action="store_true", help="also the Llama-3.1-8B shape (4 shards, ~16 GB served)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    models = {"bench/llama-3.2-1b-shaped": (LLAMA_1B, 1)}
    if args.eight:
        models["bench/llama-3.1-8b-shaped"] = (LLAMA_8B, 4)
    built = {r: build_repo(shape, shards) for r, (shape, shards) in models.items()}
    parent, child = mp.get_context("spawn").Pipe()
    server = mp.get_context("spawn").Process(target=serve, args=(child, {r: f for r, (f, _) in built.items()}), daemon=True)
    server.start()
    endpoint, cdn, shas = parent.recv()
    os.environ["HF_ENDPOINT"] = endpoint
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub import constants

    constants.ENDPOINT = endpoint
    constants.HUGGINGFACE_CO_URL_TEMPLATE = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    results = {"machine": {"cpus": os.cpu_count()}, "models": {}}
    tmp = Path(tempfile.mkdtemp(prefix="idinspect-hub-bench-"))
    try:
        for repo_id, (_, facts) in built.items():
            rows = []
            for rep in range(args.repeats):
                parent.send("reset")
                parent.recv()
                t_id, summary = run_idinspect(repo_id, tmp / "cache")
                parent.send("counts")
                served = parent.recv()
                t_plain = run_plain(cdn, shas[repo_id], facts["attention_spans"])
                rows.append({"idinspect_s": t_id, "plain_s": t_plain, "cdn_bytes": served["cdn"],
                             "hub_bytes": served["hub"], "fetch": summary})
                print(f"{repo_id} #{rep + 1}: idinspect {t_id:.2f} s, plain {t_plain:.2f} s, CDN bytes {served['cdn']}", flush=True)
            need = facts["attention_bytes"] + facts["header_bytes"]
            res = {"checkpoint_bytes": facts["checkpoint_bytes"], "attention_bytes": facts["attention_bytes"],
                   "header_bytes": facts["header_bytes"], "runs": rows,
                   "bytes_ratio": max(r["cdn_bytes"] for r in rows) / need,
                   "share_of_checkpoint": max(r["cdn_bytes"] for r in rows) / facts["checkpoint_bytes"],
                   "time_ratio_median": statistics.median(r["idinspect_s"] / r["plain_s"] for r in rows)}
            results["models"][repo_id] = res
            print(f"{repo_id}: fetched/(attention+headers) = {res['bytes_ratio']:.4f} (target <= 1.02, "
                  f"{'PASS' if res['bytes_ratio'] <= 1.02 else 'FAIL'}); {res['share_of_checkpoint']:.3f} of "
                  f"{facts['checkpoint_bytes'] / 1e9:.2f} GB; idinspect/plain time = {res['time_ratio_median']:.2f} (median)")
    finally:
        parent.send("stop")
        server.join(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        for r in results["models"].values():
            for row in r["runs"]:
                row["fetch"] = {k: v for k, v in (row["fetch"] or {}).items()}
        out = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-hub-ranges.json"
        out.write_text(json.dumps(results, indent=1))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
