"""The oracle: nullity of d(attention output)/d(attention parameters) of a real HF module.

Written independently of idinspect (it shares nothing with ``idinspect.forms.per_head.prove``): the module's own
call is captured with a forward pre-hook (masks, rotary cos/sin, positions as the model builds
them), the hidden states are replaced by N(0, 1) samples (LayerNorm'd inputs lie on a hyperplane
and would add spurious null directions; so are a cross-attention block's encoder states), and torch.autograd.functional.jacobian differentiates
the output projection's output with respect to every parameter of the attention. The rank cut is
``RTOL`` times the largest singular value.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass

import torch
from torch.func import functional_call

RTOL = 1e-9
#: Bands of s / s_max where a layer has nearly-null directions (a norm's eps breaks them): exact null
#: below EXACT_BAND, nearly null between it and NEAR_BAND, the rest above. Measured on the MLA
#: variants: exact <= 1.6e-16, nearly null 6.7e-10 .. 3.6e-9, kept >= 3.0e-6 (docs/mathematics.md).
EXACT_BAND = 1e-13
NEAR_BAND = 1e-7
#: Layers with a q/k norm have nearly-null directions (the normalised scales, about eps / mean
#: square, 1e-10 .. 1e-7): exact null below NEAR_EXACT_RTOL, nearly null up to NEAR_RTOL (see :func:`bands`).
NEAR_EXACT_RTOL = 1e-12
NEAR_RTOL = 1e-6


@dataclass
class Nullity:
    nullity: int
    parameters: int
    smallest_kept: float          # s_rank-1 / s_max: must sit far above RTOL
    largest_dropped: float        # s_rank / s_max: must sit far below RTOL
    rows: int
    singular: torch.Tensor | None = None   # s / s_max, descending, padded with zeros to P


@dataclass
class Bands:
    exact: int                    # s <= NEAR_EXACT_RTOL
    near: int                     # NEAR_EXACT_RTOL < s <= NEAR_RTOL
    largest_exact: float
    smallest_near: float
    largest_near: float
    smallest_kept: float          # s > NEAR_RTOL


def bands(n: Nullity) -> Bands:
    """The three bands of a Jacobian's singular values (exact null, nearly null, identified)."""
    s = n.singular
    exact = s <= NEAR_EXACT_RTOL
    near = (s > NEAR_EXACT_RTOL) & (s <= NEAR_RTOL)
    kept = s > NEAR_RTOL
    top = lambda m: float(s[m].max()) if m.any() else 0.0
    low = lambda m: float(s[m].min()) if m.any() else 1.0
    return Bands(int(exact.sum()), int(near.sum()), top(exact), low(near), top(near), low(kept))


@contextlib.contextmanager
def single_thread():
    """One BLAS thread: these matrices are small, and on a shared machine threads only thrash."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def exact_softmax():
    """F.softmax keeps float64 inputs in float64 even when a module asks for dtype=float32 (BLOOM)."""
    import torch.nn.functional as F

    original = F.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        return original(input, dim=dim, _stacklevel=_stacklevel,
                        dtype=None if input.dtype == torch.float64 else dtype)

    F.softmax = softmax
    try:
        yield
    finally:
        F.softmax = original


def capture_call(model, module, input_ids: torch.Tensor) -> tuple[tuple, dict]:
    """(args, kwargs) with which ``model`` run on ``input_ids`` (:func:`tiny.model_inputs`) calls ``module``."""
    from tests.support.tiny import model_inputs

    seen = {}

    def hook(mod, args, kwargs):
        seen.setdefault("call", (args, dict(kwargs)))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**model_inputs(model, input_ids), use_cache=False)   # a cache would feed old keys back in
    finally:
        handle.remove()
    return seen["call"]


def as_keywords(module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call (args, kwargs) of ``module`` with every argument passed by name (MPNet's attention takes
    ``position_bias`` positionally)."""
    import inspect

    sig = inspect.signature(module.forward)
    out = {}
    for name, value in sig.bind_partial(*args, **kwargs).arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            return args, kwargs
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return (), out


def _table_rows(model, src, table: tuple[str, str], ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, head) indices [B, H, T, S] by which the model looks up its table (an nn.Embedding [rows, H]) for
    ``src``'s call: read from a forward pass with every row of the table holding its own number."""
    module = model.get_submodule(table[0])
    saved = module.weight.detach().clone()
    rows, heads = saved.shape
    with torch.no_grad():
        module.weight.copy_(torch.arange(rows, dtype=saved.dtype)[:, None].expand(rows, heads))
    try:
        _, kwargs = as_keywords(src, *capture_call(model, src, ids))
    finally:
        with torch.no_grad():
            module.weight.copy_(saved)
    index = kwargs[table[1]].round().long()
    head = torch.arange(heads).reshape(1, heads, *[1] * (index.dim() - 2)).expand_as(index)
    return index, head


def _with_random_hidden(args: tuple, kwargs: dict, gen: torch.Generator) -> tuple[tuple, dict]:
    """The call with the hidden states, and a cross-attention block's encoder states, drawn from N(0, 1)."""
    from tests.support.tiny import KV_ARGUMENTS

    kwargs = dict(kwargs)
    for name in KV_ARGUMENTS:
        if kwargs.get(name) is not None:
            kv = kwargs[name]
            kwargs[name] = torch.randn(kv.shape, generator=gen, dtype=kv.dtype)
    if args:
        x = args[0]
        return (torch.randn(x.shape, generator=gen, dtype=x.dtype), *args[1:]), kwargs
    x = kwargs["hidden_states"]
    return args, {**kwargs, "hidden_states": torch.randn(x.shape, generator=gen, dtype=x.dtype)}


def attention_nullity(model, src, dst=None, *, batches: int = 4, tokens: int = 8, seed: int = 0,
                      edit_call=None, exact=contextlib.nullcontext, table: tuple[str, str] | None = None) -> Nullity:
    """Nullity over ``batches`` random batches of the map params -> dst(src(x)) (see
    :func:`attention_singular_values` for the arguments)."""
    s, P, rows = attention_singular_values(model, src, dst, batches=batches, tokens=tokens, seed=seed,
                                           edit_call=edit_call, exact=exact, table=table)
    rank = int((s > RTOL * s[0]).sum())
    rel = torch.cat([s / s[0], s.new_zeros(max(0, P - s.numel()))])
    return Nullity(nullity=P - rank, parameters=P, smallest_kept=float(s[rank - 1] / s[0]),
                   largest_dropped=float(s[rank] / s[0]) if rank < s.numel() else 0.0, rows=rows, singular=rel)


def jacobian_bands(s: torch.Tensor) -> tuple[int, int]:
    """(exact nullity, nearly-null count) of singular values ``s`` (descending), each band edge at least a
    decade from the nearest value on either side (asserted, so that neither count depends on where the edges sit)."""
    r = s / s[0]
    exact = int((r < EXACT_BAND).sum())
    near = int(((r >= EXACT_BAND) & (r < NEAR_BAND)).sum())
    for edge in (EXACT_BAND, NEAR_BAND):
        below, above = r[r < edge], r[r >= edge]
        if below.numel():
            assert float(below.max()) < edge / 10 and float(above.min()) > edge * 10, (edge, below.max(), above.min())
    return exact, near


def attention_singular_values(model, src, dst=None, *, batches: int = 4, tokens: int = 8, seed: int = 0,
                              edit_call=None, exact=contextlib.nullcontext,
                              oversample: float = 2.0, table: tuple[str, str] | None = None) -> tuple[torch.Tensor, int, int]:
    """(singular values, descending, of the Jacobian of params -> dst(src(x)) over at most ``batches``
    random batches of about ``oversample`` P rows in all; parameter count P; Jacobian rows).

    ``src`` is the module that takes the hidden states; ``dst`` an output projection applied after
    it when it is a separate module (BERT's ``attention.output.dense``). ``edit_call(args, kwargs)``
    may change the captured call (e.g. switch RoPE off). ``exact()`` is a context in which the
    model's modules compute float64 in float64 (the family's own casts patched). ``table``: (module
    path, call keyword) of a table of the model's that this block owns and reads through its call
    (MPNet's relative-position bias): its weight joins the parameters, and the call's keyword gets
    the model's own lookup of it (:func:`_table_rows`).
    """
    # dst inside src (BLOOM's dense before the residual add, ALBERT's before a LayerNorm): the block's
    # output is dst's output during src's call, and src's parameters downstream of it are not the block's
    nested = dst is not None and dst is not src and any(m is dst for m in src.modules())
    names = [("s", k) for k, _ in src.named_parameters()]
    if dst is not None and dst is not src and not nested:
        names += [("d", k) for k, _ in dst.named_parameters()]
    elif not nested:
        dst = None
    modules = {"s": src, "d": dst}
    if table is not None:
        modules["t"] = model.get_submodule(table[0])
        names.append(("t", "weight"))
    gen = torch.Generator().manual_seed(seed)
    from tests.support.tiny import vocab as vocab_of

    vocab = vocab_of(model)

    def call(theta, args, kwargs):
        p = {m: {} for m in modules}
        for (m, k), t in zip(names, theta):
            p[m][k] = t
        if table is not None:
            rows, heads = kwargs["_table_rows"]
            kwargs = {k: v for k, v in kwargs.items() if k != "_table_rows"}
            kwargs[table[1]] = p["t"]["weight"][rows, heads]
        if nested:
            seen = {}
            handle = dst.register_forward_hook(lambda mod, a, y: seen.__setitem__("y", y))
            try:
                functional_call(src, p["s"], args, kwargs)
            finally:
                handle.remove()
            return seen["y"].reshape(-1)
        y = functional_call(src, p["s"], args, kwargs)
        y = y[0] if isinstance(y, tuple) else y
        if dst is not None:
            y = functional_call(dst, p["d"], (y,))
        return y.reshape(-1)

    values = tuple(dict(modules[m].named_parameters())[k].detach() for m, k in names)
    if nested:
        args, kwargs = capture_call(model, src, torch.randint(2, vocab, (1, tokens), generator=gen))
        live = tuple(v.clone().requires_grad_(True) for v in values)
        with exact_softmax(), exact():
            grads = torch.autograd.grad(call(live, args, kwargs).sum(), live, allow_unused=True)
        names = [n for n, g in zip(names, grads) if g is not None]
        values = tuple(v for v, g in zip(values, grads) if g is not None)
    P = sum(v.numel() for v in values)
    probe_args, probe_kwargs = capture_call(model, src, torch.full((1, tokens), 2))
    x = probe_args[0] if probe_args else probe_kwargs["hidden_states"]
    rows = x.shape[-2] * x.shape[-1]                # one sequence's outputs (a vision tower's tokens are its patches)
    # no more batches than about oversample P rows need: a long sequence (MPNet's 96 tokens) holds more rows
    # than a short one, and every extra row costs a backward pass and a share of the SVD
    batches = max(1, min(batches, math.ceil(oversample * P / rows)))
    per_batch = max(1, math.ceil(oversample * P / (batches * rows)))
    blocks = []
    for _ in range(batches):
        ids = torch.randint(2, vocab, (per_batch, tokens), generator=gen)
        call_args = capture_call(model, src, ids)
        if table is not None:
            call_args = as_keywords(src, *call_args)
        args, kwargs = _with_random_hidden(*call_args, gen)
        if table is not None:
            kwargs["_table_rows"] = _table_rows(model, src, table, ids)
        if edit_call is not None:
            args, kwargs = edit_call(args, kwargs)

        def f(*theta, args=args, kwargs=kwargs):
            return call(theta, args, kwargs)

        with warnings.catch_warnings(), single_thread(), exact_softmax(), exact():
            warnings.simplefilter("ignore")
            J = torch.autograd.functional.jacobian(f, values, vectorize=True)
        blocks.append(torch.cat([j.reshape(j.shape[0], -1) for j in J], dim=1))
    with single_thread():
        s = torch.linalg.svdvals(torch.cat(blocks))
    return s, P, sum(b.shape[0] for b in blocks)
