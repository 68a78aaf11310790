"""``python -m bench.compact_power [--pairs 3]``: loss of power of compact fingerprints (issue 36).

Small Llamas whose heads are wide enough for the compact form to drop values (8 layers x 8 heads of
head_dim 16, hidden 128: the compact form keeps 8 + 8 of each head's 16 + 16 + 16 values), trained
``--steps`` Adam steps on the synthetic corpus of :mod:`bench.disguise_controls`, then fine-tuned
``--ft-steps`` steps at a tenth of the rate on another token map. Per pair: the verdict and p-value of
the full comparison and of the compact one (A's compact fingerprint against B), and for the
independent pairs (seeds 0-1, 2-3, ...) the same. Result: ``bench/results/<stamp>-compact-power.json``.
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
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    from idinspect.compare import compare_invariants, invariants_of, read_fingerprint
    from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json

    p = argparse.ArgumentParser(prog="python -m bench.compact_power", description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--ft-steps", type=int, default=100)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="idinspect-compact-power-"))
    rows, t0 = [], time.perf_counter()

    def both(a_path: Path, b_path: Path) -> dict:
        A, B = invariants_of(str(a_path)), invariants_of(str(b_path))
        fp = root / "a.compact.json"
        fp.write_text(fingerprint_json(A, compact=COMPACT_VALUES))
        full, compact = compare_invariants(A, B), compare_invariants(read_fingerprint(fp), B)
        return {"full": [full.verdict, full.lineage.p_value, full.lineage.statistic],
                "compact": [compact.verdict, compact.lineage.p_value, compact.lineage.statistic]}

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
