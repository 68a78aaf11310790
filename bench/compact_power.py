"""``python -m bench.compact_power [--pairs 3] [--shape 1b]``: loss of power of compact fingerprints (issue 36).

Small Llamas whose heads are wide enough for the compact form to drop values (8 layers x 8 heads of
head_dim 16, hidden 128: the compact form keeps 8 + 8 of each head's 16 + 16 + 16 values), trained
``--steps`` Adam steps on the synthetic corpus of :mod:`bench.disguise_controls`, then fine-tuned
``--ft-steps`` steps at a tenth of the rate on another token map. Per pair: the verdict and p-value of
the full comparison and of the compact one (A's compact fingerprint against B), and for the
independent pairs (seeds 0-1, 2-3, ...) the same. Result: ``bench/results/<stamp>-compact-power.json``.

``--shape 1b``: the Llama-3.2-1B attention shape instead (hidden 2048, 32 heads of 64, 8 kv heads, RoPE
theta 500000; ``--layers`` 8, MLP width 2048 and vocabulary 4096 to fit the CPU: the compact form keeps
8 + 8 of each head's 64 + 64 + 64 values). Why 8 layers, not 2: the lineage statistic counts heads whose
nearest head lies in their own layer; with L layers its null mean is N / L, so at 2 layers (64 heads,
null mean 32) even 64 of 64 gives a tail bound of 2 exp(-32^2 / (4 * 32 + 2 * 32)) = 0.01. A is transformers' random init (seed 0), B is A fine-tuned
with AdamW (``--lr`` 3e-4, weight decay 0.01) on the synthetic corpus and compared with A after each of
``--at`` steps (one run: the drift grows along it), C an independent random init (seed 1). Reported with
each pair: the relative change ||W_B - W_A||_F / ||W_A||_F of the attention weights (q, k, v, o) and of
all weights, and the loss. MLP width ``--mlp`` 512 by default (time and memory: peak about 3 GB at 8
layers, float32 weights, gradients and AdamW state). Result:
``bench/results/<stamp>-compact-power-1b.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers as tf

from .disguise_controls import train

CONFIG = {"hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 8, "num_attention_heads": 8,
          "num_key_value_heads": 8, "head_dim": 16, "vocab_size": 96, "max_position_embeddings": 64,
          "tie_word_embeddings": False}
#: The Llama-3.2-1B attention shape, 2 layers, narrow MLP and vocabulary (``--shape 1b``).
CONFIG_1B = {"hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 32,
             "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 4096, "max_position_embeddings": 256,
             "rope_theta": 500000.0, "tie_word_embeddings": True}
RESULTS = Path(__file__).resolve().parent / "results"


def relative_change(a: torch.nn.Module, b: torch.nn.Module) -> dict:
    """||W_B - W_A||_F / ||W_A||_F over the attention projections (q, k, v, o) and over all weights."""
    out = {}
    sa, sb = a.state_dict(), b.state_dict()
    for label, keep in (("attention", lambda k: "self_attn." in k), ("all", lambda k: True)):
        keys = [k for k in sa if keep(k) and sa[k].is_floating_point()]
        diff = sum(float((sb[k].double() - sa[k].double()).pow(2).sum()) for k in keys)
        norm = sum(float(sa[k].double().pow(2).sum()) for k in keys)
        out[label] = (diff / norm) ** 0.5
    return out


def main_1b(args: argparse.Namespace) -> int:
    """The ``--shape 1b`` run (module docstring): one fine-tune, compared with A at each of ``--at`` steps."""
    from .disguise_controls import train

    torch.set_num_threads(2)
    root = Path(tempfile.mkdtemp(prefix="idinspect-compact-power-1b-"))
    t0 = time.perf_counter()
    config = tf.LlamaConfig(**{**CONFIG_1B, "num_hidden_layers": args.layers, "intermediate_size": args.mlp})
    torch.manual_seed(1)
    tf.LlamaForCausalLM(config).save_pretrained(root / "C")
    torch.manual_seed(0)
    A = tf.LlamaForCausalLM(config).eval()
    A.save_pretrained(root / "A")
    both = _both(root)
    rows = [{"pair": "1B shape: random init vs an independent one (seed 0 vs 1)", "steps": None,
             "relative_change": relative_change(A, tf.LlamaForCausalLM.from_pretrained(root / "C")),
             **both(root / "A", root / "C")}]
    print(f"[compact-power 1b] {rows[-1]}", file=sys.stderr, flush=True)
    at = sorted(set(args.at))
    trained = {"seconds": 0.0, "last": time.perf_counter()}

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())

    def record(done: bool) -> None:
        """The result file, rewritten after every row (a run stopped early keeps what it measured)."""
        out = {"benchmark": "compact-power-1b", "config": config.to_dict(), "lr": args.lr, "complete": done,
               "optimizer": "AdamW (weight decay 0.01), batch 8 x 32 tokens, corpus seed 7 (bench.disguise_controls)",
               "compact_values": 8, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
        if not args.no_write:
            RESULTS.mkdir(exist_ok=True)
            tmp = RESULTS / f".{stamp}-compact-power-1b.json.tmp"
            tmp.write_text(json.dumps(out, indent=1) + "\n")
            tmp.replace(RESULTS / f"{stamp}-compact-power-1b.json")

    def checkpoint(step: int, model, loss: float) -> None:
        if step not in at:
            return
        trained["seconds"] += time.perf_counter() - trained["last"]
        model.save_pretrained(root / "B")
        rows.append({"pair": f"1B shape: random init vs its fine-tune after {step} steps", "steps": step,
                     "loss": loss, "train_seconds": round(trained["seconds"], 1),
                     "relative_change": relative_change(A, model), **both(root / "A", root / "B")})
        print(f"[compact-power 1b] {rows[-1]}", file=sys.stderr, flush=True)
        record(False)
        trained["last"] = time.perf_counter()

    record(False)
    train(copy.deepcopy(A), max(at), args.lr, corpus_seed=7, batch_seed=300, batch=8, length=32,
          optimizer=torch.optim.AdamW, on_step=checkpoint)
    record(True)
    print(json.dumps(rows, indent=1))
    for f in sorted(root.rglob("*"), reverse=True):
        f.unlink() if f.is_file() else f.rmdir()
    root.rmdir()
    return 0


def _both(root: Path):
    """compare(A, B) in full and from A's compact fingerprint: [verdict, p-value, statistic, similarity] each."""
    from idinspect.compare import compare_invariants, invariants_of, read_fingerprint
    from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json

    def both(a_path: Path, b_path: Path) -> dict:
        A, B = invariants_of(str(a_path)), invariants_of(str(b_path))
        fp = root / "a.compact.json"
        fp.write_text(fingerprint_json(A, compact=COMPACT_VALUES))
        full, compact = compare_invariants(A, B), compare_invariants(read_fingerprint(fp), B)
        return {"full": [full.verdict, full.lineage.p_value, full.lineage.statistic, full.similarity],
                "compact": [compact.verdict, compact.lineage.p_value, compact.lineage.statistic, compact.similarity],
                "heads": full.lineage.heads}
    return both


def main(argv: list[str] | None = None) -> int:
    from idinspect.compare.fingerprint import COMPACT_VALUES

    p = argparse.ArgumentParser(prog="python -m bench.compact_power", description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--ft-steps", type=int, default=100)
    p.add_argument("--shape", choices=["small", "1b"], default="small")
    p.add_argument("--lr", type=float, default=3e-4, help="fine-tune learning rate (--shape 1b)")
    p.add_argument("--layers", type=int, default=8, help="layers of the 1B shape (--shape 1b; at 2 layers the "
                   "lineage test's null mean is half the heads, so its p-value cannot go below ~0.01)")
    p.add_argument("--mlp", type=int, default=512, help="MLP width of the 1B shape (--shape 1b; 8192 in the model)")
    p.add_argument("--at", type=int, nargs="+", default=[2, 5, 10, 20, 40, 80],
                   help="fine-tune steps after which B is compared with A (--shape 1b)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    if args.shape == "1b":
        return main_1b(args)
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="idinspect-compact-power-"))
    rows, t0 = [], time.perf_counter()

    both = _both(root)
    bases = []
    for s in range(2 * args.pairs):
        torch.manual_seed(s)
        m, _ = train(tf.LlamaForCausalLM(tf.LlamaConfig(**CONFIG)), args.steps, 3e-3, corpus_seed=0, batch_seed=100 + s)
        m.save_pretrained(root / f"seed{s}")
        bases.append(m)
        print(f"[compact-power] trained seed {s}", file=sys.stderr, flush=True)
    for s in range(args.pairs):
        ft, _ = train(copy.deepcopy(bases[s]), args.ft_steps, 3e-4, corpus_seed=7, batch_seed=200 + s)
        ft.save_pretrained(root / f"ft{s}")
        rows.append({"pair": f"seed {s} vs its fine-tune", **both(root / f"seed{s}", root / f"ft{s}")})
        rows.append({"pair": f"seed {2 * s} vs seed {2 * s + 1}", **both(root / f"seed{2 * s}", root / f"seed{2 * s + 1}")})
        print(f"[compact-power] {rows[-2]}\n[compact-power] {rows[-1]}", file=sys.stderr, flush=True)
    out = {"benchmark": "compact-power", "config": CONFIG, "steps": args.steps, "ft_steps": args.ft_steps,
           "compact_values": COMPACT_VALUES, "seconds": round(time.perf_counter() - t0, 1), "rows": rows}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stamp}-compact-power.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
