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
from dataclasses import dataclass

import torch

from ..analysis.findings import overflow_limit
from ..analysis.parallel import pin_thread_kernels, single_threaded_kernels, usable_cpus
from ..analysis.precision import comparison_precision
from ..analysis.spectra import all_finite
from ..errors import IdinspectError
from ..layer.attention_layer import AttentionLayer
from ..gauge import Degeneracy, InvariantError, canonicalize, largest_invariant_error
from ..gauge.invariants import largest_over_layers
from ..gauge.latent import canonicalize_latent, latent_output_error
from ..gauge.qk_gain_trade import cast_norm
from ..layer.buffers import Float64Buffers
from ..layer.latent_layer import LatentAttentionLayer, is_latent
from ..model import Model

#: progress(stage, done, total); here stage "gauge" counts layers.
Progress = Callable[[str, int, int], None]


@dataclass
class FixedLayer:
    """One layer's gauge-fixed form cast to the output dtype, and what its check found."""

    cast: AttentionLayer
    error: InvariantError
    degeneracies: list[Degeneracy]


def check_representable(layer: AttentionLayer, role: str, exact: torch.Tensor, cast: torch.Tensor) -> None:
    """Refuse (naming the tensor, the reason and the largest value) a gauge-fixed tensor that its output
    dtype cannot hold: one that overflows it, or one whose largest entry is subnormal there (stored
    with fewer significant bits than the dtype's precision, it no longer computes the same function
    to that dtype's rounding)."""
    name = layer.tensor_names.get(role, role)
    kind = str(cast.dtype).removeprefix("torch.")
    largest = float(exact.abs().max()) if exact.numel() else 0.0
    if not all_finite(cast):
        raise IdinspectError(f"layer {layer.index}: the gauge-fixed {name} is not finite in {kind} (the balanced "
                             f"form's largest value {largest:.3g} overflows it, whose maximum is "
                             f"{torch.finfo(cast.dtype).max:.3g}); export with --dtype float64, or keep the checkpoint as it is")
    if cast.dtype.is_floating_point and 0 < largest < torch.finfo(cast.dtype).tiny:
        raise IdinspectError(f"layer {layer.index}: the gauge-fixed {name} has largest value {largest:.3g}, below "
                             f"{kind}'s smallest normal number {torch.finfo(cast.dtype).tiny:.3g}: stored as subnormals "
                             f"it keeps too few significant bits to compute the same function; export with --dtype "
                             "float64, or rescale the checkpoint")


def fix_layer(layer: AttentionLayer, target: torch.dtype | None, workspace: Float64Buffers | None = None) -> FixedLayer:
    """Canonicalise ``layer`` in float64, cast each tensor once (to ``target``, or its stored dtype),
    and measure the largest invariant change between the original and the cast result.

    The float64 intermediates go into ``workspace`` (reused layer after layer) when given; the
    result holds none of them. A multi-head latent attention block takes :func:`fix_latent_layer`.
    """
    if is_latent(layer):
        return fix_latent_layer(layer, target)
    refuse_unfixable(layer)
    ws = workspace or Float64Buffers()
    original = layer.replace(**{role: ws.widen(f"input {role}", t) for role, t in layer.tensors().items()})
    fixed, report = canonicalize(original, workspace=ws)
    cast = fixed.replace(**{role: t.to(target or getattr(layer, role).dtype, copy=True)   # never a workspace buffer
                            for role, t in fixed.tensors().items()})
    if fixed.qk_norm is not None:                           # the balanced norm gains, cast the same way
        cast = cast.replace(qk_norm=cast_norm(fixed.qk_norm, layer.qk_norm, target))
    for role, t in cast.tensors().items():
        check_representable(layer, role, getattr(fixed, role), t)
    if comparison_precision(layer.W_Q.dtype, cast.W_Q.dtype) == torch.float32:   # bf16/fp16 in and out:
        error = largest_invariant_error(layer, cast, grams_a=report.head_grams,   # the same values, half the
                                        precision=torch.float32)                   # bytes to widen
    else:
        for role, t in fixed.tensors().items():             # the cast values in float64, written into
            t.copy_(getattr(cast, role))                    # canonicalize's own buffers (no new ones)
        if fixed.qk_norm is not None:
            fixed = fixed.replace(qk_norm=cast.qk_norm.to(torch.float64))
        error = largest_invariant_error(original, fixed, overwrite_a=True,   # original is ours and done with;
                                        grams_a=report.head_grams)           # its Grams from canonicalize
    return FixedLayer(cast, error, report.degeneracies)


def fix_latent_layer(layer: LatentAttentionLayer, target: torch.dtype | None) -> FixedLayer:
    """The balanced-latent form of an MLA block (:mod:`idinspect.gauge.latent`) cast once; its error is
    the largest relative change of the block's output (MLA has no thin per-head invariants)."""
    refuse_unfixable(layer)
    original = layer.to(torch.float64)
    fixed, notes = canonicalize_latent(original)
    cast = fixed.replace(**{role: t.to(target or getattr(layer, role).dtype, copy=True)
                            for role, t in fixed.tensors().items()})
    for role, t in cast.tensors().items():
        if not all_finite(t):
            raise IdinspectError(f"layer {layer.index}: the gauge-fixed {layer.tensor_names.get(role, role)} is not "
                                 f"finite in {str(t.dtype).removeprefix('torch.')}; export with --dtype float32 or "
                                 "float64, or keep the checkpoint as it is")
    return FixedLayer(cast, latent_output_error(original, cast.to(torch.float64)), notes)


def refuse_unfixable(layer: AttentionLayer) -> None:
    """Raise naming the tensor if an attention tensor holds NaN/Inf, or float64 values whose products
    overflow (inspect reports both as findings; a gauge of undefined or overflowing numbers is no gauge)."""
    limit = overflow_limit(max(layer.d_model, layer.d_k))
    for role, t in layer.tensors().items():
        name = layer.tensor_names.get(role, role)
        if not all_finite(t):
            raise IdinspectError(f"tensor {name} holds non-finite values (NaN or Inf); export refuses to gauge-fix "
                                 f"it and wrote nothing: run 'idinspect MODEL' to see where, and repair or "
                                 "re-download the checkpoint")
        if t.dtype == torch.float64 and t.numel() and float(t.abs().max()) > limit:
            raise IdinspectError(f"tensor {name} holds values up to {float(t.abs().max()):.3g}, beyond {limit:.3g} "
                                 "where its products overflow float64; export refuses to gauge-fix it and wrote "
                                 "nothing: repair or re-download the checkpoint")


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

    def _fix(self, layer: AttentionLayer) -> FixedLayer:
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
