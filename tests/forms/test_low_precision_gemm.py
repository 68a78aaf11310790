"""The fast linear algebra under the analyzer (issue 20): MKL's bf16/fp16 gemm with float32 sums
for Gram matrices, and the blocked batched Cholesky factor, each checked against float64."""

from __future__ import annotations

import pytest
import torch

from idinspect.forms.per_head.spectra import gram_float64
from idinspect.numerics import low_precision_gemm, precision
from idinspect.numerics.cholesky import cholesky_upper


def _hf_layouts(dtype: torch.dtype, heads: int = 3, d: int = 300, dk: int = 40, seed: int = 1) -> dict[str, torch.Tensor]:
    """Per-head tall factors [n, d, d_k] as the adapters view them: q_proj rows (column-major heads),
    o_proj columns (strided row-major heads), and a plain contiguous batch."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(heads * dk, d, generator=gen).to(dtype)          # HF [out, in]
    o = torch.randn(d, heads * dk, generator=gen).to(dtype)
    return {"q_proj": q.view(heads, dk, d).transpose(1, 2),
            "o_proj": o.view(d, heads, dk).permute(1, 0, 2),
            "contiguous": torch.randn(heads, d, dk, generator=gen).to(dtype)}


def _mkl_expected(dtype: torch.dtype) -> bool:
    name = "_is_amx_fp16_supported" if dtype == torch.float16 else "_is_amx_tile_supported"
    return low_precision_gemm._cpu_has(name) and not low_precision_gemm.os.environ.get("IDINSPECT_NO_MKL_GEMM")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["q_proj", "o_proj", "contiguous"])
def test_low_precision_gram_is_the_float32_gram(dtype, layout):
    """Within the float32 sum's error bound m u_32 ||w_i|| ||w_j|| of the float64 Gram matrix, in
    every layout the adapters produce (taken by MKL where the CPU has the matrix units)."""
    tall = _hf_layouts(dtype)[layout]
    got = low_precision_gemm.gram_low_precision(tall)
    if _mkl_expected(dtype):
        assert got is not None, "this CPU has bf16/fp16 matrix units but the MKL route was not taken"
    if got is None:
        pytest.skip("no MKL mixed-precision gemm for this dtype on this machine")
    assert got.dtype == torch.float32 and got.shape == (3, 40, 40)
    wide = tall.double()
    want = wide.transpose(1, 2) @ wide
    col = wide.norm(dim=1)                                           # [n, k] column norms
    bound = tall.shape[1] * precision.UNIT_ROUNDOFF_32 * col[:, :, None] * col[:, None, :]
    assert ((got.double() - want).abs() <= bound).all()


def test_gather_path_for_strided_rows_matches_the_direct_path(monkeypatch):
    """Heads of o_proj are gathered into contiguous rows above a size; both paths give one result."""
    tall = _hf_layouts(torch.bfloat16, heads=2, d=1200, dk=64)["o_proj"]
    if low_precision_gemm.gram_low_precision(tall) is None:
        pytest.skip("no MKL mixed-precision gemm on this machine")
    gathered = low_precision_gemm.gram_low_precision(tall)
    monkeypatch.setattr(low_precision_gemm, "_GATHER_MIN", 10**12)
    direct = low_precision_gemm.gram_low_precision(tall)
    assert torch.allclose(gathered, direct, rtol=1e-5, atol=1e-4)


def test_route_declines_what_it_cannot_read():
    """float32 input, layouts without a unit stride and empty batches fall back to the caller's route."""
    assert low_precision_gemm.gram_low_precision(torch.randn(2, 30, 4)) is None
    odd = torch.randn(2, 30, 8).to(torch.bfloat16)[:, ::2, ::2]             # no unit stride
    assert low_precision_gemm.gram_low_precision(odd) is None
    assert low_precision_gemm.gram_low_precision(torch.empty(0, 30, 4, dtype=torch.bfloat16)) is None
    # the caller still answers for such input, through the cast route
    g = gram_float64(odd, accumulate=torch.float32)
    assert torch.allclose(g, odd.double().transpose(1, 2) @ odd.double(), rtol=1e-5, atol=1e-5)


def test_switch_turns_the_route_off(monkeypatch):
    monkeypatch.setenv("IDINSPECT_NO_MKL_GEMM", "1")
    low_precision_gemm._routine.cache_clear()
    try:
        assert low_precision_gemm.gram_low_precision(_hf_layouts(torch.bfloat16)["q_proj"]) is None
    finally:
        monkeypatch.delenv("IDINSPECT_NO_MKL_GEMM")
        low_precision_gemm._routine.cache_clear()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 7, 32, 33, 64, 100, 128, 257])
def test_blocked_cholesky_is_lapacks(k, dtype):
    """R^T R = A to the factorisation's backward error, R upper triangular with a positive
    diagonal, and equal to LAPACK's factor to rounding (cond(A) ~ 1e4)."""
    gen = torch.Generator().manual_seed(k)
    W = torch.randn(5, 2 * k + 3, k, generator=gen, dtype=torch.float64)
    W[..., -1] *= 1e-2                                           # cond(W) ~ 1e2, cond(A) ~ 1e4
    A = (W.transpose(1, 2) @ W).to(dtype)
    R, info = cholesky_upper(A)
    ref, ref_info = torch.linalg.cholesky_ex(A, upper=True)
    assert (info == 0).all() and (ref_info == 0).all()
    assert torch.equal(R, R.triu()) and (R.diagonal(dim1=-2, dim2=-1) > 0).all()
    eps = torch.finfo(dtype).eps
    norm = A.double().flatten(1).norm(dim=1)
    back = (R.double().transpose(1, 2) @ R.double() - A.double()).flatten(1).norm(dim=1)
    assert (back <= 4 * k * eps * norm).all()
    assert ((R.double() - ref.double()).flatten(1).norm(dim=1) <= 1e4 * k * eps * ref.double().flatten(1).norm(dim=1)).all()


@pytest.mark.parametrize("where", [3, 90])
def test_blocked_cholesky_reports_an_indefinite_matrix(where):
    """A matrix that is not positive definite in either half gets info > 0; the others info 0."""
    k = 128
    A = torch.eye(k, dtype=torch.float64).repeat(3, 1, 1)
    A[1, where, where] = -1.0
    _, info = cholesky_upper(A)
    assert info.tolist()[0] == 0 and info.tolist()[2] == 0 and info.tolist()[1] > 0
    _, ref = torch.linalg.cholesky_ex(A, upper=True)
    assert (info > 0).tolist() == (ref > 0).tolist()



@pytest.mark.parametrize("layout", ["q_proj", "o_proj", "contiguous"])
@pytest.mark.parametrize("d", [300, 1200])                      # 1200 x 64: o_proj heads are gathered first
def test_pair_products_are_the_float32_products(layout, d):
    """X_A^T X_A, X_A^T X_B, X_B^T X_B within the float32 sum's bound of the float64 products."""
    xa = _hf_layouts(torch.bfloat16, heads=2, d=d, dk=64)[layout]
    xb = _hf_layouts(torch.bfloat16, heads=2, d=d, dk=64, seed=2)[layout]
    got = low_precision_gemm.pair_products_low_precision(xa, xb)
    if got is None:
        pytest.skip("no MKL mixed-precision gemm on this machine")
    for (x, y), g in zip(((xa, xa), (xa, xb), (xb, xb)), got):
        want = x.double().transpose(1, 2) @ y.double()
        bound = d * precision.UNIT_ROUNDOFF_32 * x.double().norm(dim=1)[:, :, None] * y.double().norm(dim=1)[:, None, :]
        assert ((g.double() - want).abs() <= bound).all()
