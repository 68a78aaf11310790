"""Which stored modules play W_Q, W_K, W_V and W_O, found by what they do in a live model, not by
their names or shapes.

On a tiny float64 twin (random weights) one forward pass is recorded, then the output of one module
(or one output unit of it) is moved at a single position p = (sequence 0, token 0) and the forward
pass repeated. Attention is the only place where positions exchange information, and its three
inputs leave distinct marks on the input of the output projection, z = softmax(S) V:

* a **value** unit at p moves z at other positions, and linearly (z is linear in V for fixed scores);
* a **key** unit at p moves z at other positions too (every query scores key p), but not linearly
  (through the softmax);
* a **query** unit moves z at its own position only (query p sets row p of the scores alone); it is
  moved at the last token, since under a causal mask the query at token 0 scores one key only.

The output projection W_O is the first affine module (in call order) whose input moves at other
positions when a value at p moves. A module whose units carry several roles is a fused projection;
its rows per role are matched against the fused layouts idinspect knows
(:func:`adapters.layout.fused_rows`). Anything that does not fit is refused, naming what was found.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import IdinspectError

#: A move counts where it changes a value by more than this (relative to the values' scale), and a
#: response is linear where doubling the move doubles it to within LINEAR_RTOL.
MOVE_RTOL = 1e-9
LINEAR_RTOL = 1e-8


@dataclass(frozen=True)
class Affine:
    """An affine module of the traced layer: ``path`` relative to the layer, nn.Linear or Conv1D."""

    path: str
    conv1d: bool
    bias: bool


@dataclass
class Trace:
    """What one recorded forward pass of layer 0 showed."""

    layer_container: str             # relative to the base model
    layer_path: str                  # from the model's root
    affine: dict[str, Affine]
    order: list[str]                 # affine modules in call order
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]


def affine_kind(module: torch.nn.Module) -> str | None:
    """"linear" (nn.Linear, y = x W^T + b), "conv1d" (transformers' Conv1D, y = x W + b) or None."""
    if isinstance(module, torch.nn.Linear):
        return "linear"
    if type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None and module.weight.dim() == 2:
        return "conv1d"
    return None


def layer_lists(hf, root: str = "", n: int | None = None) -> list[tuple[str, torch.nn.ModuleList]]:
    """(path from the root, module) of each of the model's lists of layers (one stack, or an encoder's
    and a decoder's), in the model's order: the outermost ModuleLists whose entries hold affine modules,
    one with an entry per ``config.num_hidden_layers`` (``n`` where given); of the module at ``root``
    where given (a tower)."""
    n = int(hf.config.num_hidden_layers) if n is None else n
    base = hf.get_submodule(root) if root else hf
    stacks = [(f"{root}.{path}" if root else path, module) for path, module in base.named_modules()
              if isinstance(module, torch.nn.ModuleList) and len(module) > 0
              and all(sum(affine_kind(m) is not None for m in child.modules()) >= 2 for child in module)]
    stacks = [(p, m) for p, m in stacks if not any(p != q and p.startswith(q + ".") for q, _ in stacks)]
    if not any(len(m) == n for _, m in stacks):
        raise IdinspectError(f"--auto: no list of {n} layers with projections in {type(base).__name__}; "
                             "an adapter must be written by hand (docs/adding-a-family.md)")
    if len(stacks) > 2:
        raise IdinspectError(f"--auto: {type(base).__name__} has {len(stacks)} stacks of layers "
                             f"({', '.join(p for p, _ in stacks)}); --auto reads one stack, or an encoder's and a "
                             "decoder's; an adapter must be written by hand for the others (docs/adding-a-family.md)")
    return stacks


def layer_list(hf) -> tuple[str, torch.nn.ModuleList]:
    """The model's one list of layers (:func:`layer_lists`); refused where it has two."""
    stacks = layer_lists(hf)
    if len(stacks) > 1:
        raise IdinspectError(f"--auto: {type(hf).__name__} has {len(stacks)} stacks of layers "
                             f"({', '.join(p for p, _ in stacks)}); expected one")
    return stacks[0]


def record(hf, inputs: dict, layer_path: str, move: tuple[str, torch.Tensor] | None = None
           ) -> tuple[dict, dict, list[str]]:
    """One forward pass: every affine module of the layer's (input, output) and the call order;
    ``move = (path, delta)`` adds ``delta`` (shaped like that module's output) to its output."""
    layer = hf.get_submodule(layer_path)
    ins: dict[str, torch.Tensor] = {}
    outs: dict[str, torch.Tensor] = {}
    order: list[str] = []
    handles = []
    for path, module in layer.named_modules():
        if affine_kind(module) is None:
            continue

        def hook(mod, args, output, path=path):
            if not isinstance(output, torch.Tensor):     # a Linear subclass with more to say (Llama 4's router)
                return output
            if path not in ins:
                order.append(path)
                ins[path] = args[0].detach().clone()
            if move is not None and move[0] == path:
                output = output + move[1]
            if path not in outs:
                outs[path] = output.detach().clone()
            return output

        handles.append(module.register_forward_hook(hook))
    forward_with(hf, inputs, handles)
    return ins, outs, order


def first_calls(hf, inputs: dict, modules: dict[str, torch.nn.Module]) -> dict[str, tuple]:
    """One forward pass: the first (positional input or None, output) of each module in ``modules``."""
    seen: dict[str, tuple] = {}
    handles = []
    for name, module in modules.items():
        def keep(mod, args, out, name=name) -> None:
            out = out[0] if isinstance(out, tuple) else out
            seen.setdefault(name, (args[0].detach().clone() if args else None, out.detach().clone()))

        handles.append(module.register_forward_hook(keep))
    forward_with(hf, inputs, handles)
    return seen


def forward_with(hf, inputs: dict, handles: list) -> None:
    """One forward pass of ``hf`` on ``inputs`` (no gradients, no cache), then the hooks ``handles`` removed."""
    try:
        with torch.no_grad():
            hf(**inputs, use_cache=False)
    finally:
        for h in handles:
            h.remove()


def trace(hf, inputs: dict, container: str | None = None, index: int = 0) -> Trace:
    """Record layer ``index`` (0 unless given) of ``hf``'s list of layers at ``container`` (path from the
    root; None: its one list) once (see :func:`record`)."""
    container = container if container is not None else layer_list(hf)[0]
    layer_path = f"{container}.{index}"
    layer = hf.get_submodule(layer_path)
    ins, outs, order = record(hf, inputs, layer_path)
    affine = {path: Affine(path, affine_kind(m) == "conv1d", getattr(m, "bias", None) is not None)
              for path, m in layer.named_modules() if affine_kind(m) is not None and path in outs}
    prefix = getattr(hf, "base_model_prefix", "")
    relative = container[len(prefix) + 1:] if prefix and container.startswith(prefix + ".") else container
    return Trace(relative, layer_path, affine, order, ins, outs)


def after_output(hf, inputs: dict, t: Trace, module: torch.nn.Module, attention: str, o_path: str,
                 extra: list[str]) -> list[str]:
    """The parameters of ``extra`` (relative to the layer) whose module reads W_O's output: moving the
    output of ``o_path`` moves that module's input. Such a module (a norm after the residual add inside
    the attention module) acts on the block's output, not inside the block."""
    pre = f"{attention}." if attention else ""
    owners = {e: e[len(pre):].rsplit(".", 1)[0] for e in extra if "." in e[len(pre):]}
    modules = {o: module.get_submodule(o) for o in set(owners.values())}
    if not modules:
        return []
    before = first_calls(hf, inputs, modules)
    out = t.outputs[o_path]
    delta = torch.randn(out.shape[1:], generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    handle = hf.get_submodule(f"{t.layer_path}.{o_path}").register_forward_hook(lambda m, a, y: y + delta)
    try:
        after = first_calls(hf, inputs, modules)
    finally:
        handle.remove()
    return [e for e, o in owners.items() if o in before and before[o][0] is not None
            and not torch.equal(before[o][0], after[o][0])]


def _moved(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    """Positions [B, T] where b differs from a by more than MOVE_RTOL * scale."""
    diff = (a - b).abs().reshape(a.shape[0], a.shape[1], -1).amax(-1)
    return diff > MOVE_RTOL * scale


def _unit_move(out: torch.Tensor, unit: int | None, amount: float, generator: torch.Generator,
               token: int = 0) -> torch.Tensor:
    """A move of ``out`` [B, T, n] at position (0, token): one unit by ``amount``, or (unit None) every
    unit by a N(0, amount^2) vector."""
    delta = torch.zeros_like(out)
    if unit is None:
        delta[0, token] = amount * torch.randn(out.shape[-1], generator=generator, dtype=out.dtype)
    else:
        delta[0, token, unit] = amount
    return delta


def find_roles(hf, inputs: dict, t: Trace, after: str | None = None, every: bool = False
               ) -> tuple[str, dict[str, list[str]]] | None:
    """(W_O's module, {module: role of each output unit}) of the first attention block of layer 0 after
    module ``after`` in call order (None: the layer's first block), roles "q", "k", "v" (see the module
    docstring). The first block's projections read what its first mixing module reads; a later block's
    (a cross-attention block, whose keys and values read the encoder's states) are the modules between
    the previous block's W_O and its own; with ``every``, those before its W_O (a layer whose one block is
    a cross-attention block: its queries read the layer's input, its keys and values other states).
    Raises naming what was found where the first block's marks do not fit; None where there is no block
    after ``after``."""
    g = torch.Generator().manual_seed(7)
    start = 0 if after is None else t.order.index(after) + 1
    first = None
    for path in t.order[start:]:
        out = t.outputs[path]
        if out.dim() != 3:
            continue
        ins, _, _ = record(hf, inputs, t.layer_path, (path, _unit_move(out, None, 1.0, g)))
        later = [p for p in t.order if p != path and t.order.index(p) > t.order.index(path)]
        if any(_moved(t.inputs[p], ins[p], _scale(t.inputs[p]))[0, 1:].any() for p in later):
            first = path
            break     # the first module whose move reaches other positions feeds attention
    if first is None:
        if after is not None:
            return None
        raise IdinspectError("--auto: no projection of layer 0 moves information between positions: no attention "
                             "found; an adapter must be written by hand (docs/adding-a-family.md)")
    o_path = _output_projection(hf, inputs, t, first, g)
    if after is None and not every:
        before = t.order[:t.order.index(o_path)]
        source = t.inputs[first]
        candidates = [p for p in before if t.inputs[p].shape == source.shape and torch.equal(t.inputs[p], source)]
    else:
        candidates = t.order[start:t.order.index(o_path)]
    roles: dict[str, list[str]] = {}
    z0 = t.inputs[o_path]
    scale = _scale(z0)
    for path in candidates:
        out = t.outputs[path]
        if out.dim() != 3:
            continue
        units = []
        for unit in range(out.shape[-1]):
            a = record(hf, inputs, t.layer_path, (path, _unit_move(out, unit, 1.0, g)))[0][o_path]
            moved = _moved(z0, a, scale)
            if moved[0, 1:].any() or moved[1:].any():
                b = record(hf, inputs, t.layer_path, (path, _unit_move(out, unit, 2.0, g)))[0][o_path]
                linear = float((b - z0 - 2 * (a - z0)).abs().max()) <= LINEAR_RTOL * float((a - z0).abs().max())
                units.append("v" if linear else "k")
            else:    # a query at token 0 of a causal model scores one key: its move shows at the last token
                last = out.shape[1] - 1
                c = record(hf, inputs, t.layer_path, (path, _unit_move(out, unit, 1.0, g, last)))[0][o_path]
                units.append("q" if _moved(z0, c, scale)[0, last] else "-")
        if set(units) != {"-"}:
            roles[path] = units
    return o_path, roles


def _output_projection(hf, inputs: dict, t: Trace, mixer: str, g: torch.Generator) -> str:
    """The first affine module after ``mixer`` (in call order) whose input moves at other positions
    when ``mixer``'s output moves at (0, 0): W_O, reading z = softmax(S) V (keys and values both reach
    it first; the projections read the layer's input, which the move does not change)."""
    out = t.outputs[mixer]
    ins, _, _ = record(hf, inputs, t.layer_path, (mixer, _unit_move(out, None, 1.0, g)))
    for path in t.order[t.order.index(mixer) + 1:]:
        z0 = t.inputs[path]
        if _moved(z0, ins[path], _scale(z0))[0, 1:].any():
            return path
    raise IdinspectError(f"--auto: {mixer} feeds attention but no later projection of the layer reads its "
                         "result; an adapter must be written by hand (docs/adding-a-family.md)")


def _scale(x: torch.Tensor) -> float:
    return max(float(x.abs().max()), 1e-300)


__all__ = ["Affine", "Trace", "affine_kind", "after_output", "find_roles", "first_calls", "layer_list", "layer_lists", "record",
           "trace"]
