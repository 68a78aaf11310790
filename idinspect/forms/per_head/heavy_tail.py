"""Heavy-tail diagnostics of the gauge-invariant circuits (issue 37): the figures WeightWatcher
reports per weight matrix, computed on each head's W_QK, W_OV and on the per-layer sums.

The objects (all d x d, never formed; only their singular values s_1 >= s_2 >= ... are used):

    W_QK^h = W_Q^h W_K^g(h)T,   W_OV^h = W_V^g(h) W_O^h                      (per head, rank <= d_k / d_v)
    W_QK   = sum_h W_QK^h = sum_g (sum_{h in g} W_Q^h) W_K^gT = X_QK Y_QK^T   (X, Y: d x G d_k)
    W_OV   = sum_h W_OV^h = sum_g W_V^g (sum_{h in g} W_O^h)  = X_OV Y_OV^T   (X, Y: d x G d_v)

Every gauge move acts on the right of W_Q^h, W_K^g by A_g, A_g^-T (GL(d_k), or with RoPE its
commutant, a subgroup) and on W_V^g, W_O^h by B_g, B_g^-1, the same for every head of group g, so
all four products, and every figure below, are unchanged by it. The singular values of X Y^T are
those of the small core R_X R_Y^T (X = Q_X R_X, thin QR), as in :mod:`.spectra`.

Figures of one circuit with positive singular values above the rank cut (:data:`spectra.RANK_RULE`)
and eigenvalues lambda_i = s_i^2 (the ESD of W^T W, WeightWatcher's convention; alpha does not
depend on the scale):

- ``alpha``: power-law exponent of the ESD tail, p(lambda) ~ lambda^-alpha for lambda >= x_min, by
  the continuous maximum-likelihood estimate of Clauset, Shalizi and Newman (2009),
  alpha = 1 + n_tail / sum_{lambda_i >= x_min} ln(lambda_i / x_min); x_min is the eigenvalue,
  among those leaving at least :data:`MIN_TAIL` eigenvalues in the tail, that minimises the
  Kolmogorov-Smirnov distance D = sup |S(x) - P(x)| between the tail's empirical CDF S and the
  fitted CDF P(x) = 1 - (x / x_min)^(1 - alpha) (the `powerlaw` package's choice with
  ``xmax=None``, restricted to tails of at least MIN_TAIL points). None with fewer than
  :data:`MIN_EVALS` eigenvalues.
- ``stable_rank`` = ||W||_F^2 / ||W||_2^2 = sum_i s_i^2 / s_1^2.
- ``spectral_norm`` = s_1.
- ``mp_spikes``: singular values above the bulk edge of the randomised circuit. Permuting the
  entries of an N x M matrix keeps its mean square sigma^2 = ||W||_F^2 / (N M); a matrix of i.i.d.
  entries of that variance has its singular values below sigma (sqrt(N) + sqrt(M)) (the
  Marchenko-Pastur edge; Tracy-Widom fluctuations around it are O(N^-2/3) relative).
- ``traps`` (per-layer sums only): WeightWatcher's correlation trap is an eigenvalue of the
  *randomised* (entry-permuted) matrix's ESD beyond its Marchenko-Pastur edge. Such an outlier comes
  from a single large entry a: a rank-one term a e_i e_j^T on a noise matrix of variance sigma^2
  separates from the bulk exactly when |a| > sigma (N M)^(1/4) (Benaych-Georges and Nadakuditi
  2012). So the analogue computed here, with no random permutation, is the number of entries of the
  circuit (gauge-invariant numbers: W_QK[i, j] = x_i^T W_Q W_K^T x_j for basis vectors) above that
  threshold, with ``trap_ratio`` = max |a| / (sigma (N M)^(1/4)). The entries come a row block at a
  time (:data:`ENTRY_BLOCK` rows), O(d^2 G d_k) per layer, never a d x d matrix.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ...layer.attention_layer import AttentionLayer
from .spectra import HeadSpectra, rank_rtol

#: Fewest eigenvalues (above the rank cut) for an exponent; fewer give None.
MIN_EVALS = 10
#: Fewest eigenvalues in the tail of any x_min candidate.
MIN_TAIL = 5
#: WeightWatcher's usual range of the exponent; outside it a layer is marked in the reports.
ALPHA_RANGE = (2.0, 6.0)
#: Rows of a circuit's entries computed at a time for the trap count.
ENTRY_BLOCK = 256
#: Columns of the factors X, Y taken at a time when a per-layer sum is formed (:func:`circuit_product`).
PRODUCT_COLUMNS = 256
#: Candidate x_min x eigenvalue cells evaluated at a time in the KS search.
KS_CELLS = 2**16

XMIN_RULE = (f"x_min: the eigenvalue minimising the KS distance over candidates leaving >= {MIN_TAIL} "
             f"eigenvalues in the tail; alpha = 1 + n / sum ln(x_i / x_min) (continuous MLE); "
             f"None with < {MIN_EVALS} eigenvalues")


@dataclass(frozen=True)
class PowerLawFit:
    """alpha, x_min, the tail's size and its KS distance D."""

    alpha: float
    xmin: float
    n_tail: int
    ks: float


def power_law_fits(evals: torch.Tensor, valid: torch.Tensor) -> list[PowerLawFit | None]:
    """Continuous power-law MLE with KS-chosen x_min for each row of ``evals`` [B, n] (float64,
    any order); ``valid`` [B, n] marks the eigenvalues to use (positive, above the rank cut).
    Returns one fit per row, None where fewer than :data:`MIN_EVALS` are valid."""
    B, n = evals.shape
    x = torch.where(valid, evals, torch.zeros((), dtype=evals.dtype))
    x, _ = torch.sort(x, dim=1)                          # invalid (0) first, then ascending
    z = n - valid.sum(dim=1)                             # [B] first valid index
    logx = torch.where(x > 0, x, torch.ones((), dtype=x.dtype)).log()
    suffix = logx.flip(1).cumsum(1).flip(1)              # [B, n] sum_{i >= k} ln x_i
    k = torch.arange(n)
    m = (n - k).to(x.dtype)                              # tail size of candidate k
    alpha = 1 + m / (suffix - m * logx)                  # [B, n]
    cand = (k[None] >= z[:, None]) & ((n - k)[None] >= MIN_TAIL) & torch.isfinite(alpha) & (alpha > 1)
    D = torch.full((B, n), math.inf, dtype=x.dtype)
    first = int(z.min()) if B else 0
    last = n - MIN_TAIL + 1                              # candidates first .. last - 1
    per = max(1, KS_CELLS // max(1, B * n))
    for start in range(first, max(first, last), per):
        kk = k[start:min(start + per, last)]                                # candidates
        cols = slice(start, n)                                              # tails start at >= start
        j = (k[cols][None, :] - kk[:, None]).to(x.dtype)                    # [c, w] rank in tail - 1
        mm = m[kk][:, None]
        # P = 1 - (x / x_min)^(1 - alpha) = -expm1((1 - alpha) ln(x / x_min)), the fitted CDF
        P = (logx[:, None, cols] - logx[:, kk, None]).mul_(1 - alpha[:, kk, None]).expm1_().neg_()
        gap = torch.maximum(P - j / mm, (j + 1) / mm - P)                  # sup of |S - P| on both steps
        D[:, kk] = gap.masked_fill_((j < 0)[None], 0).amax(dim=2)
    D = torch.where(cand, D, torch.full((), math.inf, dtype=x.dtype))
    best = D.argmin(dim=1)
    out: list[PowerLawFit | None] = []
    for b in range(B):
        i = int(best[b])
        if int(valid[b].sum()) < MIN_EVALS or not math.isfinite(float(D[b, i])):
            out.append(None)
        else:
            out.append(PowerLawFit(float(alpha[b, i]), float(x[b, i]), int(n - i), float(D[b, i])))
    return out


def circuit_figures(values: torch.Tensor, rtol: float, shape: tuple[int, int],
                    ok: torch.Tensor | None = None) -> list[dict | None]:
    """Per row of singular values ``values`` [B, k] (float64) of an N x M circuit: the dict of
    alpha, x_min, n_tail, ks, stable_rank, spectral_norm, mp_spikes (see module docstring); None
    where ``ok`` is False or the values are not finite.

    Everything but x_min and the spectral norm is scale-free, so it is computed on s_i / s_1: weights
    near the float64 range's ends (1e200, subnormals) give the same figures as moderate ones, and
    x_min (in units of s_1^2) is None where its own value leaves the range."""
    values = values.to(torch.float64)
    N, M = shape
    smax = values.amax(dim=1, keepdim=True)
    unit = values / torch.where(smax > 0, smax, torch.ones((), dtype=values.dtype))
    evals = unit.square()
    valid = (unit > rtol) & (evals > 0)
    fits = power_law_fits(evals, valid)
    fro2 = evals.sum(dim=1)                              # ||W||_F^2 / s_1^2
    edge = (fro2 / (N * M)).sqrt() * (math.sqrt(N) + math.sqrt(M))
    spikes = (unit > edge[:, None]).sum(dim=1)
    good = torch.isfinite(values).all(dim=1)
    if ok is not None:
        good &= ok
    out: list[dict | None] = []
    for b, fit in enumerate(fits):
        s1 = float(smax[b, 0])
        if not bool(good[b]):
            out.append(None)
            continue
        row = {"alpha": None, "xmin": None, "n_tail": None, "ks": None} if fit is None else asdict(fit)
        if fit is not None:
            xmin = fit.xmin * s1 * s1
            row["xmin"] = xmin if math.isfinite(xmin) and xmin > 0 else None
        row.update(stable_rank=float(fro2[b]) if s1 > 0 else None, spectral_norm=s1,
                   mp_spikes=int(spikes[b]), n_evals=int(valid[b].sum()))
        out.append(row)
    return out


def circuit_factors(layer: AttentionLayer, form: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, Y), float64 [d, G d_k] for ``form`` "qk" / [d, G d_v] for "ov", with the per-layer sum
    W_QK = X Y^T (X = [sum_{h in g} W_Q^h]_g, Y = [W_K^g]_g) / W_OV = X Y^T (X = [W_V^g]_g,
    Y = [sum_{h in g} W_O^hT]_g). Each factor is written once into its own float64 buffer (no
    float64 copy of the whole layer: at GPT-2 small's width that copy was 40 MB per layer in flight)."""
    G, r = layer.n_kv_heads, layer.group_size
    if form == "qk":
        return _group_sum_flat(layer.W_Q, G, r), _group_sum_flat(layer.W_K, G, 1)
    return _group_sum_flat(layer.W_V, G, 1), _group_sum_flat(layer.W_O.transpose(-1, -2), G, r)


def _group_sum_flat(W: torch.Tensor, G: int, r: int) -> torch.Tensor:
    """[G r, d, k] -> float64 [d, G k]: column block g is sum_{j < r} W[g r + j]."""
    _, d, k = W.shape
    out = torch.empty(d, G, k, dtype=torch.float64, device=W.device)
    torch.sum(W.reshape(G, r, d, k).permute(2, 0, 1, 3), dim=2, dtype=torch.float64, out=out)
    return out.view(d, G * k)


def circuit_product(layer: AttentionLayer, form: str) -> tuple[torch.Tensor, float] | None:
    """(W 2^-(e_x + e_y), 2^(e_x + e_y)): the per-layer sum W = X Y^T of ``form`` (:func:`circuit_factors`),
    float64 [d, d], accumulated a few kv groups at a time (:data:`PRODUCT_COLUMNS` columns of X and Y),
    W = sum_g X_g Y_g^T, from the stored weights: X and Y themselves are never formed (for
    m = G d_k >= d they are as large as W). 2^e_x, 2^e_y: the powers of two at or above
    max |W_Q| and max |W_K| (or |W_V|, |W_O|); dividing by them is exact and keeps the sums far from
    overflow. None where a weight is not finite."""
    G, r = layer.n_kv_heads, layer.group_size
    if form == "qk":
        A, ra, B, rb = layer.W_Q, r, layer.W_K, 1                          # X_g = sum_{h in g} W_Q^h, Y_g = W_K^g
    else:
        A, ra, B, rb = layer.W_V, 1, layer.W_O.transpose(-1, -2), r        # X_g = W_V^g, Y_g = sum_{h in g} W_O^hT
    ex, ey = _max_exponent(A), _max_exponent(B)
    if ex is None or ey is None:
        return None
    d, k = A.shape[1], A.shape[2]
    W = torch.zeros(d, B.shape[1], dtype=torch.float64, device=A.device)
    step = max(1, PRODUCT_COLUMNS // k)
    for g0 in range(0, G, step):
        g1 = min(G, g0 + step)
        W.addmm_(_times_pow2(_group_sum_flat(A[g0 * ra:g1 * ra], g1 - g0, ra), -ex),
                 _times_pow2(_group_sum_flat(B[g0 * rb:g1 * rb], g1 - g0, rb), -ey).T)
    return W, math.ldexp(1.0, ex + ey)


def _max_exponent(t: torch.Tensor) -> int | None:
    """e with 2^(e-1) <= max |t| < 2^e (0 for an empty or all-zero tensor; None where t is not
    finite: the extremes carry a NaN or an infinity), read without a copy of |t|."""
    if not t.numel():
        return 0
    lo, hi = torch.aminmax(t)
    top = max(-float(lo), float(hi))
    if not math.isfinite(top) or math.isnan(float(lo)) or math.isnan(float(hi)):
        return None
    return math.frexp(top)[1] if top > 0 else 0


def _times_pow2(t: torch.Tensor, e: int) -> torch.Tensor:
    """t 2^e in place, exactly (in two factors, each a normal float64: 2^e alone leaves the range
    for very small or very large t)."""
    half = e // 2
    return t.mul_(math.ldexp(1.0, half)).mul_(math.ldexp(1.0, e - half))


def product_singular_values(X: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(singular values (descending) of X Y^T for X, Y [d, m] float64, the product X Y^T itself where it
    was formed, else None): from the core R_X R_Y^T when m < d (R of a thin Householder QR, O(d m^2));
    when m >= d the product is no larger than the core (d x d <= m x m) and is taken directly (two
    QRs saved; GPT-2 and BERT have m = d), and the trap count reads its entries."""
    d, m = X.shape
    if m >= d:
        product = X @ Y.T
        return dense_singular_values(product), product
    core = torch.linalg.qr(X, mode="r").R @ torch.linalg.qr(Y, mode="r").R.T
    return dense_singular_values(core), None


def dense_singular_values(A: torch.Tensor) -> torch.Tensor:
    """Singular values (descending, float64) of one square matrix, by LAPACK's divide and conquer
    through NumPy: torch 2.13's CPU ``svdvals`` took 18 s for a 768 x 768 float64 matrix on the
    2-core test machine, NumPy's 0.4 s (both exact to float64 rounding)."""
    if A.device.type != "cpu":
        return torch.linalg.svdvals(A).cpu()
    return torch.from_numpy(np.linalg.svd(A.numpy(), compute_uv=False))


def trap_count(X: torch.Tensor | None, Y: torch.Tensor | None, fro2: float,
               product: torch.Tensor | None = None) -> tuple[int, float]:
    """(entries of X Y^T above sigma (N M)^(1/4), max |entry| / that threshold) with
    sigma^2 = ``fro2`` / (N M) (``fro2`` = ||X Y^T||_F^2 = sum s_i^2), computed a row block at a time
    (or read from ``product`` = X Y^T where it was formed already; X and Y may then be None)."""
    N, M = product.shape if product is not None else (X.shape[0], Y.shape[0])
    thr = math.sqrt(fro2 / (N * M)) * (N * M) ** 0.25
    if not thr > 0:
        return 0, 0.0
    count, big = 0, 0.0
    for start in range(0, N, ENTRY_BLOCK):
        rows = product[start:start + ENTRY_BLOCK] if product is not None else X[start:start + ENTRY_BLOCK] @ Y.T
        block = rows.abs()
        count += int((block > thr).sum())
        big = max(big, float(block.max()))
    return count, big / thr


def heavy_tail(layer: AttentionLayer, s: HeadSpectra) -> dict:
    """The ``heavy_tail`` object of a layer: per head (from the spectra already computed) and per
    layer sum (its own small cores), for "qk" and "ov"."""
    d = layer.W_Q.shape[1]
    out: dict = {"xmin_rule": XMIN_RULE, "alpha_range": list(ALPHA_RANGE)}
    for form, values, ok in (("qk", s.qk, s.qk_ok), ("ov", s.ov, s.ov_ok)):
        out[form] = {"heads": circuit_figures(values, s.rtol, (d, d), ok), "layer": layer_sum_figures(layer, form)}
    return out


def layer_sum_figures(layer: AttentionLayer, form: str) -> dict | None:
    """The figures of the per-layer sum W_QK or W_OV (``form`` "qk" / "ov") with its trap count; None
    where its weights are not finite. For m = G d_k >= d the d x d sum is formed a few groups at a
    time (:func:`circuit_product`); below, its singular values come from the small cores of its factors."""
    d, m = layer.W_Q.shape[1], layer.n_kv_heads * (layer.W_K.shape[-1] if form == "qk" else layer.W_V.shape[-1])
    X = Y = product = None
    if m >= d:
        formed = circuit_product(layer, form)
        if formed is None:
            return None
        product, scale = formed
        sv = dense_singular_values(product)
    else:
        X, Y = circuit_factors(layer, form)
        (X, cx), (Y, cy) = _unit_scale(X), _unit_scale(Y)     # exact: no overflow in X Y^T
        if X is None or Y is None:
            return None
        sv, scale = product_singular_values(X, Y)[0], cx * cy
    row = circuit_figures(sv[None], rank_rtol(d, m), (d, d))[0]
    if row is not None:
        row["traps"], row["trap_ratio"] = trap_count(X, Y, float(sv.square().sum()), product)
        _rescale(row, scale)
    return row


def _unit_scale(X: torch.Tensor) -> tuple[torch.Tensor | None, float]:
    """(X 2^-e, 2^e) with 2^e the power of two at or above max |X|: an exact rescaling, in place
    (X is this module's own buffer); (None, nan) where X is not finite."""
    e = _max_exponent(X)
    if e is None:
        return None, math.nan
    return _times_pow2(X, -e), math.ldexp(1.0, e)


def _rescale(row: dict, c: float) -> None:
    """Put the scale ``c`` of the circuit back into its scale-carrying figures (None out of range)."""
    for key, power in (("spectral_norm", 1), ("xmin", 2)):
        if row.get(key) is not None:
            v = row[key] * c if power == 1 else row[key] * c * c
            row[key] = v if math.isfinite(v) and v > 0 else None
