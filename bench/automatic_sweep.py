"""How far ``--auto`` reaches: the automatic adapter against every hand-written one, and on the model
types transformers ships that no adapter claims.

    python -m bench.automatic_sweep                 # both parts; writes bench/results/<UTC>-automatic.json
    python -m bench.automatic_sweep --part supported
    python -m bench.automatic_sweep --part unclaimed --limit 50
    python -m bench.automatic_sweep --part supported --variant clip --variant siglip   # those variants only
    python -m bench.automatic_sweep --part supported --from-folders   # each variant saved, then read from its folder

Part ``supported``: every tiny test variant (tests/families/) is read twice, by its hand-written adapter
and, with its model type hidden from the registry, by the adapter ``--auto`` infers and proves from the
live model; the outcome is "agrees" (same totals: parameters, unidentified, per-layer counts, and the
same attention function per block: scale, causality, window, soft cap, RoPE pairing, rotated dims and
frequencies, q/k norm, tensors), "refused" (with the reason) or "DISAGREES" (a defect). Part ``unclaimed``: for each model type transformers'
AutoModel maps and no adapter claims (or one refused by hand), a default config's base model, shrunk,
goes through the same inference; "automatic" (proven) or "refused" (why).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"
#: Each unclaimed type's default config gets this long and the process this much address space.
PER_TYPE_SECONDS = 60
MEMORY_CAP = 6 * 2**30


def supported(only: list[str] | None = None, from_folders: bool = False) -> list[dict]:
    """Rows of part ``supported``; ``from_folders``: each variant saved with ``save_pretrained`` and both
    adapters read from that folder (--auto traces the class config.json names), as a user's checkpoint."""
    import tempfile

    import idinspect
    from idinspect.errors import IdinspectError
    from tests.support.automatic import counted, hidden, layer_facts
    from tests.support.tiny import VARIANTS, build

    rows = []
    scratch = tempfile.TemporaryDirectory(prefix="idinspect-sweep-")
    for name in sorted(only or VARIANTS):
        model = build(name)
        model_type = model.config.model_type
        start = time.perf_counter()
        if from_folders:
            model.save_pretrained(Path(scratch.name) / name)
            model = str(Path(scratch.name) / name)
        read = idinspect.load(model)
        by_hand, facts = counted(read), layer_facts(read)
        row = {"variant": name, "model_type": model_type}
        with hidden(model_type):
            try:
                inferred = idinspect.load(model, auto=True)
                auto, auto_facts = counted(inferred), layer_facts(inferred)
                row["outcome"] = "agrees" if auto == by_hand and auto_facts == facts else "DISAGREES"
                if auto != by_hand:
                    row["by_hand"], row["automatic"] = by_hand["totals"], auto["totals"]
                elif auto_facts != facts:
                    row["facts_differ"] = sorted({f"block {i}: {k}" for i, (a, b) in enumerate(zip(facts, auto_facts))
                                                  for k in a if a[k] != b[k]})
            except IdinspectError as exc:
                row["outcome"], row["reason"] = "refused", str(exc)
        row["seconds"] = round(time.perf_counter() - start, 2)
        print(f"{name:32s} {row['outcome']:10s} {row['seconds']:6.2f} s  {row.get('reason', '')[:160]}", flush=True)
        rows.append(row)
    scratch.cleanup()
    return rows


def _try_one(model_type: str) -> dict:
    """:func:`idinspect.automatic.probe` in a worker, as a sweep row."""
    from idinspect.automatic import probe

    row = probe(model_type)
    row["outcome"] = row.pop("state")
    return row


def _worker(conn) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))   # a default-sized tower fails, not the machine
    torch.set_num_threads(1)
    while True:
        model_type = conn.recv()
        if model_type is None:
            return
        conn.send(_try_one(model_type))


def unclaimed(limit: int | None = None) -> list[dict]:
    """Every model type AutoModel maps that no adapter claims (or one refused by hand), each in a worker
    process that is replaced when a type runs past PER_TYPE_SECONDS or fails hard."""
    import multiprocessing as mp

    from idinspect.adapters import ADAPTERS
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    types = [t for t in sorted(CONFIG_MAPPING.keys()) if t not in ADAPTERS or t in ADAPTERS.refused]
    ctx = mp.get_context("spawn")
    rows, proc, conn = [], None, None
    for model_type in types[:limit]:
        if proc is None:
            conn, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child,), daemon=True)
            proc.start()
        start = time.perf_counter()
        conn.send(model_type)
        if conn.poll(PER_TYPE_SECONDS):
            try:
                row = conn.recv()
            except EOFError:
                row = {"model_type": model_type, "outcome": "refused", "reason": "the worker died (memory cap?)"}
                proc = None
        else:
            row = {"model_type": model_type, "outcome": "refused", "reason": f"over {PER_TYPE_SECONDS} s"}
            proc.kill()
            proc = None
        if proc is not None and not proc.is_alive():
            proc = None
        row["seconds"] = round(time.perf_counter() - start, 2)
        print(f"{model_type:32s} {row['outcome']:10s} {row['seconds']:6.2f} s  {row.get('reason', '')[:160]}", flush=True)
        rows.append(row)
    if proc is not None:
        conn.send(None)
        proc.join(10)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["supported", "unclaimed", "both"], default="both")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--variant", action="append", default=None,
                        help="part supported: this tiny variant only (repeatable; default: every one)")
    parser.add_argument("--from-folders", action="store_true",
                        help="part supported: read each variant from a saved folder, not the live model")
    parser.add_argument("--markdown", metavar="RESULTS_JSON",
                        help="print docs/families.md's generated part from a sweep's results (the same text as "
                             "`idinspect families --auto --format markdown`, without probing again)")
    args = parser.parse_args()
    if args.markdown:
        from idinspect.adapters import family_states

        from idinspect.commands.families_cmd import markdown

        rows = json.loads(Path(args.markdown).read_text())["unclaimed"]
        print(markdown(family_states({r["model_type"]: r["evidence"] for r in rows if r["outcome"] == "automatic"}),
                       auto=True))
        return
    torch.set_num_threads(1)
    out: dict = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    import transformers
    out["transformers"] = transformers.__version__
    if args.part in ("supported", "both"):
        out["supported"] = supported(args.variant, args.from_folders)
        out["from_folders"] = args.from_folders
    if args.part in ("unclaimed", "both"):
        out["unclaimed"] = unclaimed(args.limit)
    for part in ("supported", "unclaimed"):
        if part in out:
            tally: dict[str, int] = {}
            for r in out[part]:
                tally[r["outcome"]] = tally.get(r["outcome"], 0) + 1
            print(f"{part}: {tally}")
            out[f"{part}_tally"] = tally
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-automatic.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
