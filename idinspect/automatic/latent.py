"""Multi-head latent attention (MLA, idinspect's second canonical form) found by what the module does,
not by its names (:mod:`idinspect.layer.latent_layer` for the form).

The trace (:func:`.trace.find_roles`) sees, among the modules reading the layer's input, one whose
every output acts as a key (through a norm, its outputs reach keys and values non-linearly: the
key/value latent with the shared rotary key) and one whose outputs act as queries. Then, on the twin:

* the **key/value latent** W_KVA: the outputs of that module whose move moves the input of a later
  affine module (W_KB|W_VB, reading the normalised latent); its other outputs are the **rotary key**
  W_KR, which must follow the latent ([latent r | rotary e]);
* the latent **norms**: the parametrised module whose input is the latent (the query latent) and whose
  output is what the up-projection reads;
* a **query latent** where a later affine module's input moves when the query module's output moves
  (W_QA, its norm, W_QB), else queries straight from x (W_Q);
* W_KB|W_VB's outputs per head: keys (moving one moves z non-linearly) then values (linearly),
  [n | v] for each of the H heads; the queries per head [n | e].

Each width (query latent r_q, latent r, n, e, v) is tied to the setting that counts it by changing each
integer setting equal to it on a twin and seeing which one changes that width alone (never by name).
Anything else is refused naming what was found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..adapters.inferred import LatentModules
from ..errors import IdinspectError
from .trace import LINEAR_RTOL, Trace, _moved, _scale, affine_kind, first_calls, record

#: The widths of the form, by the name the shape of :func:`idinspect.forms.latent.prove.latent_twin_shape` uses.
WIDTHS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


@dataclass(frozen=True)
class _Seen:
    """What the trace showed of one latent block (module paths relative to the layer)."""

    q: str                  # the query module reading x: W_Q, or W_QA where a query latent follows
    q_b: str | None
    kv_a: str
    kv_b: str
    r: int                  # latent outputs of kv_a (the rest is the rotary key)
    n: int
    v: int


def _move(out: torch.Tensor, unit: int | None, amount: float, g: torch.Generator) -> torch.Tensor:
    """A move of ``out`` ([B, T, units], or [B, 1, T, units]: a latent viewed as one head) at
    position (0, 0): one unit by ``amount``, or (unit None) every unit by a N(0, amount^2) vector."""
    delta = torch.zeros_like(out)
    flat = delta.view(out.shape[0], -1, out.shape[-1])
    if unit is None:
        flat[0, 0] = amount * torch.randn(out.shape[-1], generator=g, dtype=out.dtype)
    else:
        flat[0, 0, unit] = amount
    return delta


def _moves(hf, inputs: dict, t: Trace, path: str, targets: list[str], unit: int | None, g: torch.Generator) -> list[str]:
    """The modules of ``targets`` whose input moves (anywhere) when ``path``'s output moves at (0, 0)."""
    ins, _, _ = record(hf, inputs, t.layer_path, (path, _move(t.outputs[path], unit, 1.0, g)))
    return [p for p in targets if _moved(t.inputs[p], ins[p], _scale(t.inputs[p])).any()]


def _unit_kinds(hf, inputs: dict, t: Trace, path: str, o_path: str, g: torch.Generator) -> list[str]:
    """Per output of ``path``: "k" where moving it moves W_O's input at other positions non-linearly,
    "v" where linearly, "-" where not at other positions."""
    z0 = t.inputs[o_path]
    scale = _scale(z0)
    out = []
    for unit in range(t.outputs[path].shape[-1]):
        a = record(hf, inputs, t.layer_path, (path, _move(t.outputs[path], unit, 1.0, g)))[0][o_path]
        if not (_moved(z0, a, scale)[0, 1:].any() or _moved(z0, a, scale)[1:].any()):
            out.append("-")
            continue
        b = record(hf, inputs, t.layer_path, (path, _move(t.outputs[path], unit, 2.0, g)))[0][o_path]
        linear = float((b - z0 - 2 * (a - z0)).abs().max()) <= LINEAR_RTOL * float((a - z0).abs().max())
        out.append("v" if linear else "k")
    return out


def seen_latent(hf, inputs: dict, t: Trace, o_path: str, roles: dict[str, list[str]], H: int) -> _Seen | None:
    """The latent block's modules and widths as the trace shows them; None where the roles are not the
    latent form's (one module of keys only, one of queries only, a later module reading the first)."""
    keys = [p for p, u in roles.items() if set(u) == {"k"}]
    queries = [p for p, u in roles.items() if set(u) == {"q"}]
    if len(roles) != 2 or len(keys) != 1 or len(queries) != 1:
        return None
    kv_a, q = keys[0], queries[0]
    g = torch.Generator().manual_seed(11)
    later = [p for p in t.order[:t.order.index(o_path)] if p not in roles]
    reads_kv = _moves(hf, inputs, t, kv_a, later, None, g)
    if len(reads_kv) != 1:
        return None
    kv_b = reads_kv[0]
    reads_q = [p for p in _moves(hf, inputs, t, q, later, None, g) if p != kv_b]
    q_b = reads_q[0] if len(reads_q) == 1 else None
    latent = [bool(_moves(hf, inputs, t, kv_a, [kv_b], u, g)) for u in range(t.outputs[kv_a].shape[-1])]
    r = sum(latent)
    found = {"kv_a": kv_a, "kv_b": kv_b, "q": q, "q_b": q_b}
    if r == 0 or r == len(latent) or latent != [True] * r + [False] * (len(latent) - r):
        raise IdinspectError(f"--auto: {kv_a} holds a key/value latent and a rotary key, but its outputs are not "
                             f"[latent | rotary key] ({''.join('L' if x else 'R' for x in latent)}; found {found}); "
                             "an adapter must be written by hand")
    kinds = _unit_kinds(hf, inputs, t, kv_b, o_path, g)
    width = len(kinds) // H
    n = kinds[:width].count("k")
    if len(kinds) % H or kinds != (["k"] * n + ["v"] * (width - n)) * H or n == 0 or n == width:
        raise IdinspectError(f"--auto: {kv_b} expands the latent into keys and values, but not as [keys | values] "
                             f"per head for {H} heads ({''.join(kinds)}; found {found}); an adapter must be written by hand")
    return _Seen(q, q_b, kv_a, kv_b, r, n, width - n)


def latent_norm(hf, inputs: dict, t: Trace, module: torch.nn.Module, attention: str, source: torch.Tensor,
                reader: str) -> tuple[str, float]:
    """(path relative to the layer, eps) of the parametrised module of ``module`` (the attention module)
    whose input is ``source`` and whose output is the input of the affine module ``reader``."""
    norms = {p: m for p, m in module.named_modules()
             if p and affine_kind(m) is None and list(m.parameters(recurse=False))}
    seen = first_calls(hf, inputs, norms)
    target = t.inputs[reader]
    for path, (x, y) in seen.items():
        # compared flat: the latent may be viewed as one head ([B, 1, T, r]) between the norm and its reader
        if x is not None and x.numel() == source.numel() and torch.equal(x.reshape(-1), source.reshape(-1)) \
                and y.numel() == target.numel() and torch.equal(y.reshape(-1), target.reshape(-1)):
            m = module.get_submodule(path)
            eps = next((float(getattr(m, a)) for a in ("variance_epsilon", "eps", "epsilon") if hasattr(m, a)), None)
            if eps is None:
                raise IdinspectError(f"--auto: the latent norm {path} states no epsilon; an adapter must be written by hand")
            return (f"{attention}.{path}" if attention else path), eps
    raise IdinspectError(f"--auto: no norm module of the attention module turns the latent into {reader}'s input; "
                         "an adapter must be written by hand")


def widths_of(hf, layer_path: str, m: LatentModules, H: int) -> dict[str, int]:
    """The block's widths on a live model, read off its modules (found by the trace) by their roles."""
    layer = hf.get_submodule(layer_path)

    def out(path: str) -> int:
        return int(layer.get_submodule(path).weight.shape[0])

    r = int(layer.get_submodule(m.kv_b).weight.shape[1])
    v = int(layer.get_submodule(m.o).weight.shape[1]) // H
    nv = out(m.kv_b) // H
    return {"q_lora_rank": out(m.q_a) if m.q_a else 0, "kv_lora_rank": r, "qk_nope_head_dim": nv - v,
            "qk_rope_head_dim": out(m.kv_a) - r, "v_head_dim": v}


def width_settings(hf, layer_path: str, m: LatentModules, H: int, build: Callable[[dict], object]) -> dict[str, str]:
    """{width: the setting that counts it} (see the module docstring); refused where no setting, or
    more than one, changes a width alone."""
    widths = widths_of(hf, layer_path, m, H)
    settings = {k: v for k, v in hf.config.to_dict().items() if isinstance(v, int) and not isinstance(v, bool)}
    out = {}
    for name, w in widths.items():
        if name == "q_lora_rank" and not m.q_a:
            continue
        counting = []
        for key in (k for k, v in settings.items() if v == w and k != "num_hidden_layers"):
            try:
                other = widths_of(build({key: w + 2}), layer_path, m, H)
            except Exception:  # noqa: BLE001 - a setting the config class or the model will not take at another value
                continue
            if other == {**widths, name: w + 2}:
                counting.append(key)
        if len(counting) != 1:
            raise IdinspectError(f"--auto: {'no setting' if not counting else 'several settings (' + ', '.join(counting) + ')'}"
                                 f" alone counts the latent attention's {name} ({w} on the twin); an adapter must be "
                                 "written by hand")
        out[name] = counting[0]
    return out


def latent_modules(hf, inputs: dict, t: Trace, o_path: str, roles: dict[str, list[str]], attention: str,
                   module: torch.nn.Module, build: Callable[[dict], object] | None, cfg=None) -> LatentModules | None:
    """The :class:`LatentModules` of the traced block, or None where it is not latent attention (``cfg``:
    the settings of the traced model or tower, default ``hf.config``)."""
    H = int((cfg or hf.config).num_attention_heads)
    seen = seen_latent(hf, inputs, t, o_path, roles, H)
    if seen is None:
        return None
    if build is None:
        raise IdinspectError("--auto: latent attention in a stack of an encoder-decoder; an adapter must be written by hand")
    a = t.affine
    r = seen.r
    kv_norm, eps_kv = latent_norm(hf, inputs, t, module, attention, t.outputs[seen.kv_a][..., :r], seen.kv_b)
    q_norm, eps_q = (latent_norm(hf, inputs, t, module, attention, t.outputs[seen.q], seen.q_b)
                     if seen.q_b else (None, None))
    biased = [p for p in (seen.q_b, seen.kv_b) + (() if seen.q_b else (seen.q,)) if p and a[p].bias]
    if biased or any(a[p].conv1d for p in (seen.q, seen.kv_a, seen.kv_b, o_path) if p):
        raise IdinspectError(f"--auto: latent attention with biases on {', '.join(biased) or 'Conv1D modules'}, which "
                             "idinspect's latent form does not hold; an adapter must be written by hand")
    m = LatentModules(q=None if seen.q_b else seen.q, q_a=seen.q if seen.q_b else None, q_norm=q_norm, q_b=seen.q_b,
                      kv_a=seen.kv_a, kv_norm=kv_norm, kv_b=seen.kv_b, o=o_path,
                      q_a_bias=bool(seen.q_b and a[seen.q].bias), kv_a_bias=a[seen.kv_a].bias, o_bias=a[o_path].bias,
                      eps_q=eps_q, eps_kv=eps_kv, settings=())
    keys = width_settings(hf, t.layer_path, m, H, build)
    widths = widths_of(hf, t.layer_path, m, H)
    if (widths["qk_nope_head_dim"], widths["v_head_dim"]) != (seen.n, seen.v):
        raise IdinspectError(f"--auto: {seen.kv_b}'s keys and values per head ({seen.n}, {seen.v}) differ from the "
                             f"widths its modules hold ({widths}); an adapter must be written by hand")
    return LatentModules(**{**m.__dict__, "settings": tuple(sorted(keys.items()))})


__all__ = ["WIDTHS", "latent_modules", "seen_latent", "width_settings", "widths_of"]
