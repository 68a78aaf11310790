"""The shrunken twin of a model's attention and the Jacobian of its attention modules (float64):
what ``--prove`` (:mod:`.prove`, :mod:`.prove_latent`) and the whole-model proof differentiate.

The twin is a one-layer model of the same ``model_type`` built by transformers itself, with the
same bias pattern, positional scheme (RoPE type and parameters), causality and sliding window,
but small: G' = min(G, 2) groups (H' = min(H, 4) for multi-head), H' = min(r, 4) G' with r = H/G,
head width 4 with RoPE (2 planes) or 2 without, and a width d' near d / (H d_k) that every family's
config validation accepts (:func:`twin_width`). Its attention module's output y (sdpa, Gaussian
hidden states of B sequences x T tokens, the real module's own masks and rotary embeddings) is
differentiated with respect to that module's parameters theta; :func:`nullity` and :func:`bands`
read the Jacobian's singular values.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

from ..errors import IdinspectError
from .parallel import single_threaded_kernels

#: Relative singular-value cut of the Jacobian.
RTOL = 1e-9
#: Where a q/k norm leaves nearly-null directions (singular values about eps / mean square, 1e-10
#: to 1e-7 relative at eps = 1e-6), three bands: exact below NEAR_EXACT_RTOL, nearly null up to
#: NEAR_RTOL, identified above (docs/mathematics.md, "Normalised queries and keys").
NEAR_EXACT_RTOL = 1e-12
NEAR_RTOL = 1e-6
TOKENS = 8
#: The twin's largest kv-group ratio: sharing keys among several query heads is kept, but Falcon-7B's
#: 71 query heads on one key head would give a Jacobian of ~10^5 columns.
MAX_GROUP_RATIO = 4


def twin_shape(model) -> dict:
    """Heads, kv heads, head width and model width of the twin of ``model`` (see module docstring)."""
    a = model.adapter
    H, G, dk, d = a.n_heads, a.n_kv_heads, a.head_dim, a.hidden_size
    r = H // G
    if r == 1:
        G2 = H2 = min(H, 4)
    else:
        G2 = min(G, 2)
        H2 = min(r, MAX_GROUP_RATIO) * G2
    rope = a.positional().kind == "rope"
    dk2 = 4 if rope else 2
    return {"heads": H2, "kv_heads": G2, "head_dim": dk2, "hidden_size": twin_width(d, H, G, dk, H2, G2, dk2)}


def twin_width(d: int, H: int, G: int, dk: int, H2: int, G2: int, dk2: int) -> int:
    """The twin's width d': a multiple of H' (every family's config validation asks d' = 0 mod H') nearest
    to H' dk' d / (H dk), on the same side of dk, G dk and H dk as d is of them (d' against dk', G' dk',
    H' dk'), so the ranks min(d, ...) that the count reads keep their order."""
    def side(a: int, b: int) -> int:
        return (a > b) - (a < b)

    target = H2 * dk2 * d / (H * dk)
    sides = [(side(d, x), x2) for x, x2 in ((dk, dk2), (G * dk, G2 * dk2), (H * dk, H2 * dk2))]
    candidates = sorted(range(H2, H2 * (H2 * dk2 + 2 * dk2 + 2), H2), key=lambda w: (abs(w - target), w))
    for w in candidates:
        if all(side(w, x2) == s for s, x2 in sides):
            return w
    return min(candidates, key=lambda w: (abs(w - max(target, dk2)), w))


def _twin_config(model, shape: dict):
    """The twin's transformers config: the family's recipe (:meth:`Adapter.twin_settings`) over one layer."""
    cfg = model.hf_config
    common = {"num_hidden_layers": 1, "vocab_size": 32, "bos_token_id": None, "eos_token_id": None,
              "pad_token_id": None}
    from huggingface_hub.errors import StrictDataclassError

    settings = {**common, **model.adapter.twin_settings(cfg, shape)}
    try:
        return type(cfg)(**settings)
    except (ValueError, TypeError, StrictDataclassError) as exc:   # the family's config validation
        reason = " ".join(str(exc).split())
        raise IdinspectError(f"--prove: no twin can be built for this {model.adapter.family} model: transformers' "
                             f"{type(cfg).__name__} refuses the twin {shape} ({reason})") from exc


def build_twin(model, seed: int = 0, shape: dict | None = None):
    """(twin HF model in float64 eval mode with sdpa and N(0, 0.5) parameters, shape dict); ``shape``
    defaults to :func:`twin_shape` (multi-head latent attention passes its own)."""
    shape = shape or twin_shape(model)
    config = _twin_config(model, shape)
    return instantiate(config, _twin_builder(model, config), seed), shape


def instantiate(config, build, seed: int = 0):
    """``build(config)`` in float64 eval mode with sdpa attention (eager where the class has no sdpa
    path) and N(0, 0.5) parameters drawn from ``seed``: a twin the proofs differentiate exactly."""
    config._experts_implementation = "eager"   # MoE grouped_mm kernels take no float64
    try:
        config._attn_implementation = "sdpa"
        hf = build(config)
    except ValueError:          # no sdpa path (BLOOM): eager, with the softmax kept in float64 (exact_softmax)
        config._attn_implementation = "eager"
        hf = build(config)
    with warnings.catch_warnings():   # a complex buffer of a tower the proof never runs (Llama 4's vision RoPE)
        warnings.filterwarnings("ignore", message="Casting complex values to real")
        hf = hf.to(torch.float64).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return hf


def _twin_builder(model, config):
    """The class the adapter names for the twin (``twin_class``: an encoder-only save), else AutoModel's
    base model for the twin's config, or, for a config AutoModel does not map (a tower of a two-tower
    model: ``siglip_text_model``), the class the checkpoint names in ``architectures``."""
    import transformers
    from transformers import AutoModel

    named = getattr(model.adapter, "twin_class", None)
    if named is not None and isinstance(getattr(transformers, named, None), type):
        return getattr(transformers, named)
    traced = getattr(model.adapter, "twin_model_class", None)   # an adapter inferred by --auto: its traced class
    if traced is not None:
        return traced._from_config
    if type(config) in AutoModel._model_mapping.keys():
        return AutoModel.from_config
    archs = getattr(model.hf_config, "architectures", None) or []
    cls = getattr(transformers, archs[0], None) if archs else None
    if cls is None:
        raise IdinspectError(f"--prove: transformers has no base model for {type(config).__name__}")
    return cls


def _capture(hf, adapter, src, batch: int, generator: torch.Generator) -> tuple[tuple, dict]:
    """The real call of ``src`` (args, kwargs) in a forward pass over sequences of ``adapter.twin_tokens``
    tokens, hidden states (and a cross block's encoder states) replaced by N(0, 1)."""
    seen: dict = {}

    def hook(module, args, kwargs):
        seen["args"], seen["kwargs"] = args, dict(kwargs)

    handle = src.register_forward_pre_hook(hook, with_kwargs=True)
    text = getattr(hf.config, "text_config", None)
    vocab = getattr(hf.config, "vocab_size", None) or getattr(text, "vocab_size", None) or 32
    ids = torch.randint(2, vocab, (batch, adapter.twin_tokens), generator=generator)
    try:
        with torch.no_grad(), adapter.example_call(hf, generator):
            hf(**adapter.example_inputs(hf, ids, generator), use_cache=False)
    finally:
        handle.remove()
    args, kwargs = seen["args"], seen["kwargs"]
    for name in adapter.kv_arguments:
        if kwargs.get(name) is not None:
            kv = kwargs[name]
            kwargs[name] = torch.randn(kv.shape, generator=generator, dtype=kv.dtype)
    if args:
        x = args[0]
        args = (torch.randn(x.shape, generator=generator, dtype=x.dtype), *args[1:])
    else:
        x = kwargs["hidden_states"]
        kwargs["hidden_states"] = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    return args, kwargs


#: Sequences per Jacobian call of :func:`attention_jacobian`: a row's backward pass runs over every sequence
#: of its call, though the row depends on one, so small calls cost less (the rows are as many either way).
SEQUENCES_PER_CALL = 2


def attention_jacobian(hf, adapter, batch: int, seed: int = 0, block: int = 0) -> torch.Tensor:
    """d(attention output of ``block`` of the live model ``hf``)/d(its parameters) as a [B T d, P]
    float64 matrix over ``batch`` random sequences (B), taken :data:`SEQUENCES_PER_CALL` at a time;
    ``adapter`` (idinspect's adapter over ``hf``) says where the block lives.

    Where the output module sits inside the attention module (BLOOM's ``dense`` before the residual
    add, ALBERT's before a LayerNorm), the block's output is the output module's output during the
    attention module's call, and parameters with no path to it are not the block's.
    """
    src, out = adapter.live_modules(hf, block)
    nested = out is not None and any(m is out for m in src.modules())
    generator = torch.Generator().manual_seed(seed + 1 + block)
    params = {f"a.{k}": v.detach() for k, v in src.named_parameters()}
    if out is not None and not nested:
        params.update({f"o.{k}": v.detach() for k, v in out.named_parameters()})
    table = adapter.shared_table(block)
    if table is not None:
        params["t.weight"] = hf.get_submodule(table[0]).weight.detach()
    parts = []
    for start in range(0, batch, SEQUENCES_PER_CALL):
        J, params = _block_jacobian(hf, adapter, src, out, nested, table, params,
                                    min(SEQUENCES_PER_CALL, batch - start), generator, first=not parts)
        parts.append(J)
    return torch.cat(parts)


def _block_jacobian(hf, adapter, src, out, nested: bool, table, params: dict, batch: int,
                    generator: torch.Generator, first: bool) -> tuple[torch.Tensor, dict]:
    """(d output / d params [batch T d, P] on ``batch`` fresh random sequences, params): on the ``first``
    call of a nested block, the parameters with no path to the output are dropped from ``params``."""
    from torch.func import functional_call, jacrev

    args, kwargs = _capture(hf, adapter, src, batch, generator)
    if table is not None:
        path, keyword = table
        lookup = table_lookup(hf, adapter, src, path, keyword, batch)
        args, kwargs = as_keywords(src, args, kwargs)

    def forward(p: dict) -> torch.Tensor:
        inner = {k[2:]: v for k, v in p.items() if k.startswith("a.")}
        if table is not None:
            kwargs[keyword] = lookup(p["t.weight"])
        if nested:
            return nested_output(src, out, inner, args, kwargs).reshape(-1)
        y = functional_call(src, inner, args, kwargs)
        y = y[0] if isinstance(y, tuple) else y
        if out is not None:
            y = functional_call(out, {k[2:]: v for k, v in p.items() if k.startswith("o.")}, (y,))
        return y.reshape(-1)

    with exact_softmax(), adapter.exact_float64():
        if nested and first:
            params = _upstream(forward, params)
        with warnings.catch_warnings(), single_threaded_kernels():   # no vmap rule for CPU sdpa backward: slower, exact
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            J = jacrev(forward)(params)
    return torch.cat([J[k].reshape(J[k].shape[0], -1) for k in params], dim=1), params


def as_keywords(module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call (args, kwargs) of ``module`` with every argument passed by name (MPNet's attention takes
    ``position_bias`` positionally), so that one of them can be replaced by keyword."""
    import inspect

    sig = inspect.signature(module.forward)
    out = {}
    for name, value in sig.bind_partial(*args, **kwargs).arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            raise IdinspectError(f"--prove: {type(module).__name__}'s call takes *args; its table cannot be passed by name")
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return (), out


def table_lookup(hf, adapter, src, path: str, keyword: str, batch: int):
    """``f(table) -> the values src's call receives under keyword`` for the model's table at ``path`` (an
    ``nn.Embedding`` [rows, H] the model looks up by position): the model's own lookup indices are read
    by running it once with the table holding its row numbers, so the lookup is the model's, differentiable
    in the table. Used where a block reads a table of the model's (MPNet's relative-position bias)."""
    module = hf.get_submodule(path)
    rows, heads = module.weight.shape
    saved = module.weight.detach().clone()
    with torch.no_grad():
        module.weight.copy_(torch.arange(rows, dtype=saved.dtype)[:, None].expand(rows, heads))
    try:
        _, kwargs = as_keywords(src, *_capture(hf, adapter, src, batch, torch.Generator().manual_seed(0)))
    finally:
        with torch.no_grad():
            module.weight.copy_(saved)
    index = kwargs[keyword].round().to(torch.long)                        # [B, H, T, S] row numbers
    head = torch.arange(heads).reshape(1, heads, *[1] * (index.dim() - 2)).expand_as(index)

    def lookup(table: torch.Tensor) -> torch.Tensor:
        return table[index, head]

    return lookup


def nested_output(module, output_module, params: dict, args: tuple, kwargs: dict) -> torch.Tensor:
    """``output_module``'s output during ``functional_call(module, params, args, kwargs)``."""
    from torch.func import functional_call

    seen: dict = {}
    handle = output_module.register_forward_hook(lambda m, a, y: seen.__setitem__("y", y))
    try:
        functional_call(module, params, args, kwargs)
    finally:
        handle.remove()
    return seen["y"]


def _upstream(forward, params: dict) -> dict:
    """The parameters on which ``forward``'s output depends at all (in its autograd graph)."""
    live = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    grads = torch.autograd.grad(forward(live).sum(), list(live.values()), allow_unused=True)
    return {k: params[k] for k, g in zip(params, grads) if g is not None}


@contextlib.contextmanager
def exact_softmax() -> Iterator[None]:
    """Softmax that keeps float64 inputs in float64.

    Some modules (BLOOM's, Falcon's and several eager paths) ask ``F.softmax(..., dtype=float32)``
    even for float64 models: rows then sum to one only to ~1e-7, and the Jacobian of a float64 module
    shows fake 1e-7 singular values (a value-bias null direction looks identified at a 1e-9 cut).
    """
    import torch.nn.functional as F

    original = F.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None and input.dtype == torch.float64:
            dtype = None
        return original(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    F.softmax = softmax
    try:
        yield
    finally:
        F.softmax = original


def nullity(J: torch.Tensor, rtol: float = RTOL) -> tuple[int, float, float | None]:
    """(P - rank, smallest kept s / s_max, largest dropped s / s_max) of a Jacobian [rows, P]."""
    with single_threaded_kernels():
        s = torch.linalg.svdvals(J)
    rank = int((s > rtol * s[0]).sum())
    kept = float(s[rank - 1] / s[0]) if rank else 0.0
    dropped = float(s[rank] / s[0]) if rank < s.numel() else None
    return J.shape[1] - rank, kept, dropped


def bands(J: torch.Tensor) -> tuple[int, int, float, float | None, float, float | None]:
    """(exact nullity, nearly-null count, smallest kept s / s_max, largest exact-null s / s_max,
    smallest nearly-null, largest nearly-null) of a Jacobian [rows, P] with the cuts NEAR_EXACT_RTOL and NEAR_RTOL."""
    with single_threaded_kernels():
        s = torch.linalg.svdvals(J)
    rel = s / s[0]
    P = J.shape[1]
    kept = int((rel > NEAR_RTOL).sum())
    rank = int((rel > NEAR_EXACT_RTOL).sum())
    full = torch.cat([rel, rel.new_zeros(max(0, P - rel.numel()))])
    near = full[kept:rank]
    dropped = float(full[rank]) if rank < P else None
    return (P - rank, rank - kept, float(full[kept - 1]), dropped,
            float(near.min()) if near.numel() else None, float(near.max()) if near.numel() else None)
