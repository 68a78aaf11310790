"""A few layers in flight at once on a multi-core CPU, results in layer order.

Most of a layer's float64 work is many small LAPACK calls (SVDs and eigendecompositions of
d_k x d_k cores, batched over heads), which torch runs one matrix after another on one core, and
reading and casting, which is memory-bound. Two layers at a time, each in its own thread with
single-threaded torch kernels, keep both cores of a 2-core machine busy: 16 Llama-1B layers take
0.68 s instead of 0.90 s with torch's own two threads (and 2.3 s with both, from oversubscription,
which is why torch's thread count is set to 1 while the workers run and restored afterwards).

Memory stays bounded by the layers in flight, never by depth: at most :func:`layer_workers`
layers (their tensors within :data:`IN_FLIGHT_BYTES`) exist at a time. compare's pass keeps a
smaller budget (:func:`layer_plan`, :data:`STREAM_BYTES`); where it allows fewer layers than cores
(a 70B-wide layer is 288 MiB of bf16), the cores left over compute one layer's independent pieces
(:class:`SplitLayer`: the R factors of W_Q, W_O, W_K, W_V) instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")
S = TypeVar("S")

#: Budget for the tensors of the layers (or layer pairs, for diff and verify) handled at once; what
#: inspect's layers leave of it goes to a streamed hub checkpoint's read-ahead (``Model.read_ahead``).
IN_FLIGHT_BYTES = 2**30
#: The budget of compare's and fingerprint's pass (:func:`layer_plan`), its layers' tensors and the
#: streamed read-ahead together: with the imports (~300 MiB) and a layer's float64 temporaries, a
#: 70B-wide compare stays within 1 GiB (911 MiB: one 288 MiB layer and 224 MiB fetched ahead; two such
#: layers at once and a 64 MiB window peaked at 1.06 GiB). Its R factors, with the input gain folded
#: in, take the float64 route and are worth splitting; inspect's take the matrix units' bf16 products,
#: where a split saved no time (a 70B-wide layer 0.30 s either way) and one layer at a time cost
#: inspect 40 %.
STREAM_BYTES = 2**29


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def layer_workers(layer_bytes: int, layers: int, device: torch.device, budget: int | None = None) -> int:
    """How many layers to analyse at once: 1 on a GPU (its stream serialises them anyway); on the
    CPU one per usable core, within ``budget`` (default :data:`IN_FLIGHT_BYTES`) for the layers in
    flight and the layer count."""
    if device.type != "cpu":
        return 1
    by_memory = (IN_FLIGHT_BYTES if budget is None else budget) // max(1, layer_bytes)
    return int(max(1, min(usable_cpus(), by_memory, layers)))


def split_threads(workers: int, layers: int, device: torch.device) -> int:
    """Threads for one layer's pieces (:class:`SplitLayer`) where memory, not the layer count, kept
    ``workers`` below the CPUs: the CPUs left idle, at most 2 per layer (a layer has two large
    factors); 1 on a GPU or otherwise."""
    if device.type != "cpu" or workers >= min(usable_cpus(), layers):
        return 1
    return min(2, usable_cpus() // workers)


class SplitLayer:
    """``threads`` threads with single-threaded kernels, each with its own state ``make_state()``
    (e.g. reusable buffers), that map a layer's independent computations (one job per thread at a
    time, results in order). Use as ``with SplitLayer(2, Float64Buffers) as split:``; the caller holds
    torch's own thread count at 1 meanwhile (:func:`single_threaded_kernels`), so the two never
    oversubscribe the cores."""

    def __init__(self, threads: int, make_state: Callable[[], object]):
        self._local = threading.local()
        self._make = make_state
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="idinspect-split", initializer=pin_thread_kernels)

    def map(self, fn: Callable[[T, object], S], items: list[T]) -> list[S]:
        """``[fn(item, state) for item in items]``, computed in the threads (``state``: the thread's own)."""
        def run(item: T) -> S:
            if not hasattr(self._local, "state"):
                self._local.state = self._make()
            return fn(item, self._local.state)

        return list(self._pool.map(run, items))

    def __enter__(self) -> SplitLayer:
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def layer_plan(layer_bytes: int, layers: int, device: torch.device, make_state: Callable[[], object],
               workers: int | None = None) -> Iterator[tuple[int, SplitLayer | None]]:
    """(layers at once, a :class:`SplitLayer` or None) for a pass over ``layers`` layers: ``workers``
    (default :func:`layer_workers` within :data:`STREAM_BYTES`) layers at once and, where that budget left CPUs idle, each
    layer split over them with torch's kernels single-threaded for the pass."""
    k = layer_workers(layer_bytes, layers, device, STREAM_BYTES) if workers is None else max(1, int(workers))
    threads = split_threads(k, layers, device) if workers is None else 1
    if threads <= 1:
        yield k, None
        return
    with single_threaded_kernels(), SplitLayer(threads, make_state) as split:
        yield k, split


@contextlib.contextmanager
def single_threaded_kernels() -> Iterator[None]:
    """torch's intra-op threads and NumPy's BLAS threads set to 1 for the block (process-wide), then
    restored. NumPy's OpenBLAS (the heavy-tail section's SVDs) keeps its own team: left at the machine's
    size, two layer workers ran four BLAS threads on two cores (GPT-2 small's heavy tails 4.4 s, 2.5 s
    with one thread each). threadpoolctl sets it at run time (an environment variable is read only
    when the library loads)."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(before)


def pin_thread_kernels() -> None:
    """Give the calling (new) thread torch's thread count for its OpenMP and MKL work now.

    Both counts are per thread, and torch applies its own to a thread only at its first parallel
    kernel. MKL called directly before that (analysis/low_precision_gemm.py) would run a team of
    MKL's default size: wasted cores, and sums taken in an order that depends on which item a
    thread happened to start with (exports then differ in their last bits from run to run).
    A pool's ``initializer``."""
    torch.set_num_threads(torch.get_num_threads())


def ordered_map(fn: Callable[[int, S], T], n: int, workers: int, make_state: Callable[[], S]) -> Iterator[T]:
    """``fn(0, state), ..., fn(n - 1, state)`` in order, at most ``workers`` running at once in threads.

    Each thread gets its own ``state = make_state()`` (e.g. reusable buffers), dropped when the run
    ends. At most ``2 * workers`` items are submitted ahead of the one taken: a thread that finishes
    before an earlier item's thread starts the next item instead of waiting (the queued items hold
    nothing until a thread starts them, so memory stays bounded by ``workers``), and an error in
    item i stops the run after the items already submitted.
    """
    if workers <= 1 or n <= 1:
        state = make_state()
        for i in range(n):
            yield fn(i, state)
        return
    local = threading.local()

    def run(i: int) -> T:
        if not hasattr(local, "state"):
            local.state = make_state()
        return fn(i, local.state)

    with single_threaded_kernels(), ThreadPoolExecutor(workers, thread_name_prefix="idinspect-layer",
                                                       initializer=pin_thread_kernels) as pool:
        pending: deque[Future] = deque()
        submitted = 0
        try:
            while submitted < n or pending:
                while submitted < n and len(pending) < 2 * workers:
                    pending.append(pool.submit(run, submitted))
                    submitted += 1
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
