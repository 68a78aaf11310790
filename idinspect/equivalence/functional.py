"""The functional half of ``verify``: both checkpoints loaded by stock transformers, same inputs.

Seeded random token ids go through each model in turn (one in memory at a time); the outputs
compared are the logits, or the last hidden states for models without a head. Causal LMs also
decode greedily for a fixed number of tokens: A decodes step by step through its key/value cache,
and every later run (A's rounding baseline, B) checks A's continuation in one teacher-forced pass
(:func:`_probe`), which decides "identical greedy continuation" exactly. Models are computed in
:func:`compute_dtype`: float64 for float32/float64 checkpoints, so that the comparison sees the
weights, not the arithmetic (transformers still computes some norms in float32: about 1e-7 of noise
on Llama-family models); float32 for bf16/fp16 ones, whose values it holds exactly and whose
tolerance (at least one rounding of their dtype) lies 1,000 to 100,000 times above float32's
arithmetic. A model whose copy in that dtype does not fit in memory is *streamed*: loaded in its
stored dtype, each module's own parameters widened for the duration of its forward only
(:func:`widen_per_module`), so the arithmetic is the same as in memory while the peak is one model in
its stored dtype plus the largest module widened. Only when even the stored model does not fit is it
loaded with accelerate's big-model loading (``device_map="auto"`` with disk offload) in float32,
which is exact for bf16/fp16/fp32 weights.
"""
from __future__ import annotations

import contextlib
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import IdinspectError
from .loading import BackgroundLoad, load_for_probe

#: Part of the available memory a model's copy in the compute dtype (float64, or float32 for bf16/fp16
#: checkpoints: :func:`compute_dtype`) may take before it is streamed instead.
MEMORY_FRACTION = 0.5
#: ``verify --memory``: auto (in memory when the compute-dtype copy fits MEMORY_FRACTION of the available
#: memory, else streamed, else offloaded), or one of the three routes by name.
MEMORY_MODES = ("auto", "memory", "stream", "offload")
#: Part of the available memory the stored model plus its largest module in float64 may take when
#: streamed, before offloading to disk.
STREAM_FRACTION = 0.85


@dataclass
class Outputs:
    """What one model computed on the probe inputs."""

    values: torch.Tensor                    # logits or last hidden states [B, T, *], float64
    decoded: torch.Tensor | None            # greedy continuation [B, n] for causal LMs
    kind: str                               # "logits" or "last_hidden_state"


@dataclass(frozen=True)
class LoadPlan:
    """How to load: in memory in ``compute_dtype``; ``streamed`` (stored dtype, ``compute_dtype`` module by module);
    or offloaded in float32 within ``max_memory`` bytes."""

    offload: bool
    compute_dtype: torch.dtype
    max_memory: int | None = None
    streamed: bool = False

    def describe(self) -> str:
        if self.offload:
            return "offloaded (accelerate device_map='auto', float32 compute)"
        kind = str(self.compute_dtype).removeprefix("torch.")
        if self.streamed:
            return f"streamed (stored dtype in memory, {kind} module by module)"
        return f"in memory, {kind}"


def probe_ids(config, tokens: int, decode: int, seed: int, batch: int = 2) -> torch.Tensor:
    """Seeded random token ids [batch, T], T = tokens, shortened to fit the position table; a model with
    a text tower (CLIP, SigLIP) takes them from its ``text_config``, a vision encoder (ViT) uses them
    only for the batch size."""
    config = getattr(config, "text_config", None) or config
    vocab = int(getattr(config, "vocab_size", None) or 2)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    T = tokens if limit is None else max(1, min(tokens, int(limit) - decode - 2))
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, T), generator=g)


def is_causal_lm(config) -> bool:
    archs = getattr(config, "architectures", None) or []
    return bool(archs) and archs[0].endswith(("ForCausalLM", "LMHeadModel"))


def compute_dtype(stored: torch.dtype) -> torch.dtype:
    """What verify's functional check computes in for a checkpoint B stored in ``stored``: float32 for
    bfloat16/float16 (judged against the rounding baseline, whose smallest tolerance is one rounding of
    that dtype, 7.8e-3 / 9.8e-4 relative, while float32 arithmetic moves the outputs by ~1e-6: 1,000
    to 100,000 times below; bf16/fp16 values are exact in float32), float64 for the others (judged by a
    rounding bound that float64 arithmetic keeps tight)."""
    return torch.float32 if stored in (torch.bfloat16, torch.float16) else torch.float64


def plan_loading(parameter_bytes: int, max_memory: int | None = None, stored_bytes: int | None = None,
                 largest_bytes: int = 0, mode: str = "auto", compute: torch.dtype = torch.float64) -> LoadPlan:
    """``mode`` "auto": in memory when the model's copy in ``compute`` (``parameter_bytes``: float64 or
    float32, :func:`compute_dtype`) fits in ``max_memory`` (default: :data:`MEMORY_FRACTION` of the
    available RAM); streamed when the stored model (``stored_bytes``) plus its largest tensor in
    ``compute`` (``largest_bytes``) fits (default: :data:`STREAM_FRACTION` of the available RAM;
    ``max_memory`` when given); else offloaded. "memory", "stream", "offload": that route."""
    if mode not in MEMORY_MODES:
        raise IdinspectError(f"--memory {mode!r}: choose one of {', '.join(MEMORY_MODES)}")
    budget = max_memory if max_memory is not None else int(MEMORY_FRACTION * available_memory())
    in_memory = LoadPlan(offload=False, compute_dtype=compute)
    streamed = LoadPlan(offload=False, compute_dtype=compute, streamed=True)
    offloaded = LoadPlan(offload=True, compute_dtype=torch.float32, max_memory=max(budget, 1))
    if mode != "auto":
        return {"memory": in_memory, "stream": streamed, "offload": offloaded}[mode]
    if parameter_bytes <= budget:
        return in_memory
    stream_budget = max_memory if max_memory is not None else int(STREAM_FRACTION * available_memory())
    if stored_bytes is not None and stored_bytes + largest_bytes <= stream_budget:
        return streamed
    return offloaded


def available_memory() -> int:
    """Available RAM in bytes (MemAvailable on Linux, else physical pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


#: Where torch's compilers keep their caches (``torchinductor_<user>``, triton's): inside a run they
#: are pointed at a folder idinspect owns and removes (:func:`private_compile_caches`).
COMPILE_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@contextlib.contextmanager
def private_compile_caches():
    """Point torch's compile caches at a temporary folder of ours for the block, then remove it
    (a cache folder the user chose through the environment is left alone)."""
    original = {k: os.environ.get(k) for k in COMPILE_CACHE_VARIABLES}
    folder = tempfile.mkdtemp(prefix="idinspect-compile-")
    for k, value in original.items():
        if not value:
            os.environ[k] = os.path.join(folder, k.split("_")[0].lower())
    try:
        yield
    finally:   # as before the block (torch writes the variable itself when it first asks for the folder)
        for k, value in original.items():
            if value:
                os.environ[k] = value
            else:
                os.environ.pop(k, None)
        shutil.rmtree(folder, ignore_errors=True)


def forward_threads() -> int:
    """torch's thread count for the transformers runs: 1 where the machine is already oversubscribed
    (as many other runnable tasks as usable CPUs, :func:`runnable_elsewhere`; the 1-minute load
    average above the usable CPUs where that cannot be read), else torch's own. On a shared 2-core
    machine at load 7, the 1B-shaped model's prompt pass took 2.7 s with one thread and 3.3-5.6 s with
    two, its 7 cached decoding steps 6.5 s against 9.7-12.3 s: each of a decoding step's many small
    kernels is a parallel region that waits for a descheduled thread. An idle machine keeps both
    threads. (The load average is not the rule where the runnable count is there: it counts verify's
    own two threads of the seconds before, and on an otherwise idle 2-core machine it crossed 2 and
    took the 1B verify from 11.9-12.6 s to 14.3 s.)"""
    from ..numerics.parallel import usable_cpus

    others = runnable_elsewhere()
    if others is not None:
        return 1 if others >= usable_cpus() else torch.get_num_threads()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return torch.get_num_threads()
    return 1 if load > usable_cpus() else torch.get_num_threads()


def runnable_elsewhere(samples: int = 5, interval_s: float = 0.004) -> float | None:
    """Tasks runnable on the machine now besides the caller: the median, over ``samples`` readings
    ``interval_s`` apart, of the running count in ``/proc/loadavg`` (which counts the reading thread)
    less one; None where that file cannot be read (not Linux)."""
    counts = []
    for k in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        counts.append(running - 1)
        if k + 1 < samples:
            time.sleep(interval_s)
    return float(statistics.median(counts))


@contextlib.contextmanager
def kernel_threads(n: int):
    """torch's intra-op thread count set to ``n`` for the block, then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_model(path: Path, ids: torch.Tensor, decode: int, plan: LoadPlan,
              edit: Callable[[torch.nn.Module], None] | None = None, follow: torch.Tensor | None = None) -> Outputs:
    """Load ``path`` with stock transformers, optionally ``edit`` its weights, run the probe (torch's
    compile caches in a folder of ours, :func:`private_compile_caches`). ``follow``: a greedy
    continuation [B, decode] of another model to check this one's against in one teacher-forced
    pass (:func:`_probe`)."""
    return run_model_editions(path, ids, decode, plan, [edit], follow=follow)[0]


def run_model_editions(path: Path, ids: torch.Tensor, decode: int, plan: LoadPlan,
                       edits: list[Callable[[torch.nn.Module], None] | None],
                       follow: torch.Tensor | None = None, preloaded: BackgroundLoad | None = None) -> list[Outputs]:
    """:func:`run_model` for several editions of one checkpoint, loaded once: the probe runs after each
    ``edit`` in turn (None: as loaded), each edit applied on top of the ones before (verify's rounding
    baseline is A's weights rounded, run after A itself: one load instead of two). The first edition
    decodes on its own (or follows ``follow``); every later one follows the first edition's continuation.
    ``preloaded``: the same checkpoint already loading on a background thread (:class:`.loading.BackgroundLoad`)."""
    with private_compile_caches(), kernel_threads(forward_threads()):
        return _run_model(path, ids, decode, plan, edits, follow, preloaded)


def _run_model(path: Path, ids: torch.Tensor, decode: int, plan: LoadPlan,
               edits: list[Callable[[torch.nn.Module], None] | None],
               follow: torch.Tensor | None = None, preloaded: BackgroundLoad | None = None) -> list[Outputs]:
    offload_dir = None
    if plan.offload:
        offload_dir = tempfile.TemporaryDirectory(prefix="idinspect-offload-")
    try:
        if preloaded is not None:
            config, model = preloaded.take()
        else:
            config, model = load_for_probe(path, plan, offload_dir.name if offload_dir is not None else None)
        results = []
        for edit in edits:
            if edit is not None:
                edit(model)
            hooks = widen_per_module(model, plan.compute_dtype) if plan.streamed else []
            with torch.no_grad():
                results.append(_probe(model, config, ids, decode, plan.compute_dtype,
                                      follow if not results else results[0].decoded))
            for hook in hooks:
                hook.remove()
        del model
        gc.collect()
        return results
    finally:
        if offload_dir is not None:
            offload_dir.cleanup()


def _probe(model, config, ids: torch.Tensor, decode: int, dtype: torch.dtype,
           follow: torch.Tensor | None = None) -> Outputs:
    """The outputs compared and, for a causal LM, the greedy continuation. A decoder-only model with a
    key/value cache runs the prompt once: that pass's logits are both the compared values and the first
    decoding step (a second, cache-less pass over the prompt gave the same logits).

    ``follow`` (decoder-only models with a cache): another model's greedy continuation c [B, n] of the
    same prompt, checked in one teacher-forced pass over prompt + c[:, :n-1] instead of n decoding
    steps. This model's greedy continuation is c exactly when its argmax at positions T-1 .. T+n-2
    reproduces c (by induction over the steps: each step sees the same prefix), so ``decoded`` is c
    then; otherwise the model decodes on its own (its continuation differs, and the record shows it).
    The compared values are that pass's logits on the prompt positions (the causal mask keeps the
    continuation out of them)."""
    if is_causal_lm(config) and decode > 0 and _cached_path(model, ids, dtype):
        if follow is not None and follow.shape == (ids.shape[0], decode):
            seq = torch.cat([ids, follow[:, :-1]], dim=1)
            logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False).logits
            T = ids.shape[1]
            same = torch.equal(logits[:, T - 1:].argmax(dim=-1), follow)
            decoded = follow.clone() if same else _greedy_cached(model, ids, decode)
            return Outputs(logits[:, :T].to(torch.float64), decoded, "logits")
        first = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        return Outputs(first.logits.to(torch.float64), _greedy_cached(model, ids, decode, first), "logits")
    values, kind = _forward(model, ids, dtype)
    decoded = _greedy(model, ids, decode, dtype) if is_causal_lm(config) and decode > 0 else None
    return Outputs(values.to(torch.float64), decoded, kind)


def widen_per_module(model: torch.nn.Module, dtype: torch.dtype) -> list:
    """Hooks that give each block's floating parameters ``dtype`` for the duration of its forward
    and restore the stored tensors after it (returns the hook handles; ``remove()`` them).

    A block is an entry of a ``ModuleList`` (a decoder or encoder layer: widened whole, since its
    modules may look at each other's weights, e.g. T5's feed-forward casts to its output
    projection's dtype); outside the blocks, each module's own parameters (embeddings, final norm,
    head). So the model computes in ``dtype`` while holding one block's (or the embedding's)
    widened copy beside the stored weights. A parameter shared by two modules (tied embeddings)
    is widened by each in turn.
    """
    blocks = {id(m) for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) for m in lst}
    handles: list = []

    def hook(module: torch.nn.Module, recurse: bool) -> None:
        own = [p for p in module.parameters(recurse=recurse) if p.is_floating_point() and p.dtype != dtype]
        if not own:
            return

        def widen(mod, args, _own=own):
            mod._idinspect_stored = [p.data for p in _own]
            for p in _own:
                p.data = p.data.to(dtype)

        def restore(mod, args, output, _own=own):
            for p, data in zip(_own, mod.__dict__.pop("_idinspect_stored", [])):
                p.data = data

        handles.append(module.register_forward_pre_hook(widen))
        handles.append(module.register_forward_hook(restore))

    def visit(module: torch.nn.Module) -> None:
        if id(module) in blocks:
            hook(module, recurse=True)
            return
        if type(module) is torch.nn.Embedding and module.max_norm is None:
            # a lookup copies rows: widening the rows it returns is exact, the table stays stored
            handles.append(module.register_forward_hook(lambda mod, args, out: out.to(dtype)))
            return
        if type(module) is torch.nn.Linear and module.weight.numel() > LINEAR_CHUNK_ELEMENTS:
            handles.append(_chunked_linear(module, dtype))
            return
        hook(module, recurse=False)
        for child in module.children():
            visit(child)

    visit(model)
    return handles


#: A Linear outside the blocks with more weights than this (a vocabulary head) is computed in
#: row chunks of this many weights, widened chunk by chunk (256 MB of float64 at a time).
LINEAR_CHUNK_ELEMENTS = 2**25


class _Restore:
    """A handle that puts a module's own ``forward`` back (``remove()``, like a hook handle)."""

    def __init__(self, module: torch.nn.Module):
        self.module = module

    def remove(self) -> None:
        self.module.__dict__.pop("forward", None)


def _chunked_linear(module: torch.nn.Linear, dtype: torch.dtype) -> _Restore:
    """Make ``module`` compute x W^T + b in ``dtype`` from row chunks of its stored weight."""
    W, b = module.weight, module.bias
    rows = max(1, LINEAR_CHUNK_ELEMENTS // max(1, W.shape[1]))

    def forward(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(*x.shape[:-1], W.shape[0], dtype=dtype, device=x.device)
        x = x.to(dtype)
        for i in range(0, W.shape[0], rows):
            out[..., i:i + rows] = x @ W[i:i + rows].to(dtype).T
            if b is not None:
                out[..., i:i + rows] += b[i:i + rows].to(dtype)
        return out

    module.forward = forward
    return _Restore(module)


def _inputs(model, ids: torch.Tensor, dtype: torch.dtype | None = None) -> dict:
    """Forward arguments for ``ids``: encoder states, decoder tokens or speech features where the model
    needs them (seeded, so both models of a comparison see the same; floating ones in ``dtype``,
    default the model's), plus the all-ones mask."""
    from ..adapters.example_inputs import example_inputs

    kw = example_inputs(model, ids, torch.Generator().manual_seed(0))
    kw = {k: (v.to(dtype or model.dtype) if v.is_floating_point() else v) for k, v in kw.items()}
    if "input_ids" in kw:
        kw["attention_mask"] = torch.ones_like(ids)
    return kw


def _forward(model, ids: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, str]:
    out = model(**_inputs(model, ids, dtype), use_cache=False)
    for kind in ("logits", "logits_per_image"):      # logits_per_image: CLIP's and SigLIP's image-text logits
        if getattr(out, kind, None) is not None:
            return getattr(out, kind), kind
    return out.last_hidden_state, "last_hidden_state"


def _greedy(model, ids: torch.Tensor, n: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """n greedy tokens. A decoder-only model decodes with its key/value cache (transformers' own
    inference path: each step runs one new token, not the whole sequence again); a decoder that
    cross-attends, or a model without a cache, recomputes the whole sequence each step and keeps the
    same encoder states throughout."""
    import inspect

    if _cached_path(model, ids, dtype):
        return _greedy_cached(model, ids, n)
    fixed = {k: v for k, v in _inputs(model, ids, dtype).items() if k not in ("input_ids", "attention_mask")}
    seq = ids
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        fixed["logits_to_keep"] = 1      # the head on the last position only: the same logits, 1/T of the work
    for _ in range(n):
        logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False, **fixed).logits
        seq = torch.cat([seq, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    return seq[:, ids.shape[1]:]


def _cached_path(model, ids: torch.Tensor, dtype: torch.dtype | None) -> bool:
    """Does the model decode through its key/value cache from token ids alone (a decoder-only model that
    needs no encoder states, images or features beside them)?"""
    fixed = {k: v for k, v in _inputs(model, ids, dtype).items() if k not in ("input_ids", "attention_mask")}
    return not fixed and getattr(model, "_supports_cache_class", True) and not model.config.is_encoder_decoder


def _greedy_cached(model, ids: torch.Tensor, n: int, first=None) -> torch.Tensor:
    """n greedy tokens through the model's key/value cache (``first``: the prompt's pass, if already run
    with ``use_cache=True``)."""
    import inspect

    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = first if first is not None else model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    seq = ids
    for step in range(n):
        token = out.logits[:, -1].argmax(dim=-1, keepdim=True)
        seq = torch.cat([seq, token], dim=1)
        if step + 1 < n:
            cache = getattr(out, "cache", None) or out.past_key_values
            out = model(input_ids=token, attention_mask=torch.ones_like(seq), use_cache=True, **{name: cache})
    return seq[:, ids.shape[1]:]


def map_names(names: list[str], state_keys: list[str]) -> dict[str, str]:
    """Checkpoint tensor names -> the loaded module's parameter names (prefixes may differ)."""
    keys = set(state_keys)
    out = {}
    for name in names:
        if name in keys:
            out[name] = name
            continue
        hits = [k for k in state_keys if k.endswith("." + name) or name.endswith("." + k)]
        if len(hits) != 1:
            raise IdinspectError(f"cannot find checkpoint tensor {name} among the loaded model's parameters")
        out[name] = hits[0]
    return out


def loaded_names(names: list[str], state_keys: list[str]) -> list[str]:
    """The loaded module's parameter names of those checkpoint tensors ``names`` that it holds (as
    :func:`map_names`; a name without exactly one match, e.g. a buffer, is left out)."""
    keys = set(state_keys)
    out = []
    for name in names:
        hits = [name] if name in keys else [k for k in state_keys if k.endswith("." + name) or name.endswith("." + k)]
        if len(hits) == 1:
            out.append(hits[0])
    return out


def apply_tensors(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Overwrite parameters of ``model`` with checkpoint-named ``tensors`` (cast to each one's dtype)."""
    params = dict(model.named_parameters())
    names = map_names(list(tensors), list(params))
    with torch.no_grad():
        for ckpt_name, tensor in tensors.items():
            p = params[names[ckpt_name]]
            p.copy_(tensor.to(p.dtype))


def round_parameters(model: torch.nn.Module, dtype: torch.dtype, skip: set[str]) -> None:
    """Round every floating parameter not in ``skip`` to ``dtype`` (kept in its own dtype)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name not in skip and p.is_floating_point():
                p.copy_(p.to(dtype).to(p.dtype))
