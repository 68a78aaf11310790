"""``python -m bench.ours_worker CHECKPOINT OUT.json``: idinspect's side of bench/weightwatcher_compare.py,
shaped as bench/ww_worker.py is for WeightWatcher: open the checkpoint (``idinspect.load``: config,
headers and the imports they need, as WeightWatcher's side loads its model before timing), then time
``idinspect.inspect(model, heavy_tails=True)`` (reading every tensor included), and write the per-head and per-layer circuit alphas,
that time and this process's peak resident memory (VmHWM, read inside the process: a forked child's
``ru_maxrss`` carries its parent's high-water mark) as JSON."""

from __future__ import annotations

import json
import sys
import time


def peak_mib() -> float:
    """This process's peak resident set (VmHWM of /proc/self/status), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def main(src: str, dest: str) -> None:
    import idinspect

    t = time.perf_counter()
    model = idinspect.load(src)
    opened = time.perf_counter() - t
    t = time.perf_counter()
    report = idinspect.inspect(model, heavy_tails=True)
    seconds = time.perf_counter() - t
    model.close()
    alphas = {}
    for layer in report["layers"]:
        ht = layer["spectra"]["heavy_tail"]
        for form in ("qk", "ov"):
            rows = ht[form]["heads"] + [ht[form]["layer"]]
            for h, row in enumerate(rows):
                key = f"{layer['index']}.{form}.{'sum' if h == len(rows) - 1 else h}"
                alphas[key] = None if row is None else row["alpha"]
    with open(dest, "w") as f:
        json.dump({"seconds": seconds, "open_seconds": opened, "peak_mib": peak_mib(), "alphas": alphas}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
