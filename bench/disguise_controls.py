"""Negative controls and fine-tune pairs for ``python -m bench.disguise --part controls`` (issue 36).

- ``SEEDS`` independently initialised small Llamas of one config (8 layers x 8 heads, hidden 32,
  head_dim 4, as tests/compare_models.py) trained ``STEPS`` Adam steps on the same synthetic corpus
  (token t followed by (a t + b) mod V, 20 % noise; batches drawn from the model's own seed). Every
  pair of them must be ``unrelated``: the false-positive rate at alpha = 1e-6 over the disjoint
  pairs (0, 1), (2, 3), ... (independent trials) and over all pairs (not independent: a denser view
  of the same null).
- Fine-tunes: each of the first ``FINETUNES`` models trained ``FT_STEPS`` more steps at a tenth of the
  rate on another token map: the pair (base, fine-tune) should be ``same-lineage``; p-values reported.
- The same-config pair at the 1B shape whose weights were drawn independently is the control row of
  the disguise part (``llama-1b-2l``).
"""

from __future__ import annotations

import copy
import itertools
import sys
import time
from pathlib import Path

import torch
import transformers as tf

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8,
             "head_dim": 4, "vocab_size": 96, "max_position_embeddings": 64, "tie_word_embeddings": False}
SEEDS = 20
STEPS = 300
FINETUNES = 10
FT_STEPS = 200
ALPHA = 1e-6


def small_llama(seed: int):
    config = tf.LlamaConfig(**SMALL)
    torch.manual_seed(seed)
    return tf.LlamaForCausalLM(config).float()


def train(model, steps: int, lr: float, corpus_seed: int, batch_seed: int, batch: int = 8, length: int = 12,
          optimizer=torch.optim.Adam, on_step=None):
    """Adam (or ``optimizer``) on next-token prediction over the corpus of ``corpus_seed`` (its token map),
    batches of ``batch_seed``; ``on_step(step, model, loss)`` after each step (1-based); returns (the model
    in eval mode, the last step's loss)."""
    V = model.config.vocab_size
    c = torch.Generator().manual_seed(corpus_seed)
    a, b = int(torch.randint(1, V, (1,), generator=c)), int(torch.randint(0, V, (1,), generator=c))
    gen = torch.Generator().manual_seed(batch_seed)
    opt = optimizer(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        ids = [torch.randint(0, V, (batch, 1), generator=gen)]
        for _ in range(length - 1):
            ids.append((a * ids[-1] + b) % V)
        ids = torch.cat(ids, dim=1)
        noise = torch.rand(ids.shape, generator=gen) < 0.2
        ids = torch.where(noise, torch.randint(0, V, ids.shape, generator=gen), ids)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if on_step is not None:
            on_step(step + 1, model, float(loss))
    return model.eval(), float(loss)


def _result(r) -> dict:
    t = r.lineage
    return {"verdict": r.verdict, "p_value": None if t is None else t.p_value,
            "statistic": None if t is None else t.statistic, "null_mean": None if t is None else t.expected,
            "similarity": r.similarity}


def _compact(inv, k: int = 8):
    """The invariants as a compact fingerprint keeps them (fingerprint --compact: the k largest singular values
    of W_QK and W_OV per head, no RoPE planes), built here so that this file runs with any compare module."""
    import dataclasses

    layers = [dataclasses.replace(L, qk=L.qk[:, :k], ov=L.ov[:, :k], planes=None, radius_planes=None) for L in inv.layers]
    return dataclasses.replace(inv, layers=layers)


def run_controls(work: Path, seeds: int = SEEDS, steps: int = STEPS, finetunes: int = FINETUNES,
                 ft_steps: int = FT_STEPS) -> dict:
    from idinspect.compare import compare_invariants, invariants_of

    root = Path(work) / "controls"
    root.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    inv, losses, models = [], [], []
    for s in range(seeds):
        m, loss = train(small_llama(s), steps, 3e-3, corpus_seed=0, batch_seed=100 + s)
        m.save_pretrained(root / f"seed{s}")
        inv.append(invariants_of(str(root / f"seed{s}")))
        losses.append(loss)
        models.append(m if s < finetunes else None)
        print(f"[controls] seed {s}: loss {loss:.3f}", file=sys.stderr, flush=True)
    pairs = {}
    for i, j in itertools.combinations(range(seeds), 2):
        pairs[(i, j)] = _result(compare_invariants(inv[i], inv[j], alpha=ALPHA))
    disjoint = [pairs[(i, i + 1)] for i in range(0, seeds - 1, 2)]
    finetune = []
    for s in range(finetunes):
        ft, loss = train(copy.deepcopy(models[s]), ft_steps, 3e-4, corpus_seed=7, batch_seed=200 + s)
        ft.save_pretrained(root / f"ft{s}")
        ft_inv = invariants_of(str(root / f"ft{s}"))
        r = _result(compare_invariants(inv[s], ft_inv, alpha=ALPHA))
        rc = _result(compare_invariants(_compact(inv[s]), _compact(ft_inv), alpha=ALPHA))
        finetune.append({"seed": s, "loss": loss, **r, "compact": rc})
        print(f"[controls] fine-tune {s}: {r['verdict']} p {r['p_value']:.3g}", file=sys.stderr, flush=True)
    fp = lambda rows: sum(r["verdict"] != "unrelated" for r in rows)
    summary = {
        "alpha": ALPHA, "models": seeds, "train_steps": steps, "final_losses": [round(x, 3) for x in losses],
        "disjoint_pairs": len(disjoint), "disjoint_false_positives": fp(disjoint),
        "disjoint_min_p": min(r["p_value"] for r in disjoint),
        "all_pairs": len(pairs), "all_pairs_false_positives": fp(pairs.values()),
        "all_pairs_min_p": min(r["p_value"] for r in pairs.values()),
        "finetunes": len(finetune), "finetune_steps": ft_steps,
        "finetunes_same_lineage": sum(r["verdict"] in ("same-lineage", "same-function") for r in finetune),
        "finetune_p_values": [r["p_value"] for r in finetune],
        "finetune_compact_verdicts_same": sum(r["compact"]["verdict"] == r["verdict"] for r in finetune),
        "finetune_compact_p_values": [r["compact"]["p_value"] for r in finetune],
        "disjoint_compact_false_positives": sum(
            compare_invariants(_compact(inv[i]), _compact(inv[i + 1]), alpha=ALPHA).verdict != "unrelated"
            for i in range(0, seeds - 1, 2)),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return {"summary": summary, "disjoint": disjoint, "finetune": finetune,
            "all_pairs": [{"a": i, "b": j, **r} for (i, j), r in pairs.items()]}
