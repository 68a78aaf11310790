"""``python -m bench.heavy_tail_cost [NAME]``: the extra cost of the heavy-tail section (issue 37) as
a ratio of ``idinspect.inspect`` time, on a cached benchmark checkpoint (default ``llama-1b-2l``,
built by ``python -m bench.build llama-1b-2l``).

``inspect`` runs in this process alternately with the section (``heavy_tails=True``, ``--heavy-tails``)
and without it (the default), ``--repeats`` times each after one
warm-up of each; reported: the median of each, their ratio, and the section's own time per layer
(:func:`idinspect.forms.per_head.heavy_tail.heavy_tail` timed alone on each loaded layer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def _inspect_seconds(path: Path, with_section: bool) -> float:
    import idinspect

    t = time.perf_counter()
    idinspect.inspect(str(path), heavy_tails=with_section)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", nargs="?", default="llama-1b-2l")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from .build import checkpoint_dir
    path = checkpoint_dir(next(s for s in _specs() if s.name == args.name))
    for flag in (True, False):                                  # warm-up (page cache, allocator)
        _inspect_seconds(path, flag)
    runs: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(args.repeats):
        runs["with"].append(_inspect_seconds(path, True))
        runs["without"].append(_inspect_seconds(path, False))
    import idinspect
    from idinspect.forms.per_head.heavy_tail import heavy_tail
    from idinspect.forms.per_head.spectra import head_spectra
    model = idinspect.load(str(path))
    own = []
    for layer in model.layers():
        s = head_spectra(layer)
        t = time.perf_counter()
        heavy_tail(layer, s)
        own.append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in runs.items()}
    out = {"model": args.name, "threads": torch.get_num_threads(), "runs_s": runs, "median_s": med,
           "ratio_with_over_without": med["with"] / med["without"], "section_s_per_layer": own}
    RESULTS.mkdir(exist_ok=True)
    dest = RESULTS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-heavy-tail-cost.json"
    dest.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


def _specs():
    from .specs import FULL, QUICK
    return (*QUICK, *FULL)


if __name__ == "__main__":
    raise SystemExit(main())
