"""``python -m bench.export_stages MODEL OUT``: one export, timed stage by stage (where the time goes).

Runs :func:`idinspect.export` in this process with the pipeline's stages wrapped by timers (the
library itself is unchanged; only this process's functions are wrapped): the main thread's time
reading layers (``model.layer``), waiting for the gauge workers (``future.result``), turning a
fixed layer into checkpoint tensors (``adapter.write_layer``), writing re-encoded tensors
(``ShardWriter.write``), copying untouched tensors file to file (``ShardWriter.copy``) and the
rest; the workers' time in the gauge fix itself (``Form.fix``: canonicalise, cast, invariant
check), summed over workers; fsync (on its own thread) and the header patch. Prints one JSON
object: wall and CPU seconds of the whole export, and each stage's wall time and CPU time (of the
thread that ran it, user + system: the kernel's copy counts; load-independent, unlike the wall
times of a shared machine). OUT is removed afterwards.
"""

from __future__ import annotations

import functools
import json
import shutil
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path


def main(argv: list[str]) -> dict:
    t_start, c_start = time.perf_counter(), time.process_time()
    import idinspect
    from idinspect.exporting import layers as layers_mod
    from idinspect.exporting import pipeline
    from idinspect.exporting import shard_writer as sw
    from idinspect.model import Model

    imported, imported_cpu = time.perf_counter() - t_start, time.process_time() - c_start
    src, out = Path(argv[0]), Path(argv[1])
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    stage_cpu: dict[str, float] = defaultdict(float)          # the calling thread's CPU time (user + system)
    lock = threading.Lock()

    def timed(stage: str, fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                with lock:
                    totals[stage] += time.perf_counter() - t0
                    stage_cpu[stage] += time.thread_time() - c0
                    counts[stage] += 1
        return wrapper

    layers_mod.fix_layer = timed("gauge fix (workers, summed)", layers_mod.fix_layer)
    Model.layer = timed("read layer (main thread)", Model.layer)
    layers_mod.LayerStream._take = timed("wait for gauge worker (main thread)", layers_mod.LayerStream._take)
    sw.ShardWriter.write = timed("write re-encoded tensors", sw.ShardWriter.write)
    sw.ShardWriter.copy = timed("copy untouched tensors (kernel)", sw.ShardWriter.copy)
    pipeline.sync_file = timed("fsync shards (own thread)", pipeline.sync_file)
    pipeline.patch_slots = timed("patch header slots + fsync", pipeline.patch_slots)
    pipeline.copy_files = timed("copy other files", pipeline.copy_files)
    pipeline.verified_commit = timed("provenance (digest check)", pipeline.verified_commit)
    pipeline.publish = timed("publish (rename)", pipeline.publish)
    original_write_layer = None

    def wrap_adapter(model):
        nonlocal original_write_layer
        adapter = model.adapter
        original_write_layer = adapter.write_layer
        adapter.write_layer = timed("adapter.write_layer (main thread)", original_write_layer)

    real_export = pipeline._export

    def export_hook(model, *a, **k):
        wrap_adapter(model)
        t0 = time.perf_counter()
        try:
            return real_export(model, *a, **k)
        finally:
            totals["_export (pipeline, after load)"] += time.perf_counter() - t0

    pipeline._export = export_hook
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    idinspect.export(str(src), str(out))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    shutil.rmtree(out, ignore_errors=True)
    result = {"imports_s": imported, "imports_cpu_s": imported_cpu, "export_s": wall, "export_cpu_s": cpu,
              "stages_s": {k: round(v, 4) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
              "stages_cpu_s": {k: round(v, 4) for k, v in sorted(stage_cpu.items(), key=lambda kv: -kv[1])},
              "calls": dict(counts)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
