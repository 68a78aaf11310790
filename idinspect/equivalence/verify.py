"""``verify``: do two checkpoints compute the same function? Exit 0 yes, 1 no, 2 error.

Checks, each with a dtype-dependent tolerance that is reported:
- ``config``: the configuration keys the model's computation reads agree (:mod:`.config_keys`;
  other differences are notes, failures with ``strict_config``);
- ``tensors``: the same tensor names; every non-attention tensor equal (bit-exact in the same
  dtype, within one rounding of the coarser dtype otherwise);
- ``invariants``: layer by layer, every gauge invariant (each head's W_QK, each rotary plane's
  Q_p K_p^T and Q_p J K_p^T, each head's W_OV, the effective output bias; the sink logits where the
  layers have them; under a q/k norm W_Q, W_K themselves and, in place of the raw norm gains, the
  products of query and key gains on each trade orbit, which the gain trade leaves alone, so a
  gain-balanced export verifies against its original and a changed gain does not) through thin-QR cores;
  cheap at any size (:func:`~idinspect.gauge.invariant_errors`);
- ``functional``: both loaded by stock transformers on seeded random token ids: largest absolute
  and relative difference of the logits (last hidden states for encoders);
- ``decode``: causal LMs only, identical greedy continuations.

Multi-head latent attention (DeepSeek-V2/V3) has no per-head invariants: ``invariants`` is skipped
and the function-level checks decide; float32/float64 checkpoints only, with the functional check on
(anything else is refused by name, exit 2).

Tolerances follow B's stored dtype. float64: invariants 1e-10, outputs 1e-6 (transformers
computes some norms in float32); float32: 1e-6 and 1e-6. For these two, an invariant's tolerance is raised to
the rounding bound of its own head's (or rotary plane's) stored factors where that is larger:
``CONDITION_FACTOR (eps_A amp_A + eps_B amp_B)`` with amp = ||X||_F ||Y||_F / ||X Y||_F of that
head's factors (:func:`factor_amplification`), so a checkpoint moved along the gauge orbit into lopsided
factors (a value factor of condition number 1,650) is judged by what its dtype can store, while a
well-conditioned head beside it keeps the tight tolerance; the bound used is stated in the output. bfloat16/float16: judged against the
*rounding baseline*: A's attention moved by an exact scalar gauge (W_Q c, W_K / c, W_V c, W_O / c,
c = 8/7, so every entry needs rounding) and rounded to B's dtype, every other tensor rounded too.
The export passes when its error is at most ``BASELINE_FACTOR`` times the baseline's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from ..layer.attention_layer import AttentionLayer
from ..gauge import INVARIANTS, InvariantError, invariant_error_tensors, invariant_errors
from ..gauge.invariants import describe_largest, largest_over_layers, worst_entry
from ..gauge.factors import augment
from ..gauge.qk_gain_trade import cast_norm, gain_product_amplification, trade, tradable
from ..layer.structure import noop_key_bias_columns, unrotated_columns
from ..sources.model import Model, load
from . import functional as fn
from .config_keys import full_settings, split_differences

FIXED_TOLERANCES = {torch.float64: {"invariants": 1e-10, "functional": 1e-6},
                    torch.float32: {"invariants": 1e-6, "functional": 1e-6}}
BASELINE_FACTOR = 4.0
BASELINE_SCALE = 8.0 / 7.0


@dataclass
class Check:
    """One comparison: ``passed`` None means skipped (``detail`` says why)."""

    name: str
    passed: bool | None
    error: float | None = None
    tolerance: float | None = None
    baseline: float | None = None
    detail: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class VerifyResult:
    a: str
    b: str
    dtype: str
    checks: list[Check]

    @property
    def equivalent(self) -> bool:
        return all(c.passed is not False for c in self.checks)

    def __bool__(self) -> bool:
        """``if idinspect.verify(a, b):`` asks the question the function answers."""
        return self.equivalent

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "dtype": self.dtype, "equivalent": self.equivalent,
                "checks": [asdict(c) for c in self.checks]}


def verify(a, b, *, functional: bool = True, tokens: int = 16, decode: int = 8, seed: int = 0,
           max_memory: int | None = None, token: str | None = None, cache_dir=None,
           local_files_only: bool = False, progress: Progress | None = None,
           strict_config: bool = False, memory: str = "auto") -> VerifyResult:
    """Compare checkpoints ``a`` (reference) and ``b``; see the module docstring for the checks.

    ``max_memory`` (bytes) bounds what a float64 model copy may take before the functional check
    streams the model (stored dtype, float64 module by module; default: half the available memory),
    and what the streamed model may take before accelerate's disk offload; ``memory`` ("auto",
    "memory", "stream", "offload") picks the route instead of that rule. ``progress(stage,
    done, total)`` is told how far each stage is: "open" (the two models), "tensors" (non-attention
    tensors), "invariants" (layers), "functional" (transformers runs). ``strict_config``: every
    configuration key must agree, not only those the computation reads.
    """
    progress = progress or _no_progress
    opts = dict(token=token, cache_dir=cache_dir, local_files_only=local_files_only, whole_files=True)
    progress("open", 0, 2)
    A = a if isinstance(a, Model) else load(a, **opts)
    try:
        progress("open", 1, 2)
        B = b if isinstance(b, Model) else load(b, **opts)
        progress("open", 2, 2)
        try:
            return _verify(A, B, functional, tokens, decode, seed, max_memory, progress, strict_config, memory)
        finally:
            if B is not b:
                B.close()
    finally:
        if A is not a:
            A.close()


#: progress(stage, done, total), as for export.
Progress = Callable[[str, int, int], None]


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


def _verify(A: Model, B: Model, functional: bool, tokens: int, decode: int, seed: int,
            max_memory: int | None, progress: Progress = _no_progress, strict_config: bool = False,
            memory: str = "auto") -> VerifyResult:
    dtype = stored_dtype(B)
    latent = bool(getattr(A.adapter, "latent", False))
    if latent and (not functional or dtype not in FIXED_TOLERANCES):
        A.require_per_head("verify --no-functional" if not functional else f"verify of a {dtype} checkpoint "
                           "(its rounding baseline moves per-head factors)")
    checks = [_config_check(A, B, strict_config)]
    structure = _structure_check(A, B)
    checks.append(structure)
    if structure.passed:
        checks.append(_tensor_check(A, B, progress))
        checks.append(Check("invariants", None, detail="skipped: multi-head latent attention has no per-head "
                            "invariants; judged by the functional check") if latent
                      else _invariant_check(A, B, dtype, progress))
        gguf = [side for side, m in (("A", A), ("B", B)) if _is_gguf(m)]
        if functional and gguf:
            checks.append(Check("functional", None, detail=f"skipped: {' and '.join(gguf)} is a GGUF file, which stock "
                                "transformers would dequantise and re-map on its own; the tensors and invariants decide"))
        elif functional:
            checks += _functional_checks(A, B, dtype, tokens, decode, seed, max_memory, progress, memory)
        else:
            checks.append(Check("functional", None, detail="skipped (--no-functional)"))
    return VerifyResult(A.provenance.source, B.provenance.source, str(dtype).removeprefix("torch."), checks)


#: Stored tensors that are buffers recomputed from the config, not weights (transformers may or may
#: not save them, and their values follow the config): never compared as weights.
BUFFER_SUFFIXES = ("position_ids", "inv_freq", "masked_bias", "token_type_ids")


def buffers(model: Model) -> set[str]:
    """Names of the stored buffers of ``model`` (the adapter's and :data:`BUFFER_SUFFIXES`)."""
    return {k for k in model.reader.keys() if model.adapter.is_buffer(k) or k.endswith(BUFFER_SUFFIXES)}


def stored_dtype(model: Model) -> torch.dtype:
    """The dtype of the model's attention weights (what its rounding is judged by)."""
    return model.reader.dtype(model.adapter.attention_keys(0)[0])


def rounding_baseline(layer: AttentionLayer, dtype: torch.dtype) -> AttentionLayer:
    """``layer`` moved by the exact scalar gauge c = 8/7 and rounded to ``dtype`` (back in float64).
    Under a q/k norm a scalar on W_Q, W_K is no gauge: W_Q, b_Q, W_K, b_K are only rounded, and the
    norm's gains (with their biases) take the gain trade by c on every orbit instead, then round."""
    c = BASELINE_SCALE
    L = layer.to(torch.float64)
    norm = getattr(L, "qk_norm", None)
    q = 1.0 if norm is not None else c
    factors = {"W_Q": q, "b_Q": q, "W_K": 1 / q, "b_K": 1 / q, "W_V": c, "b_V": c, "W_O": 1 / c, "b_O": 1.0}
    moved = L.replace(**{r: (t * factors[r]).to(dtype).to(torch.float64) for r, t in L.tensors().items()})
    if norm is not None and tradable(L):
        traded = trade(L, torch.full((1, L.d_k), c, dtype=torch.float64))
        moved = moved.replace(qk_norm=cast_norm(traded, traded, dtype).to(torch.float64))
    return moved


def _config_check(A: Model, B: Model, strict: bool = False) -> Check:
    """The configuration keys the model's computation reads must agree (:mod:`.config_keys`); other
    differing keys are notes, or failures too with ``strict``."""
    da, db = full_settings(A.hf_config), full_settings(B.hf_config)
    computed, notes = split_differences(da, db, A.hf_config.model_type)
    differ = computed + notes if strict else computed
    extra = {"differ": differ, "notes": [] if strict else notes}
    note = f"; notes: {len(notes)} keys the computation does not read differ ({', '.join(notes[:6])})" if notes and not strict else ""
    if differ:
        what = "configs differ in" if strict else "configs differ in keys the computation reads:"
        return Check("config", False, detail=f"{what} {', '.join(differ[:8])}{note}", extra=extra)
    same = "same configuration (dtype aside)" if strict or not notes else "same computation settings"
    return Check("config", True, detail=f"{same}{note}", extra=extra)


def _structure_check(A: Model, B: Model) -> Check:
    if type(A.adapter) is not type(B.adapter) or A.num_layers != B.num_layers:
        return Check("structure", False, detail=f"different architectures or depths "
                     f"({A.adapter.family}/{A.num_layers} vs {B.adapter.family}/{B.num_layers})")
    ka, kb = set(A.reader.keys()) - buffers(A), set(B.reader.keys()) - buffers(B)
    if ka != kb:
        only_a, only_b = sorted(ka - kb), sorted(kb - ka)
        return Check("structure", False, detail=f"tensor names differ: {len(only_a)} only in A (e.g. "
                     f"{(only_a or ['-'])[0]}), {len(only_b)} only in B (e.g. {(only_b or ['-'])[0]})")
    bad = [k for k in sorted(ka) if tuple(A.reader.shape(k)) != tuple(B.reader.shape(k))]
    if bad:
        return Check("structure", False, detail=f"{len(bad)} tensors differ in shape, e.g. {bad[0]}")
    return Check("structure", True, detail=f"{len(ka)} tensors, same names and shapes")


def _tensor_check(A: Model, B: Model, progress: Progress = _no_progress) -> Check:
    """Every non-attention tensor: bit-exact in the same dtype, else within one rounding."""
    attention = {k for i in range(A.num_layers) for k in A.adapter.attention_keys(i)}
    skipped = buffers(A) | buffers(B)
    worst, where, count = 0.0, "", 0
    names = [n for n in A.reader.keys() if n not in attention and n not in skipped]
    for name in names:
        progress("tensors", count, len(names))
        ta, tb = A.reader.get(name), B.reader.get(name)
        count += 1
        bad = _non_finite(name, ta, "A") or _non_finite(name, tb, "B")
        if bad:
            return Check("tensors", False, detail=bad)
        if ta.dtype == tb.dtype and torch.equal(ta, tb):
            continue
        if ta.dtype == tb.dtype or not (ta.is_floating_point() and tb.is_floating_point()):
            return Check("tensors", False, error=_rel(ta, tb), tolerance=0.0,
                         detail=f"{name} differs (same dtype: must be bit-exact)")
        coarse = ta.dtype if torch.finfo(ta.dtype).eps > torch.finfo(tb.dtype).eps else tb.dtype
        tol = torch.finfo(coarse).eps  # one rounding is at most eps / 2 relative, elementwise
        diff = (ta.to(torch.float64) - tb.to(torch.float64)).abs()
        bound = tol * ta.to(torch.float64).abs() + torch.finfo(coarse).tiny
        if bool((diff > bound).any()):
            return Check("tensors", False, error=_rel(ta, tb), tolerance=tol,
                         detail=f"{name} differs beyond one {coarse} rounding")
        if _rel(ta, tb) >= worst:
            worst, where = _rel(ta, tb), name
    progress("tensors", count, len(names))
    how = f" within rounding (largest {worst:.1e} at {where})" if worst else " bit for bit"
    detail = f"{count} non-attention tensors equal{how}"
    if skipped:
        detail += f"; {len(skipped)} buffers not compared (e.g. {sorted(skipped)[0]})"
    return Check("tensors", True, error=worst, detail=detail)


#: Rounding bound factor: a factor stored with relative error eps moves its product by at most
#: eps * ||X||_F ||Y||_F / ||X Y||_F (relative); both sides' roundings count, with this margin.
CONDITION_FACTOR = 8.0


def factor_amplification(layer: AttentionLayer) -> dict[str, torch.Tensor]:
    """How much a relative rounding of the stored factors can move each invariant, shaped as
    :func:`~idinspect.gauge.invariants.invariant_error_tensors`: ``W_QK``, ``W_OV`` [H],
    ``plane_QK``, ``plane_QJK`` [H, P], ``output_bias`` [] (the worst head's); ``qk_factors`` [H] = 1
    under a q/k norm (the factors are compared themselves: a relative rounding moves them by as much),
    and ``qk_gains`` [H] where it has gains (:func:`~idinspect.gauge.qk_gain_trade.gain_product_amplification`).

    amp = ||X||_F ||Y||_F / ||X Y^T||_F for the factors X, Y of that head's (or plane's) invariant:
    1 for a balanced rank-1 head, about sqrt(k) for balanced well-conditioned ones, and the square
    of the gauge's condition number where a gauge move made the factors lopsided. From k x k
    Grams: ||X Y^T||_F^2 = tr(X^T X Y^T Y), never a d x d product.
    """
    L = layer.to(torch.float64)
    kv = torch.arange(L.n_heads) // L.group_size
    cols = list(unrotated_columns(L))
    noop = list(noop_key_bias_columns(L))
    key_bias = L.b_K.clone() if L.b_K is not None else None
    if key_bias is not None and noop:
        key_bias[:, noop] = 0                                          # the no-op part is not a factor
    Q = augment(L.W_Q, L.b_Q if L.b_Q is not None else L.W_Q.new_zeros(L.n_heads, L.d_k))
    K = augment(L.W_K, key_bias) if key_bias is not None else L.W_K
    gq, gk = Q.transpose(1, 2) @ Q, (K.transpose(1, 2) @ K)[kv]                # [H, d_k, d_k]
    out: dict[str, torch.Tensor] = {}
    if getattr(L, "qk_norm", None) is not None:
        out["qk_factors"] = torch.ones(L.n_heads, dtype=torch.float64)
        if L.qk_norm.q_gain is not None:
            out["qk_gains"] = gain_product_amplification(L)
    if cols:
        U = torch.tensor(cols)
        out["W_QK"] = _amplification(gq[:, U][:, :, U], gk[:, U][:, :, U])
    if L.positional.kind == "rope":
        planes = torch.tensor(L.positional.rotary.plane_columns())                # [P, 2]
        px = gq[:, planes[:, :, None], planes[:, None, :]]                         # [H, P, 2, 2]
        py = gk[:, planes[:, :, None], planes[:, None, :]]
        J = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
        out["plane_QK"] = _amplification(px, py)
        out["plane_QJK"] = _amplification(px, py, J.T @ px @ J)
    go = L.W_O @ L.W_O.transpose(1, 2)                                          # [H, d_v, d_v]
    V = augment(L.W_V, L.b_V) if L.sinks is not None and L.b_V is not None else L.W_V   # per-head b_V under sinks
    gv = (V.transpose(1, 2) @ V)[kv]
    out["W_OV"] = _amplification(go, gv)
    out["output_bias"] = out["W_OV"].max()
    if L.sinks is not None:
        out["sinks"] = torch.tensor(1.0, dtype=torch.float64)          # stored as they are: nothing amplifies
    return out


def _amplification(gx: torch.Tensor, gy: torch.Tensor, gx_product: torch.Tensor | None = None) -> torch.Tensor:
    """sqrt(tr Gx tr Gy / tr(Gx' Gy)) over the last two dims (Gx' = Gx, or its J-twisted form); 1
    where the product vanishes or is not finite (nothing to amplify)."""
    gxp = gx if gx_product is None else gx_product
    product = (gxp * gy.transpose(-1, -2)).sum(dim=(-1, -2)).clamp_min(0).sqrt()
    factors = (gx.diagonal(dim1=-2, dim2=-1).sum(-1) * gy.diagonal(dim1=-2, dim2=-1).sum(-1)).clamp_min(0).sqrt()
    amp = torch.where(product > 0, factors / torch.where(product > 0, product, torch.ones_like(product)),
                      torch.ones_like(product))
    return torch.nan_to_num(amp, nan=1.0, posinf=1.0)


def _eps(layer: AttentionLayer) -> float:
    return float(torch.finfo(layer.W_Q.dtype).eps) if layer.W_Q.is_floating_point() else 0.0


@dataclass
class _Judged:
    """One layer's errors of one invariant kind, with the conditioning bound of each entry."""

    layer: int
    errors: torch.Tensor          # [], [H] or [H, P]
    bound: torch.Tensor           # same shape
    amp_a: torch.Tensor
    amp_b: torch.Tensor


def _invariant_check(A: Model, B: Model, dtype: torch.dtype, progress: Progress = _no_progress) -> Check:
    """Every invariant of every head (and rotary plane) within max(the dtype's tolerance, the rounding
    bound of that head's own factors)."""
    judged: dict[str, list[_Judged]] = {k: [] for k in INVARIANTS}
    base = {k: 0.0 for k in INVARIANTS}
    largest: list[tuple[int, InvariantError]] = []     # each layer's largest, as export states it
    for i in range(A.num_layers):
        progress("invariants", i, A.num_layers)
        la, lb = A.layer(i), B.layer(i)
        for side, layer in (("A", la), ("B", lb)):
            for role, t in layer.tensors().items():
                bad = _non_finite(layer.tensor_names.get(role, role), t, side)
                if bad:
                    return Check("invariants", False, detail=bad)
        try:
            errors = invariant_error_tensors(la, lb)
        except ValueError as exc:
            return Check("invariants", False, detail=str(exc))
        amp_a, amp_b, eps_a, eps_b = factor_amplification(la), factor_amplification(lb), _eps(la), _eps(lb)
        for kind, err in errors.items():
            # float32/float64: the flat tolerance is raised to the factors' rounding bound; bf16/fp16
            # are judged against the rounding baseline, which already moves and rounds these factors
            bound = (CONDITION_FACTOR * (eps_a * amp_a[kind] + eps_b * amp_b[kind]) if dtype in FIXED_TOLERANCES
                     else torch.zeros_like(err))
            judged[kind].append(_Judged(i, err, bound, amp_a[kind], amp_b[kind]))
        largest.append((i, max((worst_entry(kind, err) for kind, err in errors.items()), key=lambda e: e.error)))
        for kind, e in invariant_errors(la, rounding_baseline(la, dtype)).items():
            base[kind] = max(base[kind], e.error)
    progress("invariants", A.num_layers, A.num_layers)
    present = [k for k in INVARIANTS if judged[k]]
    per_kind = {k: _worst_against_tolerance(k, judged[k], _tolerance(dtype, "invariants", base[k]), base[k])
                for k in present}
    passed = all(v["error"] <= v["tolerance"] for v in per_kind.values())
    top = max(present, key=lambda k: per_kind[k]["error"] / per_kind[k]["tolerance"])
    return Check("invariants", passed, error=per_kind[top]["error"], tolerance=per_kind[top]["tolerance"],
                 baseline=base[top], detail=f"{A.num_layers} layers; {describe_largest(*largest_over_layers(largest))}; "
                 f"worst relative to its tolerance: {per_kind[top]['where']}; "
                 f"tolerance: {per_kind[top]['bound']}",
                 extra={"per_invariant": per_kind})


def _worst_against_tolerance(kind: str, layers: list[_Judged], flat: float, baseline: float) -> dict:
    """The entry (layer, head, plane) with the largest error / max(flat, its own bound)."""
    best = None
    for j in layers:
        tol = torch.clamp(j.bound, min=flat)
        ratio = j.errors / tol
        at = int(ratio.reshape(-1).argmax())
        if best is None or float(ratio.reshape(-1)[at]) > best[0]:
            best = (float(ratio.reshape(-1)[at]), j, at)
    _, j, at = best
    head = plane = None
    if j.errors.dim() == 1:
        head = at
    elif j.errors.dim() == 2:
        head, plane = divmod(at, j.errors.shape[1])
    where = InvariantError(kind, 0.0, head, plane).where(j.layer)
    tol = max(flat, float(j.bound.reshape(-1)[at]))
    aa, ab = float(j.amp_a.reshape(-1)[at]), float(j.amp_b.reshape(-1)[at])
    why = (f"{CONDITION_FACTOR:g} (eps_A x {aa:.3g} + eps_B x {ab:.3g}), the factors' conditioning at "
           f"{where.rsplit(' ', 1)[0]}" if tol > flat else "the stored dtype's tolerance")
    return {"error": float(j.errors.reshape(-1)[at]), "where": where, "baseline": baseline, "tolerance": tol,
            "bound": why}


def _functional_checks(A: Model, B: Model, dtype: torch.dtype, tokens: int, decode: int, seed: int,
                       max_memory: int | None, progress: Progress = _no_progress, memory: str = "auto") -> list[Check]:
    ids = fn.probe_ids(A.hf_config, tokens, decode, seed)
    size = max(_parameter_bytes_f64(A), _parameter_bytes_f64(B))
    stored = max(_parameter_bytes(A), _parameter_bytes(B))
    largest = max(_largest_tensor_f64(A), _largest_tensor_f64(B))
    plan = fn.plan_loading(size, max_memory, stored_bytes=stored, largest_f64_bytes=largest, mode=memory)
    how = plan.describe()
    runs = 2 if dtype in FIXED_TOLERANCES or plan.offload else 3
    progress("functional", 0, runs)
    out_a = fn.run_model(A.provenance.path, ids, decode, plan)
    progress("functional", 1, runs)
    out_b = fn.run_model(B.provenance.path, ids, decode, plan)
    progress("functional", 2, runs)
    err_abs = float((out_a.values - out_b.values).abs().max())
    scale = float(out_a.values.abs().max())
    err = err_abs / scale if scale > 0 else err_abs
    baseline, base_out = None, None
    if dtype not in FIXED_TOLERANCES and not plan.offload:
        base_out = fn.run_model(A.provenance.path, ids, decode, plan, edit=lambda m: _apply_baseline(m, A, dtype))
        progress("functional", 3, runs)
        baseline = float((out_a.values - base_out.values).abs().max()) / (scale or 1.0)
    tol = _tolerance(dtype, "functional", baseline, compute=plan.compute_dtype)
    checks = [Check("functional", err <= tol, error=err, tolerance=tol, baseline=baseline,
                    detail=f"{out_a.kind} on {tuple(ids.shape)} seeded random ids ({how}); max abs {err_abs:.2e}",
                    extra={"max_abs": err_abs, "kind": out_a.kind})]
    if out_a.decoded is not None:
        same = torch.equal(out_a.decoded, out_b.decoded)
        base_same = None if base_out is None else torch.equal(out_a.decoded, base_out.decoded)
        excused = not same and base_same is False
        detail = f"{out_a.decoded.shape[1]} greedy tokens x {out_a.decoded.shape[0]} sequences " + (
            "identical" if same else "differ" + (" (so does the rounding baseline's)" if excused else ""))
        checks.append(Check("decode", same or excused, detail=detail,
                            extra={"a": out_a.decoded.tolist(), "b": out_b.decoded.tolist()}))
    return checks


def _is_gguf(model: Model) -> bool:
    path = model.provenance.path
    return path is not None and path.suffix.lower() == ".gguf"


def _apply_baseline(model, A: Model, dtype: torch.dtype) -> None:
    touched = set()
    params = [n for n, _ in model.named_parameters()]
    for i in range(A.num_layers):
        tensors = A.adapter.write_layer(rounding_baseline(A.layer(i), dtype), dtype=torch.float64)
        fn.apply_tensors(model, tensors)
        touched |= set(fn.map_names(list(tensors), params).values())
    fn.round_parameters(model, dtype, skip=touched)


def _tolerance(dtype: torch.dtype, kind: str, baseline: float | None, compute: torch.dtype = torch.float64) -> float:
    if dtype in FIXED_TOLERANCES:
        tol = FIXED_TOLERANCES[dtype][kind]
        if compute == torch.float32 and kind == "functional":
            tol = max(tol, 1e-4)  # float32 arithmetic in both runs
        return tol
    if baseline is None:  # no baseline (offloaded): 16 units of rounding
        return 16 * torch.finfo(dtype).eps
    return max(BASELINE_FACTOR * baseline, torch.finfo(dtype).eps)  # floor: one rounding (zero invariants)


def _numel(model: Model, key: str) -> int:
    n = 1
    for s in model.reader.shape(key):
        n *= s
    return n


def _parameter_bytes_f64(model: Model) -> int:
    return sum(8 * _numel(model, k) for k in model.reader.keys())


def _parameter_bytes(model: Model) -> int:
    """Bytes of every stored tensor in its stored dtype."""
    return sum(_numel(model, k) * model.reader.dtype(k).itemsize for k in model.reader.keys())


def _largest_tensor_f64(model: Model) -> int:
    return max((8 * _numel(model, k) for k in model.reader.keys()), default=0)


def _non_finite(name: str, t: torch.Tensor, side: str) -> str | None:
    """Why ``t`` cannot be compared (NaN never equals anything, itself included), else None."""
    if not t.is_floating_point() or bool(torch.isfinite(t).all()):
        return None
    n_nan = int(torch.isnan(t).sum())
    n_inf = int(torch.isinf(t).sum())
    return (f"{side}'s {name} holds {n_nan} NaN and {n_inf} Inf values: a function with undefined values is "
            "equivalent to nothing, itself included")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.to(torch.float64), b.to(torch.float64)
    scale = float(a.abs().max()) if a.numel() else 0.0
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    return diff / scale if scale > 0 else diff


__all__ = ["Check", "VerifyResult", "rounding_baseline", "verify"]
