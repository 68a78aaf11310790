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
  cheap at any size (:func:`~idinspect.gauge.invariant_errors`; in float32 where both checkpoints are
  bf16/fp16, as export's own check);
- ``functional``: both loaded by stock transformers on seeded random token ids (computed in float64,
  or float32 for bf16/fp16 checkpoints: :func:`~.functional.compute_dtype`): largest absolute and
  relative difference of the logits (last hidden states for encoders);
- ``decode``: causal LMs only, identical greedy continuations (A decodes; B and, where needed, the
  rounding baseline check A's continuation in one teacher-forced pass each, which decides the same
  question exactly).

Multi-head latent attention (DeepSeek-V2/V3) has no per-head invariants: ``invariants`` is skipped
and the function-level checks decide; float32/float64 checkpoints only, with the functional check on
(anything else is refused by name, exit 2).

Tolerances follow B's stored dtype and are bounds, not constants (:mod:`.bounds`, one place for
verify and the tests). float32/float64: an invariant's tolerance is the rounding bound of its own
head's (or rotary plane's) stored factors, ``CONDITION_FACTOR (eps_A amp_A + eps_B amp_B)`` with
amp = ||X||_F ||Y||_F / ||X Y||_F of that head's factors (:func:`~.bounds.factor_amplification`), over a
floor of 1e-10 (float64) / 1e-6 (float32), so a checkpoint moved along the gauge orbit into lopsided
factors (a value factor of condition number 1,650) is judged by what its dtype can store, while a
well-conditioned head beside it keeps the tight tolerance; the outputs' tolerance
(:func:`~.bounds.output_bound`) adds those layer bounds over the depth, with the float32 norms and the
compute dtype's arithmetic; the bound used is stated in the output. bfloat16/float16: judged against the
*rounding baseline*: A's attention moved by an exact scalar gauge (W_Q c, W_K / c, W_V c, W_O / c,
c = 8/7, so every entry needs rounding) and rounded to B's dtype, every other tensor rounded too.
The export passes when its error is at most ``BASELINE_FACTOR`` times the baseline's, or one rounding of
the dtype; the baseline is computed only for a check whose error exceeds one rounding
(:func:`.baseline.needs_baseline`: the same verdicts). The invariant check is :mod:`.invariant_check`, the transformers runs :mod:`.functional`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..model import Model, load
from . import functional as fn
from .baseline import BOUNDED_DTYPES, baseline_tolerance, needs_baseline, one_rounding, rounding_baseline
from .bounds import OutputBound, layer_amplification, output_bound
from .checks import Check, Progress, no_progress
from ..forms import form_of, require
from .config_keys import full_settings, split_differences
from .invariant_check import invariant_check
from .loading import BackgroundLoad
from ..sources.hf_logging import quiet_transformers
from .undefined import non_finite, undefined_outputs


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

    ``max_memory`` (bytes) bounds what a model's copy in the compute dtype (float64; float32 for bf16/fp16
    checkpoints) may take before the functional check streams the model (stored dtype, widened module
    by module; default: half the available memory),
    and what the streamed model may take before accelerate's disk offload; ``memory`` ("auto",
    "memory", "stream", "offload") picks the route instead of that rule. ``progress(stage,
    done, total)`` is told how far each stage is: "open" (the two models), "tensors" (non-attention
    tensors), "invariants" (layers), "functional" (transformers runs). ``strict_config``: every
    configuration key must agree, not only those the computation reads.
    """
    progress = progress or no_progress
    opts = {"token": token, "cache_dir": cache_dir, "local_files_only": local_files_only, "whole_files": True}
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


def _verify(A: Model, B: Model, functional: bool, tokens: int, decode: int, seed: int,
            max_memory: int | None, progress: Progress = no_progress, strict_config: bool = False,
            memory: str = "auto") -> VerifyResult:
    dtype = stored_dtype(B)
    no_invariants = form_of(A).refusal("per-head invariants")    # None where the form has them
    if not functional or dtype not in BOUNDED_DTYPES:
        require(A, "verify --no-functional" if not functional else f"verify of a {dtype} checkpoint "
                "(its rounding baseline moves per-head factors)")
    structure = _structure_check(A, B)
    checks = [structure]
    _compare_models(A, B, structure, checks, functional, tokens, decode, seed, max_memory, progress, memory,
                    dtype, no_invariants)
    # last, though reported first: it imports transformers, which the background load of the functional
    # check imports meanwhile (two threads importing one module wait for each other)
    with quiet_transformers():
        checks.insert(0, _config_check(A, B, strict_config))
    return VerifyResult(A.provenance.source, B.provenance.source, str(dtype).removeprefix("torch."), checks)


def _compare_models(A: Model, B: Model, structure: Check, checks: list[Check], functional: bool, tokens: int,
                    decode: int, seed: int, max_memory: int | None, progress: Progress, memory: str,
                    dtype: torch.dtype, no_invariants: str | None) -> None:
    """The tensors, invariants and functional checks, appended to ``checks`` (none where the structures differ)."""
    if structure.passed:
        gguf = [side for side, m in (("A", A), ("B", B)) if _is_gguf(m)]
        plan = _functional_plan(A, B, dtype, max_memory, memory) if functional and not gguf else None
        # A loads for the functional check on a thread of its own while the tensors and invariants are compared
        preload = (BackgroundLoad(A.provenance.path, plan)
                   if plan is not None and not plan.offload and A.provenance.path is not None else None)
        try:
            checks.append(_tensor_check(A, B, progress))
            if preload is not None:      # layer reads and the config check may import transformers too
                preload.wait_imported()
            amps: tuple[list[float], list[float]] = ([], [])
            checks.append(Check("invariants", None, detail=f"skipped: {no_invariants}; judged by the functional check")
                          if no_invariants else invariant_check(A, B, dtype, progress, amps))
            if functional and gguf:
                checks.append(Check("functional", None, detail=f"skipped: {' and '.join(gguf)} is a GGUF file, which "
                                    "stock transformers would dequantise and re-map on its own; the tensors and "
                                    "invariants decide"))
            elif functional:
                if dtype in BOUNDED_DTYPES and len(amps[0]) != A.num_layers:
                    amps = (_amplifications(A), _amplifications(B))
                checks += _functional_checks(A, B, dtype, tokens, decode, seed, plan, amps, progress, preload)
            else:
                checks.append(Check("functional", None, detail="skipped (--no-functional)"))
        finally:
            if preload is not None:
                preload.drop()


def buffers(model: Model) -> set[str]:
    """Names of the stored buffers of ``model`` (:meth:`is_buffer` of its adapter): never compared as
    weights (transformers may or may not save them, and their values follow the config)."""
    names = model.reader.keys()
    return {k for k in names if model.adapter.is_buffer(k)}


def stored_dtype(model: Model) -> torch.dtype:
    """The dtype of the model's attention weights (what its rounding is judged by)."""
    return model.reader.dtype(model.adapter.attention_keys(0)[0])


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


def _tensor_check(A: Model, B: Model, progress: Progress = no_progress) -> Check:
    """Every non-attention tensor: bit-exact in the same dtype, else within one rounding. Two tensors
    at a time on a multi-core CPU (reading and comparing are memory-bound, one thread each leaves
    bandwidth unused), results in order; the first that differs decides."""
    from ..numerics.parallel import ordered_map, usable_cpus

    attention = {k for i in range(A.num_layers) for k in A.adapter.attention_keys(i)}
    skipped = buffers(A) | buffers(B)
    worst, where, count = 0.0, "", 0
    stored = A.reader.keys()
    names = [n for n in stored if n not in attention and n not in skipped]
    progress("tensors", 0, len(names))
    workers = min(2, usable_cpus())
    for name, (failed, rel) in zip(names, ordered_map(lambda i, _: _compare_tensor(A, B, names[i]), len(names),
                                                     workers, lambda: None)):
        count += 1
        if failed is not None:
            return failed
        if rel and rel >= worst:
            worst, where = rel, name
        progress("tensors", count, len(names))
    how = f" within rounding (largest {worst:.1e} at {where})" if worst else " bit for bit"
    detail = f"{count} non-attention tensors equal{how}"
    if skipped:
        detail += f"; {len(skipped)} buffers not compared (e.g. {min(skipped)})"
    return Check("tensors", True, error=worst, detail=detail)


def _compare_tensor(A: Model, B: Model, name: str) -> tuple[Check | None, float]:
    """(a failed check or None, the relative difference: 0 where bit-exact) of tensor ``name``."""
    ta, tb = A.reader.viewed(name), B.reader.viewed(name)     # in place: each byte is looked at once
    same = ta.dtype == tb.dtype and (bitwise_equal(ta, tb) or torch.equal(ta, tb))   # torch.equal: 0.0 == -0.0
    bad = non_finite(name, ta, "A") or (not same and non_finite(name, tb, "B"))   # equal: B's are A's
    if bad:
        return Check("tensors", False, detail=bad), 0.0
    if same:
        return None, 0.0
    if ta.dtype == tb.dtype or not (ta.is_floating_point() and tb.is_floating_point()):
        return Check("tensors", False, error=_rel(ta, tb), tolerance=0.0,
                     detail=f"{name} differs (same dtype: must be bit-exact)"), 0.0
    coarse = ta.dtype if torch.finfo(ta.dtype).eps > torch.finfo(tb.dtype).eps else tb.dtype
    tol = torch.finfo(coarse).eps  # one rounding is at most eps / 2 relative, elementwise
    diff = (ta.to(torch.float64) - tb.to(torch.float64)).abs()
    bound = tol * ta.to(torch.float64).abs() + torch.finfo(coarse).tiny
    if bool((diff > bound).any()):
        return Check("tensors", False, error=_rel(ta, tb), tolerance=tol,
                     detail=f"{name} differs beyond one {coarse} rounding"), 0.0
    return None, _rel(ta, tb)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` (same dtype and shape) hold the same bits, entry by entry: compared as 8-byte
    integers where the size allows (2.14 GB of the 1B shape's bf16 tensors: 0.3 s, against 1.0 s for
    ``torch.equal`` on the floats, which also calls -0.0 and 0.0 equal and a NaN unequal to itself)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    if x.numel() % 8 == 0:
        x, y = x.view(torch.int64), y.view(torch.int64)
    return torch.equal(x, y)


def output_tolerance(a, b, compute: torch.dtype = torch.float64) -> OutputBound:
    """The relative output tolerance for checkpoints (or :class:`Model`) ``a`` and ``b`` run in
    ``compute`` (:func:`~.bounds.output_bound` from both sides' per-layer amplifications and stored
    dtypes): what the functional check of :func:`verify` applies, for callers that run the models
    themselves (the test suite does)."""
    A = a if isinstance(a, Model) else load(a)
    try:
        B = b if isinstance(b, Model) else load(b)
        try:
            return output_bound(_amplifications(A), _amplifications(B), stored_dtype(A), stored_dtype(B), compute)
        finally:
            if B is not b:
                B.close()
    finally:
        if A is not a:
            A.close()


def _amplifications(model: Model) -> list[float]:
    """:func:`~.bounds.layer_amplification` of every layer (1 where the form has no per-head
    invariants: multi-head latent attention's factors have no per-head products to amplify)."""
    if form_of(model).refusal("per-head invariants"):
        return [1.0] * model.num_layers
    return [layer_amplification(model.layer(i)) for i in range(model.num_layers)]


def _functional_plan(A: Model, B: Model, dtype: torch.dtype, max_memory: int | None, memory: str) -> fn.LoadPlan:
    """How the functional check loads A and B (:func:`.functional.plan_loading`): the larger of the two in
    the compute dtype of B's stored ``dtype`` against ``max_memory``, or the route ``memory`` names."""
    compute = fn.compute_dtype(dtype)
    width = compute.itemsize
    size = max(_parameter_bytes_as(A, width), _parameter_bytes_as(B, width))
    stored = max(_parameter_bytes(A), _parameter_bytes(B))
    largest = max(_largest_tensor_as(A, width), _largest_tensor_as(B, width))
    return fn.plan_loading(size, max_memory, stored_bytes=stored, largest_bytes=largest, mode=memory,
                           compute=compute)


def _functional_checks(A: Model, B: Model, dtype: torch.dtype, tokens: int, decode: int, seed: int,
                       plan: fn.LoadPlan, amps: tuple[list[float], list[float]],
                       progress: Progress = no_progress, preload: BackgroundLoad | None = None) -> list[Check]:
    """The outputs of A and B within the rounding bound (float32/float64, :func:`~.bounds.output_bound`
    from the per-layer amplifications ``amps``) or, bf16/fp16, within one rounding, else against the
    rounding baseline (run only then: :func:`.baseline.needs_baseline`). ``preload``: A already loading
    in the background (:class:`.loading.BackgroundLoad`)."""
    ids = fn.probe_ids(A.hf_config, tokens, decode, seed)
    how = plan.describe()
    may_need_baseline = dtype not in BOUNDED_DTYPES and not plan.offload
    progress("functional", 0, 2)
    # A decodes greedily; B checks A's continuation in one teacher-forced pass
    out_a = fn.run_model_editions(A.provenance.path, ids, decode, plan, [None], preloaded=preload)[0]
    progress("functional", 1, 2)
    out_b = fn.run_model(B.provenance.path, ids, decode, plan, follow=out_a.decoded)
    progress("functional", 2, 2)
    undefined = undefined_outputs(out_a, out_b, ids)
    if undefined is not None:
        return [Check("functional", undefined[0], detail=undefined[1])]
    err_abs = float((out_a.values - out_b.values).abs().max())
    scale = float(out_a.values.abs().max())
    err = err_abs / scale if scale > 0 else err_abs
    decoded_differ = out_a.decoded is not None and not torch.equal(out_a.decoded, out_b.decoded)
    base_out = None
    if may_need_baseline and (needs_baseline(dtype, err) or decoded_differ):
        # A's rounding baseline: A reloaded and edited, checking A's continuation (a third run, only here)
        progress("functional", 2, 3)
        base_out = fn.run_model(A.provenance.path, ids, decode, plan, edit=lambda m: _apply_baseline(m, A, dtype),
                                follow=out_a.decoded)
        progress("functional", 3, 3)
    baseline = None if base_out is None else float((out_a.values - base_out.values).abs().max()) / (scale or 1.0)
    extra: dict = {"max_abs": err_abs, "kind": out_a.kind}
    if dtype in BOUNDED_DTYPES:
        bound = output_bound(amps[0], amps[1], stored_dtype(A), dtype, plan.compute_dtype)
        tol, why = bound.tolerance, f"; tolerance: {bound.describe()}"
        extra["bound"] = asdict(bound)
    elif may_need_baseline and base_out is None:
        tol, why = one_rounding(dtype), f"; within one {str(dtype).removeprefix('torch.')} rounding: the rounding baseline was not needed"
    else:
        tol, why = baseline_tolerance(dtype, baseline), ""
    checks = [Check("functional", err <= tol, error=err, tolerance=tol, baseline=baseline,
                    detail=f"{out_a.kind} on {tuple(ids.shape)} seeded random ids ({how}); max abs {err_abs:.2e}{why}",
                    extra=extra)]
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
    """A's attention moved and rounded (:func:`rounding_baseline`), every other parameter rounded to
    ``dtype``, but for those A stores in ``dtype`` already (rounding them is the identity)."""
    touched = set()
    params = [n for n, _ in model.named_parameters()]
    for i in range(A.num_layers):
        # held in float32 (bf16/fp16 values are exact there): half the bytes of a float64 copy to move
        tensors = A.adapter.write_layer(rounding_baseline(A.layer(i), dtype, torch.float32), dtype=torch.float32)
        fn.apply_tensors(model, tensors)
        touched |= set(fn.map_names(list(tensors), params).values())
    stored = A.reader.keys()
    exact = set(fn.loaded_names([k for k in stored if A.reader.dtype(k) == dtype], params))
    fn.round_parameters(model, dtype, skip=touched | exact)


def _numel(model: Model, key: str) -> int:
    n = 1
    for s in model.reader.shape(key):
        n *= s
    return n


def _parameter_bytes_as(model: Model, itemsize: int) -> int:
    """Bytes of every stored tensor widened to ``itemsize`` bytes an entry (the functional check's copy)."""
    names = model.reader.keys()
    return sum(itemsize * _numel(model, k) for k in names)


def _parameter_bytes(model: Model) -> int:
    """Bytes of every stored tensor in its stored dtype."""
    names = model.reader.keys()
    return sum(_numel(model, k) * model.reader.dtype(k).itemsize for k in names)


def _largest_tensor_as(model: Model, itemsize: int) -> int:
    names = model.reader.keys()
    return max((itemsize * _numel(model, k) for k in names), default=0)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.to(torch.float64), b.to(torch.float64)
    scale = float(a.abs().max()) if a.numel() else 0.0
    diff = float((a - b).abs().max()) if a.numel() else 0.0
    return diff / scale if scale > 0 else diff


__all__ = ["Check", "VerifyResult", "output_tolerance", "rounding_baseline", "verify"]
