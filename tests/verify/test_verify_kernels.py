"""The two kernels verify's speed rests on give the answers of the plain formulas they replace:
the bitwise tensor comparison, and the rounding baseline computed in a tensor's memory order."""

from __future__ import annotations

import pytest
import torch

from idinspect.equivalence.baseline import BASELINE_SCALE, scaled_and_rounded
from idinspect.equivalence.verify import bitwise_equal


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 3, 8, 1001, 4096])
def test_bitwise_equal_sees_every_entry(dtype, n):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, generator=g).to(dtype)
    assert bitwise_equal(a, a.clone())
    for at in (0, n // 2, n - 1):        # a change in the last bit of any one entry, odd sizes included
        b = a.clone()
        b.view(torch.int8 if dtype.itemsize == 1 else {2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize])[at] ^= 1
        assert not bitwise_equal(a, b)


def test_bitwise_equal_is_about_bits_not_values():
    zero, minus_zero = torch.zeros(4), -torch.zeros(4)
    assert torch.equal(zero, minus_zero) and not bitwise_equal(zero, minus_zero)
    nan = torch.full((4,), float("nan"))
    assert not torch.equal(nan, nan) and bitwise_equal(nan, nan.clone())
    a = torch.randn(6, 8)
    assert bitwise_equal(a.T, a.T.contiguous())                 # strided views compare by value layout
    assert not bitwise_equal(a, a.to(torch.float64))            # different dtypes are never the same bits
    assert not bitwise_equal(a, a.reshape(8, 6))                # nor different shapes


@pytest.mark.parametrize("hold", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape, perm", [((4, 16, 24), (0, 2, 1)), ((16, 24), (1, 0)), ((5, 6, 7), (2, 0, 1)),
                                         ((7,), (0,)), ((3, 4, 5), (0, 1, 2))])
def test_scaled_and_rounded_equals_the_formula_in_any_memory_order(shape, perm, hold):
    """(t c) in float64 rounded to bf16, entry by entry, whatever the view's strides (a canonical
    per-head tensor is a transposed view of the stored matrix), chunks smaller than the tensor."""
    import idinspect.equivalence.baseline as baseline

    g = torch.Generator().manual_seed(len(shape))
    t = torch.randn(*shape, generator=g).to(torch.bfloat16).permute(perm)
    expected = (t.to(torch.float64) * BASELINE_SCALE).to(torch.bfloat16).to(hold)
    chunk = baseline.ROUNDING_CHUNK
    try:
        baseline.ROUNDING_CHUNK = 37         # many chunks, none aligned to a row
        got = scaled_and_rounded(t, BASELINE_SCALE, torch.bfloat16, hold)
    finally:
        baseline.ROUNDING_CHUNK = chunk
    assert got.dtype == hold and got.shape == t.shape and torch.equal(got, expected)
    gapped = torch.randn(6, 10, generator=g)[:, ::2]           # no dense memory order: copied first
    assert torch.equal(scaled_and_rounded(gapped, 1.5, torch.bfloat16, hold),
                       (gapped.to(torch.float64) * 1.5).to(torch.bfloat16).to(hold))
