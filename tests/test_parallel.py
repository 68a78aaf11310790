"""Layers in flight at once (idinspect.analysis.parallel): same results, in order, bounded."""

from __future__ import annotations

import threading

import pytest
import torch

import idinspect
from idinspect.analysis import analyze
from idinspect.analysis.analyzer import ComputeBuffers, to_compute
from idinspect.analysis.parallel import IN_FLIGHT_BYTES, layer_workers, ordered_map


@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "bert", "qwen2"])
def test_parallel_analysis_equals_serial(variant, tiny_dir):
    with idinspect.load(tiny_dir(variant)) as model:
        calls: list[int] = []
        serial = analyze(model, workers=1)
        parallel = analyze(model, workers=3, on_layer=lambda i, n: calls.append(i))
    assert parallel == serial
    assert calls == list(range(len(serial["layers"])))


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
    import idinspect.analysis.parallel as parallel

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 8)
    cpu = torch.device("cpu")
    assert layer_workers(10 * 2**20, 32, cpu) == 8
    assert layer_workers(IN_FLIGHT_BYTES // 3, 32, cpu) == 3
    assert layer_workers(2 * IN_FLIGHT_BYTES, 32, cpu) == 1
    assert layer_workers(10 * 2**20, 2, cpu) == 2
    assert layer_workers(10 * 2**20, 32, torch.device("meta")) == 1


def test_compute_buffers_are_reused_and_exact(tiny_dir):
    with idinspect.load(tiny_dir("gpt2")) as model:
        buffers = ComputeBuffers()
        first = to_compute(model.layer(0), torch.device("cpu"), buffers)
        ptr = first.W_Q.data_ptr()
        second = to_compute(model.layer(1), torch.device("cpu"), buffers)
        fresh = to_compute(model.layer(1), torch.device("cpu"))
    assert second.W_Q.data_ptr() == ptr
    for role, t in fresh.tensors().items():
        got = second.tensors()[role]
        assert got.dtype == torch.float64 and torch.equal(got, t) and got.shape == t.shape
