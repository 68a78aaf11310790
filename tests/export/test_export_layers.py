"""The export's layer stream: gauge-fixed on a worker thread one layer ahead, bit-identical to
computing inline, correct for any request order, each layer's check recorded once."""

from __future__ import annotations

import pytest
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


def test_largest_magnitude_matches_abs_max_on_strided_views():
    """export's representability check takes max |t| from one min/max pass over the memory in order; the
    same value as |t|.max() on the strided per-head views export hands it, NaN kept, 0 for an empty tensor."""
    import math

    import torch

    from idinspect.forms.per_head.export import largest_magnitude

    g = torch.Generator().manual_seed(0)
    flat = torch.randn(8 * 16, 40, generator=g, dtype=torch.float64)
    flat[37, 5] = -9.5                                        # the largest magnitude is negative
    views = [flat, flat.view(8, 16, 40).transpose(1, 2),      # [H, m, k] column-major per head, as W_Q^h
             flat.t().reshape(40, 8, 16).permute(1, 2, 0),    # another permutation of a dense buffer
             flat[:, ::3]]                                    # not dense: reduced as it is
    for t in views:
        assert largest_magnitude(t) == float(t.abs().max())
    assert largest_magnitude(views[1]) == 9.5
    assert largest_magnitude(torch.empty(0, 3)) == 0.0
    bad = flat.clone()
    bad[3, 3] = float("nan")
    assert math.isnan(largest_magnitude(bad.view(8, 16, 40).transpose(1, 2)))


def test_half_precision_layers_apply_their_float64_transforms_in_float32(tiny_dir):
    """A bf16/fp16 layer written in bf16/fp16 has its transforms (float64) applied in float32: the
    weights equal the float64 route's to float32 rounding, biases, spectra and signs identical, and
    the written bf16 values and the check's error are those of the float64 route."""
    from idinspect.forms.per_head.canonicalize import canonicalize
    from idinspect.forms.per_head.fast_route import apply_precision
    from idinspect.forms.per_head.invariants import largest_invariant_error

    f32, f64, bf16, fp16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
    assert [apply_precision(*p) for p in ((bf16, bf16), (fp16, fp16), (bf16, fp16), (f32, bf16), (bf16, f32),
                                          (f64, f64), (bf16, bf16, bf16, f32), ())] == [f32, f32, f32, f64, f64, f64, f64, f64]
    for variant in ("qwen2", "llama3-rope"):                  # biases and half-rotated planes; full RoPE
        model = idinspect.load(tiny_dir(variant, dtype=bf16))
        for i in range(model.num_layers):
            layer = model.layer(i)
            assert layer.W_Q.dtype == bf16
            wide = layer.to(f64)
            (low, r_low), (ref, r_ref) = (canonicalize(wide, apply_dtype=d) for d in (f32, f64))
            assert r_low.degeneracies == r_ref.degeneracies
            for role, t in ref.tensors().items():
                got = getattr(low, role)
                if role in ("W_Q", "W_K", "W_V", "W_O"):
                    assert got.dtype == f32 and got.stride() == t.stride()
                    assert float((got.double() - t).abs().max()) <= 1e-6 * float(t.abs().max()), role
                else:
                    assert got.dtype == f64 and torch.equal(got, t), role
            cast_low = fix_layer(layer, None)                 # the export's own route: float32 products
            assert cast_low.cast.W_Q.dtype == bf16
            cast_ref = ref.replace(**{r: t.to(bf16) for r, t in ref.tensors().items()})
            err_ref = largest_invariant_error(layer, cast_ref, precision=f32)
            assert cast_low.error.error == pytest.approx(err_ref.error, rel=1e-3)
            differ = sum(int((getattr(cast_low.cast, r) != t).sum()) for r, t in cast_ref.tensors().items())
            assert differ <= 2, differ                         # a float64 product at a rounding boundary


def test_head_blocked_and_dense_strides():
    """Export's float64/float32 copies keep each head's block contiguous (o_proj's heads are d rows
    d_v apart); its casts come back in the stored order of dimensions (the adapter's views need no copy)."""
    from idinspect.layer.buffers import dense_strides, head_blocked_strides

    o_proj = torch.randn(12, 3 * 4)                            # [d, H d_v]: W_O [H, d_v, d] is a view
    W_O = o_proj.view(12, 3, 4).permute(1, 2, 0)
    assert W_O.stride() == (4, 1, 12) and dense_strides(W_O) == (4, 1, 12)
    blocked = head_blocked_strides(W_O)
    assert blocked == (48, 1, 4)
    copy = torch.empty_strided(W_O.shape, blocked).copy_(W_O)
    assert torch.equal(copy, W_O) and all(copy[h].is_contiguous() or copy[h].t().is_contiguous() for h in range(3))
    W_Q = torch.randn(3 * 4, 12).view(3, 4, 12).transpose(1, 2)   # q_proj [H d_k, d]: heads already blocks
    assert head_blocked_strides(W_Q) == W_Q.stride() == (48, 1, 12)
    fused = torch.randn(12, 3 * 3 * 4)[:, :12]                    # W_Q inside a fused QKV weight: gaps
    assert dense_strides(fused) == (12, 1) and dense_strides(fused.t()) == (1, 12)
    assert head_blocked_strides(torch.randn(5)) == (1,)
