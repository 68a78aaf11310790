"""Read buffers reused across layers (issue 20): a buffer goes back into use only when no tensor
(or view of one) made from it is alive, under concurrent readers too."""

from __future__ import annotations

import threading

import torch

import idinspect
from idinspect.sources.pread import BufferPool
from tests.support import tiny


def test_a_buffer_is_reused_only_when_nothing_views_it():
    pool = BufferPool(1 << 20)
    a = pool.take(4096)
    view = a.view(torch.int32)[5:9]                    # a view keeps the buffer in use
    del a
    b = pool.take(4096)
    assert b.data_ptr() != view.data_ptr() - 20
    first = view.data_ptr() - 20
    del view
    c = pool.take(4096)
    assert c.data_ptr() == first                        # free again: handed out again
    assert pool.take(100).data_ptr() not in (b.data_ptr(), c.data_ptr())


def test_pool_keeps_at_most_its_budget():
    pool = BufferPool(10_000)
    held = [pool.take(4000) for _ in range(5)]          # only two fit the budget
    ptrs = [t.data_ptr() for t in held]
    del held
    again = [pool.take(4000) for _ in range(2)]
    assert {t.data_ptr() for t in again} <= set(ptrs[:2])
    assert sum(b.nbytes for b in pool._buffers) <= 10_000


def test_concurrent_takers_never_share_a_buffer():
    pool = BufferPool(1 << 24)
    clashes = []
    live: dict[int, int] = {}
    lock = threading.Lock()

    def worker(tag: int) -> None:
        for _ in range(300):
            t = pool.take(1 << 16)
            with lock:
                if t.data_ptr() in live:
                    clashes.append(t.data_ptr())
                live[t.data_ptr()] = tag
            t.fill_(tag)
            ok = bool((t == tag).all())
            with lock:
                live.pop(t.data_ptr())
            if not ok:
                clashes.append(-1)
            del t

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert clashes == []


def test_tensors_read_earlier_keep_their_values(tmp_path):
    """Layer 0's tensors, still held while later layers are read, are not overwritten."""
    model = tiny.build("llama-gqa", dtype=torch.float32)
    path = tiny.save(model, tmp_path / "m", dtype=torch.bfloat16)
    with idinspect.load(path) as m:
        names = m.adapter.attention_keys(0)
        held = {k: m.reader.get(k) for k in names}
        copies = {k: v.clone() for k, v in held.items()}
        for i in range(m.num_layers):
            for k in m.adapter.attention_keys(i):
                m.reader.get(k)
        for k in names:
            assert torch.equal(held[k], copies[k])
