"""Gram matrices of bfloat16/float16 weights on the CPU's matrix units, accumulated in float32.

A product of two bfloat16 (8-bit significand) or float16 (11-bit) numbers is exact in float32, so
W^T W of such a W accumulated in float32 is the float32 Gram matrix of :mod:`.precision` whatever
unit computes it. torch's own bfloat16 matmul rounds its result to bfloat16, which would throw
away what the float32 accumulation kept; MKL's ``cblas_gemm_bf16bf16f32`` and
``cblas_gemm_f16f16f32`` return float32. torch's x86 builds link MKL and export both, and on CPUs
with AMX (Sapphire Rapids and later) or AVX512-BF16 they run several times faster than casting to
float32 and multiplying there (32 Llama-8B query heads, one core: 6.5 ms against 62 ms).

:func:`gram_low_precision` returns ``None`` where this route does not apply (another dtype, a
layout MKL cannot read, a torch without the symbol, a CPU without bf16/fp16 matrix instructions,
or a failed self-test on first use); the caller then takes the plain float32 route.
Set ``IDINSPECT_NO_MKL_GEMM=1`` to switch it off.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

import torch

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112

#: Heads of at least this many entries in a strided row-major layout are gathered before the gemm.
_GATHER_MIN = 2**16


def _cpu_has(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # noqa: BLE001 - a private probe that changed its signature: no fast route
        return False


@functools.cache
def _routine(dtype: torch.dtype) -> Callable | None:
    """MKL's mixed-precision gemm for ``dtype`` from torch's own library, or None."""
    if os.environ.get("IDINSPECT_NO_MKL_GEMM"):
        return None
    if dtype == torch.bfloat16 and (_cpu_has("_is_amx_tile_supported") or _cpu_has("_is_avx512_bf16_supported")):
        name = "cblas_gemm_bf16bf16f32"
    elif dtype == torch.float16 and _cpu_has("_is_amx_fp16_supported"):
        name = "cblas_gemm_f16f16f32"
    else:
        return None
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        fn = getattr(ctypes.CDLL(path), name)
    except (OSError, AttributeError):
        return None
    i, p = ctypes.c_int, ctypes.c_void_p           # LP64 interface (the ILP64 one ends in _64)
    fn.argtypes = [i, i, i, i, i, i, ctypes.c_float, p, i, p, i, ctypes.c_float, p, i]
    fn.restype = None
    return fn if _self_test(fn, dtype) else None


def _layout(t: torch.Tensor) -> tuple[bool, int]:
    """(row-major, leading dimension) of each [m, k] matrix of a batch [n, m, k] that has a unit
    stride in one of its last two dimensions (checked by :func:`_readable`)."""
    m, k = t.shape[-2:]
    if t.stride(-1) == 1 and (m == 1 or t.stride(-2) >= k):
        return True, t.stride(-2)
    return False, t.stride(-1)


def _products(fn: Callable, jobs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
    """out[h] = x[h]^T y[h] (float32 [n, k, l]) for every (x [n, m, k], y [n, m, l], out) of ``jobs``
    (same n), member by member: jobs that share an operand find that member still in cache. A
    row-major operand is read as it is; a column-major one is the row-major [k, m] of its transpose."""
    calls = []
    for x, y, out in jobs:
        m, k = x.shape[-2:]
        l = y.shape[-1]
        (x_rows, ldx), (y_rows, ldy) = _layout(x), _layout(y)
        trans_x, trans_y = (_TRANS if x_rows else _NO_TRANS), (_NO_TRANS if y_rows else _TRANS)
        (px, sx), (py, sy), (po, so) = (_member_pointers(t) for t in (x, y, out))
        calls.append((trans_x, trans_y, k, l, m, px, sx, ldx, py, sy, ldy, po, so))
    for h in range(jobs[0][0].shape[0]):
        for trans_x, trans_y, k, l, m, px, sx, ldx, py, sy, ldy, po, so in calls:
            fn(_ROW_MAJOR, trans_x, trans_y, k, l, m, 1.0, px + h * sx, ldx, py + h * sy, ldy, 0.0, po + h * so, l)


def _member_pointers(t: torch.Tensor) -> tuple[int, int]:
    """(address of member 0, bytes from one member to the next) of a batch [n, ...]: member h starts
    at the first plus h times the second (no per-member tensor views in the loops)."""
    return t.data_ptr(), t.stride(0) * t.element_size()


def _gathered(x: torch.Tensor) -> bool:
    """Whether each member is row-major with its rows of k entries far apart (W_O^hT inside o_proj's
    [d, H*d_k]): MKL reads those slowly, so they are first gathered into contiguous rows (Llama-70B
    W_O, one core: 65 -> 46 ms)."""
    row_major, ld = _layout(x)
    n, m, k = x.shape
    return row_major and ld != k and m * k >= _GATHER_MIN


def _member_products(fn: Callable, xs: list[torch.Tensor], jobs: list[tuple[int, int, torch.Tensor]]) -> None:
    """out[h] = xs[i][h]^T xs[j][h] (float32) for every (i, j, out) of ``jobs``; members that
    :func:`_gathered` says so are copied into contiguous rows once for all jobs."""
    if not _gathered(xs[0]):
        _products(fn, [(xs[i], xs[j], out) for i, j, out in jobs])
        return
    n, m, k = xs[0].shape
    rows = [torch.empty((m, k), dtype=x.dtype) for x in xs]
    row_ptrs = [r.data_ptr() for r in rows]
    outs = [(i, j, *_member_pointers(out)) for i, j, out in jobs]
    for h, members in enumerate(zip(*(x.unbind(0) for x in xs))):
        for r, member in zip(rows, members):
            r.copy_(member)
        for i, j, po, so in outs:
            fn(_ROW_MAJOR, _TRANS, _NO_TRANS, k, k, m, 1.0, row_ptrs[i], k, row_ptrs[j], k, 0.0, po + h * so, k)


def _readable(t: torch.Tensor) -> bool:
    if t.dim() != 3 or t.device.type != "cpu" or min(t.shape) == 0:
        return False
    m, k = t.shape[-2:]
    rows = t.stride(-1) == 1 and (m == 1 or t.stride(-2) >= k)
    columns = t.stride(-2) == 1 and (k == 1 or t.stride(-1) >= m)
    return (rows or columns) and _layout(t)[1] < 2**31


def _routine_for(*xs: torch.Tensor) -> Callable | None:
    """The MKL routine for batches of one bfloat16/float16 dtype that it can read, or None."""
    dtype = xs[0].dtype
    if dtype not in (torch.bfloat16, torch.float16) or any(x.dtype != dtype or not _readable(x) for x in xs):
        return None
    return _routine(dtype)


def available(dtype: torch.dtype) -> bool:
    """Whether the MKL route runs for ``dtype`` on this machine (CPU, torch build, self-test)."""
    return dtype in (torch.bfloat16, torch.float16) and _routine(dtype) is not None


def _self_test(fn: Callable, dtype: torch.dtype) -> bool:
    """Every pairing of layouts against float64 on a small random batch, before the routine is trusted."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 37, 5, generator=gen).to(dtype)
    y = torch.randn(2, 37, 3, generator=gen).to(dtype)
    want = x.double().transpose(1, 2) @ y.double()
    column_major = lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)  # noqa: E731
    for a in (x, column_major(x)):
        for b in (y, column_major(y)):
            got = torch.empty(2, 5, 3)
            _products(fn, [(a, b, got)])
            if not torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5):
                return False
    return True


def gram_low_precision(tall: torch.Tensor) -> torch.Tensor | None:
    """W^T W [n, k, k] in float32 for a bfloat16/float16 CPU batch W [n, m, k], or None where the
    MKL route does not apply (see the module doc)."""
    fn = _routine_for(tall)
    if fn is None:
        return None
    out = torch.empty((tall.shape[0], tall.shape[2], tall.shape[2]), dtype=torch.float32)
    _member_products(fn, [tall], [(0, 0, out)])
    return out


def products_low_precision(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """X_i^T Y_i [n, k, l] in float32 for bfloat16/float16 CPU batches X [n, m, k], Y [n, m, l] of one
    dtype (exact products, float32 sums), or None where the MKL route does not apply."""
    fn = _routine_for(x, y)
    if fn is None:
        return None
    if x.shape[:2] != y.shape[:2]:
        raise ValueError(f"products of batches {tuple(x.shape)} and {tuple(y.shape)}: leading dims differ")
    out = torch.empty((x.shape[0], x.shape[2], y.shape[2]), dtype=torch.float32)
    _products(fn, [(x, y, out)])
    return out


def pair_products_low_precision(xa: torch.Tensor, xb: torch.Tensor
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(X_A^T X_A, X_A^T X_B, X_B^T X_B), each [n, k, k] float32, for bfloat16/float16 CPU batches
    X_A, X_B [n, m, k] of one dtype, or None where the MKL route does not apply. Members
    whose rows lie far apart (o_proj's heads) are gathered once for all three products."""
    fn = _routine_for(xa, xb)
    if fn is None or xa.shape != xb.shape:
        return None
    n, _, k = xa.shape
    GA, C, GB = (torch.empty((n, k, k), dtype=torch.float32) for _ in range(3))
    _member_products(fn, [xa, xb], [(0, 0, GA), (0, 1, C), (1, 1, GB)])
    return GA, C, GB
