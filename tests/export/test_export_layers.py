"""The export's layer stream: gauge-fixed on a worker thread one layer ahead, bit-identical to
computing inline, correct for any request order, each layer's check recorded once."""

from __future__ import annotations

import torch

import idinspect
from idinspect.exporting.layers import LayerStream, fix_layer


def _inline(model, layer: int, target=None) -> dict[str, torch.Tensor]:
    return model.adapter.write_layer(fix_layer(model.layer(layer), target).cast, dtype=target)


def test_stream_equals_inline_bit_for_bit_in_any_order(tiny_dir):
    model = idinspect.load(tiny_dir("llama3-rope"))
    names = {i: model.adapter.attention_keys(i) for i in range(model.num_layers)}
    seen = []
    with LayerStream(model, None, schedule=[0, 1], progress=lambda *a: seen.append(a)) as stream:
        for layer in (1, 0, 1, 0):                           # against the schedule, and repeated
            for name in names[layer]:
                got, want = stream.get(layer, name), _inline(model, layer)[name]
                assert got.dtype == want.dtype and torch.equal(got, want), name
        worst, where, degeneracies = stream.summary()
    assert sorted(stream.errors) == [0, 1] and [a[1] for a in seen] == [1, 2]
    assert 0 < worst <= 1e-12 and where.startswith("layer ") and degeneracies == []


def test_summary_computes_layers_never_asked_for(tiny_dir):
    model = idinspect.load(tiny_dir("gpt2"))
    with LayerStream(model, torch.bfloat16, schedule=[]) as stream:
        worst, _, _ = stream.summary()
    assert sorted(stream.errors) == list(range(model.num_layers))
    assert 1e-4 < worst < 1e-2                                # one bf16 rounding of the gauge-fixed form
