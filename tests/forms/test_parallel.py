"""Layers in flight at once (idinspect.numerics.parallel): same results, in order, bounded."""

from __future__ import annotations

import threading

import pytest
import torch

import idinspect
from idinspect.forms.per_head.spectra import gram_float64
from idinspect.layer.buffers import Float64Buffers
from idinspect.numerics.parallel import IN_FLIGHT_BYTES, layer_workers, ordered_map

# thread handling is what is tested here: with the machine's thread count, not the suite's one
pytestmark = pytest.mark.usefixtures("machine_threads")


def test_ordered_map_keeps_order_state_per_thread_and_restores_threads():
    before = torch.get_num_threads()
    seen: dict[int, int] = {}

    def fn(i: int, state: dict) -> int:
        seen[i] = id(state)
        state.setdefault("thread", threading.get_ident())
        assert state["thread"] == threading.get_ident()
        assert torch.get_num_threads() == 1
        return i * i

    assert list(ordered_map(fn, 7, 3, dict)) == [i * i for i in range(7)]
    assert len(set(seen.values())) <= 3
    assert torch.get_num_threads() == before


def _mkl_threads():
    """MKL's thread count for the calling thread (MKL_Get_Max_Threads), or skip without MKL."""
    import ctypes
    import os

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        fn = lib.MKL_Get_Max_Threads
    except (OSError, AttributeError):
        pytest.skip("this torch build does not export MKL")
    fn.restype = ctypes.c_int
    return fn


def test_ordered_map_workers_start_with_single_threaded_mkl():
    """MKL's thread count is per thread and torch applies its own only at a thread's first parallel
    kernel: a worker that calls MKL first (analysis/low_precision_gemm.py) must already see 1."""
    mkl_threads = _mkl_threads()
    # a fresh pool per call: every item may be a thread's first
    seen = [t for _ in range(3) for t in ordered_map(lambda i, _: mkl_threads(), 4, 2, lambda: None)]
    assert seen == [1] * len(seen)


def test_export_workers_start_with_single_threaded_mkl(tiny_dir, monkeypatch):
    """The export's gauge-fixing threads too: float64 products and LAPACK run in MKL, whose sums
    depend on its thread count, so a thread's first layer computed with MKL's default team would
    make exports differ in their last bits with the scheduling (seen once in
    tests/hostile/test_hostile_kill.py)."""
    from idinspect.exporting import layers as export_layers

    mkl_threads = _mkl_threads()
    seen: list[int] = []
    fix = export_layers.fix_layer
    monkeypatch.setattr(export_layers, "fix_layer", lambda *a, **k: (seen.append(mkl_threads()), fix(*a, **k))[1])
    with idinspect.load(tiny_dir("llama-gqa")) as model:
        for _ in range(3):                                   # a fresh pool each time
            with export_layers.LayerStream(model, None, list(range(model.num_layers)), workers=2) as stream:
                stream.summary()
    assert len(seen) == 3 * model.num_layers and seen == [1] * len(seen)


def test_ordered_map_stops_after_an_error():
    started: list[int] = []

    def fn(i: int, state) -> int:
        started.append(i)
        if i == 1:
            raise ValueError("layer 1 is bad")
        return i

    with pytest.raises(ValueError, match="layer 1"):
        list(ordered_map(fn, 50, 2, lambda: None))
    assert max(started) <= 3          # only what was in flight, not all 50


def test_layer_workers_respects_cpus_memory_layers_and_device(monkeypatch):
    import idinspect.numerics.parallel as parallel

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 8)
    cpu = torch.device("cpu")
    assert layer_workers(10 * 2**20, 32, cpu) == 8
    assert layer_workers(IN_FLIGHT_BYTES // 3, 32, cpu) == 3
    assert layer_workers(2 * IN_FLIGHT_BYTES, 32, cpu) == 1
    assert layer_workers(10 * 2**20, 2, cpu) == 2
    assert layer_workers(10 * 2**20, 32, torch.device("meta")) == 1


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_chunked_gram_equals_the_whole_tensor_cast(dtype, monkeypatch):
    """gram_float64 casts a few heads at a time into reused scratch; each head's W^T W is the float64
    product of the exactly cast weight, in either memory order the adapters produce."""
    import idinspect.forms.per_head.spectra as spectra

    g = torch.Generator().manual_seed(1)
    stored = torch.randn(6 * 8, 40, generator=g).to(dtype)          # [heads * d_k, d], like q_proj
    by_rows = stored.view(6, 8, 40).transpose(-1, -2)               # [H, d, d_k], column-major heads
    by_cols = stored.T.reshape(40, 6, 8).permute(1, 0, 2)           # [H, d, d_k] from an o_proj-like [d, H d_k]
    monkeypatch.setattr(spectra, "CAST_CHUNK_BYTES", 8 * 40 * 8 * 4)   # four heads per chunk: 4 + 2
    scratch = Float64Buffers()
    for tall in (by_rows, by_cols):
        wide = tall.to(torch.float64)
        expected = torch.stack([w.T @ w for w in wide])
        got = gram_float64(tall, scratch)
        assert got.dtype == torch.float64
        assert torch.allclose(got, expected, rtol=1e-15, atol=0)
    buffers = list(scratch._buffers.values())
    gram_float64(by_rows, scratch)
    assert [b.data_ptr() for b in scratch._buffers.values()] == [b.data_ptr() for b in buffers]


def test_split_only_where_memory_kept_layers_below_the_cpus(monkeypatch):
    """A layer is split over idle CPUs only when the memory budget, not the layer count or the
    caller, set the layers at once; never on a GPU."""
    import idinspect.numerics.parallel as parallel

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 8)
    cpu = torch.device("cpu")
    assert parallel.split_threads(1, 80, cpu) == 2                  # one 70B-wide layer at a time: 2 threads
    assert parallel.split_threads(3, 80, cpu) == 2
    assert parallel.split_threads(8, 80, cpu) == 1                  # every CPU has a layer
    assert parallel.split_threads(1, 1, cpu) == 1                   # one layer: the count, not memory
    assert parallel.split_threads(1, 80, torch.device("meta")) == 1
    with parallel.layer_plan(10 * 2**20, 32, cpu, Float64Buffers) as (k, split):
        assert (k, split) == (8, None)
    with parallel.layer_plan(parallel.STREAM_BYTES // 3, 32, cpu, Float64Buffers) as (k, split):
        assert k == 3 and split is not None                         # 3 layers within the budget, 2 threads each
    with parallel.layer_plan(2 * parallel.STREAM_BYTES, 32, cpu, Float64Buffers, workers=1) as (k, split):
        assert (k, split) == (1, None)                              # the caller's own count is kept whole
    before = torch.get_num_threads()
    with parallel.layer_plan(2 * parallel.STREAM_BYTES, 32, cpu, Float64Buffers) as (k, split):
        assert k == 1 and split is not None and torch.get_num_threads() == 1
        names = split.map(lambda i, buffers: (i, threading.current_thread().name, type(buffers).__name__), [0, 1, 2])
    assert [n[0] for n in names] == [0, 1, 2] and all(n[1].startswith("idinspect-split") for n in names)
    assert {n[2] for n in names} == {"Float64Buffers"}
    assert torch.get_num_threads() == before


def test_a_split_layer_gives_the_same_invariants(tiny_dir, monkeypatch):
    """Layers too large for two at once in compare's pass (the budget shrunk to force it) are split
    over two threads: the invariants are those of one layer at a time, bit for bit."""
    import idinspect.numerics.parallel as parallel
    from idinspect.compare.invariants import model_invariants

    folder = tiny_dir("llama-gqa")
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    splits: list[int] = []
    real_map = parallel.SplitLayer.map
    monkeypatch.setattr(parallel.SplitLayer, "map", lambda self, fn, items: splits.append(len(items)) or
                        real_map(self, fn, items))
    with idinspect.load(folder) as model:
        with parallel.single_threaded_kernels():                      # the same kernels as the split's threads
            whole_inv = model_invariants(model, workers=1)
        assert splits == []
        monkeypatch.setattr(parallel, "STREAM_BYTES", 1)
        split_inv = model_invariants(model)
        assert splits == [4] * model.num_layers                      # the four R factors of every layer
    for a, b in zip(whole_inv.layers, split_inv.layers):
        for name in ("qk", "ov", "planes", "radius_qk", "radius_ov", "radius_planes"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or torch.equal(x, y), name
