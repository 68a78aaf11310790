"""From a traced twin to a :class:`~adapters.inferred.FoundLayout`: the roles' modules and fused
layout (:mod:`.trace`), a cross-attention block after the self-attention block, then the settings
that are not visible in one module (positional scheme and its per-layer variants, ALiBi, a relative
table, score scale law, causality, window, soft cap, q/k norm), chosen as the one combination whose
canonical form reproduces the live module's output on every layer of the twin's stack to
:data:`~idinspect.testing.REFERENCE_RTOL`. Every fact is a law of the config (a setting's name, a
per-layer setting, d_k^-1/2), never one of the twin's numbers, so it holds for the model itself."""

from __future__ import annotations

import itertools
import math
import re

import torch

from ..adapters.inferred import (
    ROTARY_DIM_KEYS,
    FoundCross,
    FoundLayout,
    FoundNorm,
)
from ..adapters.layout import Projection, fused_rows
from ..errors import IdinspectError
from .groups import Groups
from .latent import latent_modules
from .tables import ModelTable, model_table
from .trace import Trace, affine_kind, after_output, find_roles, first_calls, trace

#: The largest relative-position distance tried (the settle's sequences are one token longer).
MAX_RELATIVE_DISTANCE = 512
#: Config keys that may hold a soft cap on the attention scores (tried, not trusted: the reproduction decides).
SOFTCAP_KEYS = ("attn_logit_softcapping", "attention_logit_softcapping", "logit_softcap")


def sizes(cfg) -> tuple[int, int, int, int]:
    """(H, G, d_k, d) of a transformers config, under transformers' standard names."""
    H, d = int(cfg.num_attention_heads), int(cfg.hidden_size)
    G = int(getattr(cfg, "num_key_value_heads", None) or H)
    hd = int(getattr(cfg, "head_dim", None) or d // H)
    return H, G, hd, d


def kv_heads_mode(roles: dict[str, list[str]], cfg) -> str:
    """"config" where the traced key width is G d_k by the config, "one" where it is d_k though the
    config names no grouping (multi-query attention switched on by a family flag)."""
    _, G, hd, _ = sizes(cfg)
    k_units = sum(u.count("k") for u in roles.values())
    return "one" if k_units == hd and G != 1 else "config"


def projections(t: Trace, roles: dict[str, list[str]], o_path: str, cfg, kv: str = "config") -> tuple[Projection, ...]:
    """The block's stored projections: one per module, its roles and (fused) row layout matched
    against :func:`fused_rows`; a one-line refusal naming what was found where nothing matches."""
    H, G, hd, _ = sizes(cfg)
    G = 1 if kv == "one" else G
    counts = {"q": H, "k": G, "v": G}
    found = {p: _runs(u) for p, u in roles.items()}
    out, seen = [], {}
    for path, units in roles.items():
        if "-" in units:
            raise IdinspectError(f"--auto: {path} feeds attention but {units.count('-')} of its {len(units)} outputs "
                                 f"reach nothing (found {found}); an adapter must be written by hand")
        order = "".join(dict.fromkeys(units))
        for r in order:
            seen[r] = seen.get(r, 0) + units.count(r)
        a = t.affine[path]
        if len(order) == 1:
            out.append(Projection(path, order, a.bias, a.conv1d))
            continue
        rows = {r: [i for i, u in enumerate(units) if u == r] for r in order}
        for layout in ("blocks", "per_head", "grouped"):
            try:
                expect = fused_rows(layout, order, counts, hd)
            except (ValueError, KeyError):
                continue
            if all(sorted(expect[r].tolist()) == rows[r] for r in order):
                out.append(Projection(path, order, a.bias, a.conv1d, layout))
                break
        else:
            raise IdinspectError(f"--auto: {path} fuses {order} in a row order idinspect does not know ({found[path]}); "
                                 "an adapter must be written by hand")
    want = {"q": H * hd, "k": G * hd, "v": G * hd}
    if seen != want:
        raise IdinspectError(f"--auto: the projections hold {seen} query/key/value outputs, the config's sizes "
                             f"(H={H}, G={G}, d_k={hd}) imply {want}; found {found}")
    a = t.affine[o_path]
    return (*out, Projection(o_path, "o", a.bias, a.conv1d))


def _runs(units: list[str]) -> str:
    """'q 0:16, k 16:24, ...': a module's unit roles as runs."""
    out, start = [], 0
    for i in range(1, len(units) + 1):
        if i == len(units) or units[i] != units[start]:
            out.append(f"{units[start]} {start}:{i}")
            start = i
    return ", ".join(out)


def common_parent(paths: list[str]) -> str:
    """The deepest module path containing every path (a module's own path if there is one)."""
    parts = [p.split(".") for p in paths]
    common = []
    for names in zip(*parts):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    if len(paths) == 1 or common == parts[0] or common == parts[-1]:
        common = common[:-1]     # one fused module: its parent is the attention module
    return ".".join(common)


def model_tensors(hf, t: Trace, read: set[str], others: tuple[str, ...] = (), group_list: str | None = None
                  ) -> dict[str, str]:
    """Every other tensor of the twin as ``pattern -> component`` (layer numbers as ``{n}``), but those
    in the layers of the ``others`` stacks (their own layouts declare them). With ``group_list``, the
    traced list is that of group 0 of layers kept in groups (:mod:`.groups`): group numbers are ``{n}`` too."""
    prefix = getattr(hf, "base_model_prefix", "")
    container = t.layer_container
    stem = re.escape(container) + r"\.(\d+)\.(.+)"
    if group_list:
        container = container[:-len(f".0.{group_list}")]
        stem = re.escape(container) + r"\.(\d+)\." + re.escape(group_list) + r"\.(\d+)\.(.+)"
        container = f"{container}.{{n}}.{group_list}"
    out = {}
    for key in hf.state_dict():
        name = key[len(prefix) + 1:] if prefix and key.startswith(prefix + ".") else key
        if any(name.startswith(o + ".") for o in others):
            continue
        module_path = key.rsplit(".", 1)[0]
        match = re.fullmatch(stem, name)
        in_layer = match is not None
        if in_layer and match.groups()[-1] in read:
            continue
        pattern = f"{container}.{{n}}.{match.groups()[-1]}" if in_layer else name
        module = hf.get_submodule(module_path) if module_path != key else hf
        out[pattern] = _component(module, module_path, in_layer)
    return out


def _component(module: torch.nn.Module, path: str, in_layer: bool) -> str:
    if isinstance(module, torch.nn.Embedding):
        return "position" if "position" in path else "embedding"
    if "norm" in type(module).__name__.lower() or "norm" in path.rsplit(".", 1)[-1].lower():
        return "norm"
    if path.rsplit(".", 1)[-1] in ("lm_head", "score", "classifier"):
        return "head"
    return "mlp" if in_layer else "projection"


def qk_norms(t: Trace, module: torch.nn.Module, attention: str, seen: dict[str, tuple],
             proj: tuple[Projection, ...], cfg) -> list[FoundNorm | None]:
    """The candidate q/k norms: parametrised modules inside the attention ``module`` whose input (in
    ``seen``, :func:`norm_candidates`' first calls) is the query (key) projection's output, per head or
    whole; [None] where there are none."""
    _, _, hd, _ = sizes(cfg)
    by_role = {r: p for p in proj for r in p.roles}
    if by_role["q"].roles != "q" or by_role["k"].roles != "k":
        return [None]
    found = {}
    for role in "qk":
        target = t.outputs[by_role[role].module]
        for path, (x, _) in seen.items():
            if x is not None and x.numel() == target.numel() and any(
                    torch.equal(v.reshape(target.shape), target) for v in _layouts(x)):
                found[role] = (path, "head" if x.shape[-1] == hd else "projection", module.get_submodule(path))
    if set(found) != {"q", "k"}:
        return [None]
    (qp, scope, qm), (kp, _, _) = found["q"], found["k"]
    heads = _per_head_list(qm)
    if heads is not None:     # one norm module per head (StableLM's norms.h): its settings are the first's
        qm = getattr(qm, heads)[0]
    eps = next((float(getattr(qm, a)) for a in ("variance_epsilon", "eps", "epsilon") if hasattr(qm, a)), 1e-6)
    pre = f"{attention}." if attention else ""
    bias = getattr(qm, "bias", None) is not None
    return [FoundNorm(kind, scope, eps, pre + qp, pre + kp, offset, bias, heads)
            for kind, offset in itertools.product(("rms", "layer"), (0.0, 1.0))]


def norm_candidates(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The submodules of the attention ``module`` with parameters of their own that are not affine, and
    those holding one such module per head in a list (a q/k norm per head: StableLM's q_layernorm)."""
    return {path: m for path, m in module.named_modules()
            if path and affine_kind(m) is None and (list(m.parameters(recurse=False)) or _per_head_list(m))}


def _per_head_list(module: torch.nn.Module) -> str | None:
    """The name of ``module``'s one child, a ModuleList of parametrised modules of one class that are
    not affine and have no children, where it has nothing else; None otherwise."""
    children = list(module.named_children())
    if list(module.parameters(recurse=False)) or len(children) != 1 or not isinstance(children[0][1], torch.nn.ModuleList):
        return None
    name, items = children[0]
    ok = len(items) > 0 and len({type(m) for m in items}) == 1 and all(
        affine_kind(m) is None and list(m.parameters(recurse=False)) and not list(m.children()) for m in items)
    return name if ok else None


def _layouts(x: torch.Tensor) -> list[torch.Tensor]:
    """``x`` as [B, T, ...] : itself, and [B, H, T, d_k] heads-first transposed back (Gemma 3's norms)."""
    return [x, x.transpose(1, 2)] if x.dim() == 4 else [x]


def extra_parameters(module: torch.nn.Module, attention: str, proj: tuple[Projection, ...],
                     norm: FoundNorm | None) -> list[str]:
    """Parameters of the attention ``module`` that no projection or q/k norm holds."""
    pre = f"{attention}." if attention else ""
    placed = {p.module for p in proj} | ({norm.q_module, norm.k_module} if norm else set())
    return [pre + n for n, _ in module.named_parameters() if not any((pre + n).startswith(m + ".") for m in placed)]


def stack_layers_key(hf, cfg, container: str) -> str:
    """The setting that counts the layers of the list at ``container``: num_hidden_layers where it does,
    else a setting ending in "_layers" (BART's decoder_layers, T5's num_decoder_layers) equal to the list's
    length on the twin, else any integer setting equal to it; refused where none is."""
    n = len(hf.get_submodule(container))
    settings = cfg.to_dict()
    if int(cfg.num_hidden_layers) == n:
        return "num_hidden_layers"
    equal = [k for k, v in settings.items() if isinstance(v, int) and not isinstance(v, bool) and v == n]
    named = [k for k in equal if k.endswith("_layers")]
    if named or equal:
        return (named or equal)[0]
    raise IdinspectError(f"--auto: no setting counts the {n} layers of {container}; an adapter must be written by hand")


def cross_block(hf, inputs: dict, t: Trace, after: str, cfg, kv: str) -> FoundCross | None:
    """The layer's second attention block, after module ``after`` (the first block's W_O): a
    cross-attention block, whose keys and values read other states than its queries (the encoder's);
    None where there is none. Refused where the second block is another self-attention block, or holds
    parameters no projection holds."""
    block = find_roles(hf, inputs, t, after)
    if block is None:
        return None
    o_path, roles = block
    proj = projections(t, roles, o_path, cfg, kv)
    by_role = {r: p.module for p in proj for r in p.roles}
    q_in, k_in = t.inputs[by_role["q"]], t.inputs[by_role["k"]]
    found = {p.module: p.roles for p in proj}
    if q_in.shape == k_in.shape and torch.equal(q_in, k_in):
        raise IdinspectError(f"--auto: layer 0 has a second self-attention block ({found}); --auto reads one self-"
                             "attention block per layer, and a cross-attention block; an adapter must be written by hand")
    attention = common_parent([p.module for p in proj if p.roles != "o"])
    module = hf.get_submodule(f"{t.layer_path}.{attention}" if attention else t.layer_path)
    _, y = first_calls(hf, inputs, {"": module})[""]
    o = t.outputs[o_path]
    extra = extra_parameters(module, attention, proj, None)
    if extra:
        raise IdinspectError(f"--auto: the cross-attention module {attention} has parameters no projection holds "
                             f"({', '.join(extra)}); found {found}; an adapter must be written by hand")
    return FoundCross(attention, None if y.shape == o.shape and torch.equal(y, o) else o_path, proj)


def candidates(hf, inputs: dict, model_type: str, container: str | None = None, stack: str = "",
               others: tuple[str, ...] = (), config_key: str | None = None, groups: Groups | None = None,
               build=None) -> tuple[list[FoundLayout], dict]:
    """Every layout consistent with the trace of ``hf`` (float64 twin), best guess first, and what the
    trace found (for refusals); of its list of layers at ``container`` (path from the root; None: its one
    list), named ``stack`` where the model has two, the ``others`` (relative to the base model) left to
    their own layouts; its settings those of ``hf.config``'s sub-config ``config_key`` (a tower) where given;
    or of its layers kept in ``groups`` (the first group's first layer traced). ``build(overrides)`` builds
    another twin with some settings changed (latent attention's widths are tied to their settings on such twins)."""
    cfg = getattr(hf.config, config_key) if config_key else hf.config
    t = trace(hf, inputs, groups.first_list() if groups else container)
    layers_key = stack_layers_key(hf, cfg, container) if container is not None else "num_hidden_layers"
    o_path, roles = find_roles(hf, inputs, t)
    found_latent = latent_candidates(hf, inputs, model_type, t, o_path, roles, layers_key, others, groups, build, cfg)
    if found_latent is not None:
        return found_latent
    kv = kv_heads_mode(roles, cfg)
    proj = projections(t, roles, o_path, cfg, kv)
    attention = common_parent([p.module for p in proj if p.roles != "o"])
    module = hf.get_submodule(f"{t.layer_path}.{attention}" if attention else t.layer_path)
    seen = first_calls(hf, inputs, {**norm_candidates(module), "": module})
    _, y = seen.pop("")
    o = t.outputs[o_path]
    # the module's output is W_O's, or W_O is applied outside it (BERT's attention.output.dense) or before
    # a residual add inside it (BLOOM's dense): then the adapter names W_O as the block's output module
    output = None if y.shape == o.shape and torch.equal(y, o) else o_path
    norms = qk_norms(t, module, attention, seen, proj, cfg)
    extra = extra_parameters(module, attention, proj, norms[0])
    if output is not None:     # a norm inside the module after W_O (ALBERT's LayerNorm(x + dense(z))): the layer's
        extra = [p for p in extra if p not in after_output(hf, inputs, t, module, attention, o_path, extra)]
    # layers kept in groups: the list of groups is the container, group 0's first layer the one traced
    container = t.layer_container[:-len(f".0.{groups.group_list}")] if groups else t.layer_container
    found = {"layers": f"{container}.*.{groups.group_list}" if groups else container,
             "attention": attention or "(the layer)", "output": o_path,
             "projections": {p.module: p.roles + (f" ({p.layout})" if len(p.roles) > 1 else "") for p in proj},
             "qk_norm": norms[0].q_module if norms[0] else None}
    cross = cross_block(hf, inputs, t, o_path, cfg, kv)
    if cross is not None:
        found["cross"] = {p.module: p.roles for p in cross.projections}
        proj_all = (*proj, *cross.projections)
    else:
        proj_all = proj
    H = int(cfg.num_attention_heads)
    pre = f"{attention}." if attention else ""
    params = dict(module.named_parameters())
    # one logit per head, held by the attention module itself: tried as attention sinks (gpt-oss)
    sinks = extra[0] if len(extra) == 1 and "." not in extra[0][len(pre):] and params[extra[0][len(pre):]].shape == (H,) else None
    if sinks:
        found["sinks"], extra = sinks, []
    relative = relative_table(hf, t, module, attention, extra, H)
    if relative:     # a table [buckets, H] the module looks up: tried as T5's relative-position bias
        found["relative"], extra = relative[0], []
    table = None if relative else model_table(hf, module, container, H)
    if table is not None:     # the model's own table, looked up once and passed to every layer (MPNet)
        found["relative"] = table.path
    if extra:
        raise IdinspectError(f"--auto: the attention module {attention or t.layer_path} has parameters no projection "
                             f"holds ({', '.join(extra)}); found {found}; an adapter must be written by hand")
    read = ({f"{p.module}.weight" for p in proj_all} | {f"{p.module}.bias" for p in proj_all if p.bias}
            | {x for x in (sinks, relative and relative[0]) if x})
    if norms[0] is not None:
        n0 = norms[0]
        stems = [f"{m}.{n0.heads_list}.{h}" for m in (n0.q_module, n0.k_module) for h in range(H)] if n0.heads_list \
            else [n0.q_module, n0.k_module]
        read |= {f"{m}.{w}" for m in stems for w in ("weight", "bias")}
    tensors = model_tensors(hf, t, read, others, groups and groups.group_list)
    if table is not None:
        tensors.pop(f"{table.path}.weight", None)
    shared = {} if table is None else {"relative_table": table.path, "relative_keyword": table.keyword,
                                       "relative_distance": table.distance, "relative_tokens": table.tokens}
    _, _, hd, _ = sizes(cfg)
    grouping = {} if groups is None else {"group_list": groups.group_list, "groups_key": groups.groups_key,
                                          "group_layers_key": groups.group_layers_key}
    layouts = [FoundLayout(model_type, container, attention, output, proj, pos["positional"], pos["partial"],
                           scale["scale"], causal, norm, tensors, window=window, kv_heads=kv, softcap=cap,
                           rope=pos["rope"], rotary_dim_key=pos["rotary_dim_key"], rope_layers_key=pos["rope_layers_key"],
                           scale_law=scale["law"], scale_by_layer=by_layer, window_offset=offset, sinks=sinks,
                           cross=cross, relative=relative and relative[0], relative_per_layer=bool(relative and relative[1]),
                           relative_distance_key=pos.get("distance"), relative_bidirectional=pos.get("bidirectional", True),
                           alibi_scale=pos.get("alibi_scale", "none"), **(shared if pos["positional"] == "relative" else {}),
                           stack=stack, layers_key=layers_key, config_key=config_key, **grouping)
               for pos, causal, scale, by_layer, norm, (window, offset), cap
               in itertools.product(positionals(cfg, relative, table), (True, False), scale_laws(module, cfg, hd), (False, True), norms,
                                    windows(cfg), [None] + [k for k in SOFTCAP_KEYS if getattr(cfg, k, None)])]
    from .query_variants import extended

    return layouts + extended(layouts, cfg, module), found


def latent_candidates(hf, inputs: dict, model_type: str, t: Trace, o_path: str, roles: dict[str, list[str]],
                      layers_key: str, others: tuple[str, ...], groups: Groups | None, build, cfg=None
                      ) -> tuple[list[FoundLayout], dict] | None:
    """The layouts worth trying where the traced block is multi-head latent attention (:mod:`.latent`),
    and what was found; None where it is not."""
    attention = common_parent(list(roles))
    module = hf.get_submodule(f"{t.layer_path}.{attention}" if attention else t.layer_path)
    m = latent_modules(hf, inputs, t, o_path, roles, attention, module, build, cfg)
    if m is None:
        return None
    pre = f"{attention}." if attention else ""
    placed = [p for p in (m.q, m.q_a, m.q_norm, m.q_b, m.kv_a, m.kv_norm, m.kv_b, m.o) if p]
    extra = [pre + n for n, _ in module.named_parameters() if not any((pre + n).startswith(p + ".") for p in placed)]
    found = {"layers": t.layer_container, "attention": attention or "(the layer)", "latent": {
        k: v for k, v in m.__dict__.items() if v and k in ("q", "q_a", "q_norm", "q_b", "kv_a", "kv_norm", "kv_b", "o")},
        "widths": dict(m.settings)}
    if extra:
        raise IdinspectError(f"--auto: the latent attention module {attention} has parameters no projection holds "
                             f"({', '.join(extra)}); found {found}; an adapter must be written by hand")
    _, y = first_calls(hf, inputs, {"": module})[""]
    o = t.outputs[o_path]
    output = None if y.shape == o.shape and torch.equal(y, o) else o_path
    read = {f"{p}.{w}" for p in placed for w in ("weight", "bias")}
    tensors = model_tensors(hf, t, read, others, groups and groups.group_list)
    grouping = {} if groups is None else {"group_list": groups.group_list, "groups_key": groups.groups_key,
                                          "group_layers_key": groups.group_layers_key}
    container = t.layer_container[:-len(f".0.{groups.group_list}")] if groups else t.layer_container
    layouts = [FoundLayout(model_type, container, attention, output, (), pairing, False, 1.0, causal,
                           model_tensors=tensors, scale_law=law, mla=m, layers_key=layers_key, rope_polar=polar,
                           **grouping)
               for pairing, polar, causal, law in itertools.product(("interleaved", "half"), (False, True), (True, False),
                                                                     ("head_dim", "yarn_mscale", "one"))]
    return layouts, found


def relative_table(hf, t: Trace, module: torch.nn.Module, attention: str, extra: list[str], H: int
                   ) -> tuple[str, bool] | None:
    """(path relative to the layer, whether every layer has its own) of the one extra parameter of the
    attention ``module`` that is an embedding table [buckets, H] (T5's relative_attention_bias); None
    where there is no such table. Per layer where layer 1 of the twin holds it too (UMT5), else layer
    0's is the stack's (T5)."""
    pre = f"{attention}." if attention else ""
    if len(extra) != 1 or not extra[0].endswith(".weight"):
        return None
    owner = module.get_submodule(extra[0][len(pre):-len(".weight")])
    if not isinstance(owner, torch.nn.Embedding) or owner.weight.shape[1] != H:
        return None
    second = t.layer_path[:-1] + "1"
    keys = dict(hf.named_parameters())
    return extra[0], f"{second}.{extra[0]}" in keys


def positionals(cfg, relative: tuple[str, bool] | None = None, table: ModelTable | None = None) -> list[dict]:
    """The positional schemes worth trying on ``cfg`` (best guess first): RoPE with rotate-half or
    interleaved pairs, its frequencies from the config (as a whole, or per layer type where
    ``rope_parameters`` is keyed by ``layer_types``' values), or from the default base over the
    rotated dims a setting may name; on every layer, or on those a per-layer 0/1 setting flags; no
    positions inside attention at all; ALiBi. Tried, not trusted: the reproduction decides."""
    params = getattr(cfg, "rope_parameters", None)
    types = list(getattr(cfg, "layer_types", None) or [])
    by_type = isinstance(params, dict) and bool(types) and set(types) <= set(params)
    sources = ["layer_type"] if by_type else (["config"] if params or getattr(cfg, "rope_theta", None) else [])
    sources.append("default")
    partial = [False, True] if isinstance(params, dict) and "partial_rotary_factor" in params else [False]
    dim_keys = [None] + [k for k in ROTARY_DIM_KEYS if isinstance(getattr(cfg, k, None), int)]
    n = int(cfg.num_hidden_layers)
    flag_keys = [None] + [k for k, v in cfg.to_dict().items()
                          if isinstance(v, list) and len(v) == n and set(v) == {0, 1}
                          and not any(isinstance(x, (bool, float)) for x in v)]
    out = []
    for pairing, source, flags in itertools.product(("half", "interleaved"), sources, flag_keys):
        for part, key in itertools.product(partial if source == "config" else [False],
                                           dim_keys if source == "default" else [None]):
            out.append({"positional": pairing, "partial": part, "rope": source, "rotary_dim_key": key,
                        "rope_layers_key": flags})
    none = {"positional": "none", "partial": False, "rope": "config", "rotary_dim_key": None, "rope_layers_key": None}
    # ALiBi added after the score scale, or before it (Falcon's slopes over sqrt(d_k)); the slopes' rounding
    # shows only where they are not powers of two, on a twin of the model's own head count (.alibi)
    out += [none, {**none, "positional": "alibi"}, {**none, "positional": "alibi", "alibi_scale": "head_dim"}]
    if table is not None:     # the model's table: its bucketing read from the model itself (.tables)
        out = [{**none, "positional": "relative", "bidirectional": table.bidirectional}] + out
    if relative:     # T5's buckets: both directions or past only, the largest distance from an integer setting
        out = [{**none, "positional": "relative", "distance": key, "bidirectional": both}
               for both in (True, False) for key, v in cfg.to_dict().items()
               if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_RELATIVE_DISTANCE] + out
    return out


def scale_laws(module: torch.nn.Module, cfg, hd: int) -> list[dict]:
    """The score scales worth trying (:data:`~adapters.inferred.SCALE_LAWS`): d_k^-1/2, the attention
    module's own ``scaling`` explained by a numeric setting (its value or inverse square root), 1, and
    the module's number as a constant where no law explains it."""
    laws = [{"law": "head_dim", "scale": hd ** -0.5}]
    own = getattr(module, "scaling", None)
    if (isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0
            and not any(math.isclose(own, s, rel_tol=1e-12) for s in (hd ** -0.5, 1.0))):
        for key, v in cfg.to_dict().items():
            # a multiplier is a float setting (Granite's attention_multiplier); an inverse square root may
            # be of an integer one (Gemma's query_pre_attn_scalar)
            if isinstance(v, float) and v > 0 and math.isclose(v, own, rel_tol=1e-12):
                laws.append({"law": f"key:{key}", "scale": float(own)})
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isclose(v ** -0.5, own, rel_tol=1e-12):
                laws.append({"law": f"rsqrt:{key}", "scale": float(own)})
        if len(laws) == 1:
            laws.append({"law": "constant", "scale": float(own)})
    return laws + [{"law": "one", "scale": 1.0}]


def windows(cfg) -> list[tuple[str, int]]:
    """(which layers, offset) of the sliding windows worth trying: none, or config.sliding_window (plus
    0 or 1: ModernBERT's module adds one to its config's half window) on every layer or on the layers
    ``layer_types`` marks sliding."""
    if not getattr(cfg, "sliding_window", None):
        return [("none", 0)]
    return [("layer_types", 0), ("all", 0), ("layer_types", 1), ("all", 1), ("none", 0)]


__all__ = ["candidates", "common_parent", "projections", "sizes"]
