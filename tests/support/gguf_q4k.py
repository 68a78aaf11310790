"""A reference Q4_K quantiser (the ``gguf`` package decodes Q4_K but cannot encode it).

Built from ggml's documented ``block_q4_K`` layout (144 bytes per 256 values), which
``gguf.quants.Q4_K.dequantize_blocks`` decodes:

    d     fp16      super-block scale of the sub-block scales
    dmin  fp16      super-block scale of the sub-block minima
    scales[12]      8 six-bit scales sc_j and 8 six-bit minima m_j, j = 0..7 (sub-blocks of 32):
                    bytes 0-3:  sc_j (low 6 bits) | top 2 bits of sc_{j+4} (bits 6-7)
                    bytes 4-7:  m_j  (low 6 bits) | top 2 bits of m_{j+4}
                    bytes 8-11: low 4 bits of sc_{j+4} | low 4 bits of m_{j+4} << 4
    qs[128]         4-bit q: byte 32c + l holds q of sub-block 2c (low nibble) and 2c+1 (high), value l

and value = d sc_j q - dmin m_j. Unlike llama.cpp's ``make_qkx2_quants`` (an iterative search for
the best fit) this quantiser picks the covering scales directly, so every value is within half a
step of its sub-block, ``|x - x'| <= d sc_j / 2``: :func:`step` returns that step per value, and
the tests check the bound on what ``gguf.quants.dequantize`` decodes.
"""

from __future__ import annotations

import numpy as np

QK_K = 256


def _fp16_at_least(x: np.ndarray) -> np.ndarray:
    """The smallest fp16 values >= x (x >= 0)."""
    h = x.astype(np.float16)
    low = h.astype(np.float32) < x
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    return h


def _fields(x: np.ndarray):
    """(d, dmin, sc, m, q) of the blocks of x, shaped [n, 256]."""
    sub = x.reshape(-1, 8, 32).astype(np.float64)
    lo = np.minimum(sub.min(axis=2), 0.0)                                   # minima <= 0, stored as m >= 0
    dmin = _fp16_at_least((-lo).max(axis=1) / 63)
    dmin64 = dmin.astype(np.float64)[:, None]
    m = np.where(dmin64 > 0, np.ceil(-lo / np.where(dmin64 > 0, dmin64, 1)), 0).clip(0, 63)
    offset = dmin64 * m                                                     # >= -lo: x + offset >= 0
    span = sub.max(axis=2) + offset                                         # x + offset in [0, span]
    d = _fp16_at_least(span.max(axis=1) / (15 * 63))
    d64 = d.astype(np.float64)[:, None]
    sc = np.where(d64 > 0, np.ceil(span / (15 * np.where(d64 > 0, d64, 1))), 0).clip(0, 63)
    step = (d64 * sc)[:, :, None]
    q = np.where(step > 0, np.rint((sub + offset[:, :, None]) / np.where(step > 0, step, 1)), 0).clip(0, 15)
    return d, dmin, sc.astype(np.uint8), m.astype(np.uint8), q.astype(np.uint8)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """``x`` [..., n] (n a multiple of 256) as Q4_K bytes [..., n / 256 * 144] (uint8)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % QK_K:
        raise ValueError(f"Q4_K rows must be a multiple of {QK_K} wide, got {x.shape[-1]}")
    d, dmin, sc, m, q = _fields(x.reshape(-1, QK_K))
    n = d.shape[0]
    scales = np.empty((n, 12), dtype=np.uint8)
    scales[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 0x0F) | ((m[:, 4:] & 0x0F) << 4)
    pairs = q.reshape(n, 4, 2, 32)
    qs = (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(n, 128)
    blocks = np.concatenate([d.reshape(n, 1).view(np.uint8), dmin.reshape(n, 1).view(np.uint8), scales, qs], axis=1)
    return blocks.reshape(*x.shape[:-1], x.shape[-1] // QK_K * 144)


def step(x: np.ndarray) -> np.ndarray:
    """The quantisation step d sc_j of each value of ``x`` (same shape): Q4_K's error is at most half of it."""
    x = np.asarray(x, dtype=np.float32)
    d, _, sc, _, _ = _fields(x.reshape(-1, QK_K))
    s = d.astype(np.float64)[:, None] * sc.astype(np.float64)
    return np.repeat(s, 32, axis=1).reshape(x.shape)
