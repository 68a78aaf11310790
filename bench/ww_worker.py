"""Run inside the WeightWatcher benchmark venv only (see bench/weightwatcher_compare.py); never
imported by idinspect. ``python bench/ww_worker.py CHECKPOINT OUT.json``: load the checkpoint with
transformers, run ``WeightWatcher(model).analyze()`` with its defaults, write per-matrix alphas and
the analysis time (model loading excluded) and the process's peak resident memory as JSON."""

import json
import sys
import time

import torch
import transformers
import weightwatcher as ww


def main(src: str, dest: str) -> None:
    config = transformers.AutoConfig.from_pretrained(src)
    cls = getattr(transformers, config.architectures[0]) if config.architectures else transformers.AutoModel
    model = cls.from_pretrained(src, dtype=torch.float32).eval()
    t = time.perf_counter()
    details = ww.WeightWatcher(model=model).analyze()
    seconds = time.perf_counter() - t
    rows = [{"name": str(r["longname"]), "alpha": float(r["alpha"]) if r["alpha"] == r["alpha"] else None,
             "N": int(r["N"]), "M": int(r["M"])} for _, r in details.iterrows()]
    with open(dest, "w") as f:
        json.dump({"seconds": seconds, "version": ww.__version__, "rows": rows, "peak_mib": peak_mib()}, f)


def peak_mib() -> float:
    """This process's peak resident set (VmHWM, read inside: a forked child's ru_maxrss carries its parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
