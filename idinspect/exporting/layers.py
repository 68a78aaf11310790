"""The attention layers of an export, gauge-fixed a few layers ahead of the shard writer.

Per layer: read (adapter, checkpoint dtype) -> widen once to float64 -> canonicalise -> cast once
to the output dtype -> compare every invariant of the original with the cast result -> the
adapter's checkpoint tensors (original names, orientation, fusion).

The float64 work runs on worker threads while the caller writes other tensors: up to
:func:`gauge_workers` layers of the schedule (the order the writer will ask for layers) are read
and submitted ahead, one per usable CPU within a memory budget, each worker with its own
workspace and, with more than one worker, single-threaded torch kernels (the per-head work is
many small matrices, which two layers at a time keep two cores busier than two threads on one
layer). So at most that many layers are being computed, plus the one being written (cast
tensors only). All checkpoint reads and adapter calls stay on the caller's thread; a worker only
does tensor arithmetic on its own layer, so the result does not depend on which worker computed it.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from ..forms import FixedLayer, form_of
from ..forms.per_head import Degeneracy, InvariantError
from ..forms.per_head.invariants import largest_over_layers
from ..layer.buffers import Float64Buffers
from ..model import Model
from ..numerics.parallel import pin_thread_kernels, single_threaded_kernels, usable_cpus

#: progress(stage, done, total); here stage "gauge" counts layers.
Progress = Callable[[str, int, int], None]


def fix_layer(layer, target: torch.dtype | None, workspace: Float64Buffers | None = None) -> FixedLayer:
    """``layer`` in its form's gauge-fixed form, cast once to ``target`` (or its stored dtype), with the
    largest change that check found (:meth:`idinspect.forms.Form.fix`); ``workspace`` holds the float64
    intermediates, reused layer after layer, where the form uses one."""
    return form_of(layer).fix(layer, target, workspace)


class LayerStream:
    """Checkpoint tensors of gauge-fixed layers, asked for layer by layer in ``schedule`` order.

    ``schedule`` lists layer indices in the order :meth:`get` will first ask for them (a layer
    twice if a sharding splits it around another: it is then computed again, identically). Any
    other order still works, computed on demand. Each layer's error and non-uniqueness are
    recorded once. Use as a context manager (stops the worker).
    """

    def __init__(self, model: Model, target: torch.dtype | None, schedule: list[int],
                 progress: Progress | None = None, workers: int | None = None):
        self.model, self.target, self.schedule = model, target, list(schedule)
        self.progress = progress or (lambda *a: None)
        self.index: int | None = None
        self.tensors: dict[str, torch.Tensor] = {}
        self.errors: dict[int, InvariantError] = {}
        self.degeneracies: dict[int, list[Degeneracy]] = {}
        self.workers = gauge_workers(model) if workers is None else max(1, int(workers))
        self._local = threading.local()                      # one float64 workspace per worker thread
        self._kernels = single_threaded_kernels() if self.workers > 1 else contextlib.nullcontext()
        self._kernels.__enter__()
        self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="idinspect-gauge",
                                        initializer=pin_thread_kernels)
        self._pending: deque[tuple[int, Future]] = deque()
        self._position = 0
        self._submit_ahead()

    def get(self, layer: int, name: str) -> torch.Tensor:
        """The checkpoint tensor ``name`` of gauge-fixed ``layer``."""
        if self.index != layer:
            self.tensors, self.index = {}, None
            fixed = self._take(layer)
            self._submit_ahead()                             # the next layers compute while this one is written
            if layer not in self.errors:
                self.errors[layer], self.degeneracies[layer] = fixed.error, fixed.degeneracies
                self.progress("gauge", len(self.errors), self.model.num_layers)
            self.tensors, self.index = self.model.adapter.write_layer(fixed.cast, dtype=self.target), layer
        return self.tensors[name]

    def summary(self) -> tuple[float, str, list[Degeneracy]]:
        """(largest error, where, every non-uniqueness) over all layers, in layer order (the last maximum wins).

        A layer never asked for (not expected: every layer's tensors are written) is computed here.
        """
        self.tensors, self.index = {}, None
        for i in range(self.model.num_layers):
            if i not in self.errors:
                fixed = self._take(i)
                self.errors[i], self.degeneracies[i] = fixed.error, fixed.degeneracies
        worst, where = largest_over_layers((i, self.errors[i]) for i in range(self.model.num_layers))
        degeneracies = [d for i in range(self.model.num_layers) for d in self.degeneracies[i]]
        return worst, where, degeneracies

    def close(self) -> None:
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._kernels.__exit__(None, None, None)

    def __enter__(self) -> LayerStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _submit(self, layer: int) -> Future:
        return self._pool.submit(self._fix, self.model.layer(layer))    # read here, on the caller's thread

    def _fix(self, layer) -> FixedLayer:
        if not hasattr(self._local, "workspace"):
            self._local.workspace = Float64Buffers()
        return fix_layer(layer, self.target, self._local.workspace)

    def _submit_ahead(self) -> None:
        while len(self._pending) < self.workers and self._position < len(self.schedule):
            layer = self.schedule[self._position]
            self._position += 1
            self._pending.append((layer, self._submit(layer)))

    def _take(self, layer: int) -> FixedLayer:
        for i, (pending, future) in enumerate(self._pending):
            if pending == layer:
                del self._pending[i]
                return future.result()
        return self._submit(layer).result()                 # off schedule: queued after the pending ones


#: Float64 bytes the layers being gauge-fixed at once may hold (the widened input, the balanced
#: form and the check's copies, about three float64 copies of a layer's attention each).
GAUGE_IN_FLIGHT_BYTES = 2**31


def gauge_workers(model: Model) -> int:
    """Layers gauge-fixed at once: one per usable CPU, within :data:`GAUGE_IN_FLIGHT_BYTES` (two at
    Llama-3.1-8B's width, one at 70B's) and the layer count."""
    per_layer = 3 * 8 * sum(math.prod(model.reader.shape(key)) for key in model.adapter.attention_keys(0))
    return int(max(1, min(usable_cpus(), GAUGE_IN_FLIGHT_BYTES // max(1, per_layer), model.num_layers)))
