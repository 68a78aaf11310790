"""The automatic adapter (``idinspect MODEL --auto``): for a model type no adapter claims, the
attention layout is inferred from the Hugging Face module itself and proven before anything is
counted.

1. A twin of the model is built by its own transformers class (same config, two layers, H = 4
   heads, G = 2 key/value groups where the model groups them, d_k = 4, d = 16; float64, random
   weights; each kind of a per-layer setting on a twin layer; d_k = 8 where part of each head
   rotates) and its first layer traced (:mod:`.trace`): which modules play W_Q, W_K, W_V and W_O,
   their fused rows, biases and q/k norms, and a cross-attention block after them. An encoder's and
   a decoder's stack are traced and settled each on its own (:func:`infer_stacks`), and so are the towers
   of a config holding other models' configs (:mod:`.towers`: CLIP's text and vision towers).
2. The settings one module does not show (positional scheme, score scale, causality, window, the
   norm's kind) are chosen as the one combination whose canonical form reproduces the module's
   output on every layer to 1e-10 (:mod:`.infer`).
3. The resulting adapter must then pass the contract every built-in adapter passes
   (:func:`idinspect.testing.check_adapter`): a bit-exact round trip of every stored tensor, the
   reference against the module at 1e-10 in float64, and ``--prove``'s twin Jacobian nullity equal to
   the structural count. Any mismatch refuses by name with what was found.
4. The names a folder saved by transformers holds, where they are not the live module's (renamed
   modules, fused experts saved per expert), are learned from the twin's own ``save_pretrained`` and
   proven on the saved twin (:mod:`.stored_names`); each checkpoint is read under the names it holds.

Only then is the class registered for the model type (for this process) and the checkpoint read
with it; every report marks its counts "automatic, proven on a twin".
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..adapters import ADAPTERS
from ..adapters.example_inputs import example_inputs
from ..adapters.inferred import rotates_part, twin_settings_from
from ..adapters.inferred_inputs import cross_inputs, cross_states_argument
from ..adapters.inferred_towers import towers_twin_settings
from ..errors import IdinspectError, one_line
from ..numerics.twin import instantiate
from .alibi import settle_alibi
from .cross_layers import layouts_by_layer_kind
from .groups import check_runs, find_groups
from .infer import candidates, sizes
from .settle import settle, with_cross_states
from .stored_names import learn_stored_names
from .towers import infer_towers, tower_keys
from .trace import layer_lists

#: The twin the trace runs on: heads, key/value groups (where the model groups them), head width, width.
TRACE_SHAPE = {"heads": 4, "kv_heads": 2, "head_dim": 4, "hidden_size": 16}
TRACE_LAYERS = 2
TRACE_TOKENS = 8
#: A sliding window the trace's sequences exceed, where the model has one.
TRACE_WINDOW = 3


def infer_adapter(model_type: str, hf_config, model_class, trust_remote_code: bool = False) -> type:
    """Infer, prove and register the adapter of ``model_type`` (see the module docstring) from its
    transformers config and the class that builds it (``model_class._from_config(config)``).
    Returns the adapter class; raises :class:`IdinspectError` naming what was found where any step fails."""
    try:
        hf = trace_twin(hf_config, model_class)
        # layers kept in groups (ALBERT) are looked for in single-tower models (a tower's are its own stack's)
        groups = None if tower_keys(hf_config) else find_groups(hf, lambda o: trace_twin(hf_config, model_class, o))
        if groups is not None:     # layers kept in groups and run more than once: a twin that runs each twice
            hf = trace_twin(hf_config, model_class, groups.twin_settings())
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(2, 32, (2, TRACE_TOKENS), generator=g)
        inputs = example_inputs(hf, ids, g)
        states = cross_states_argument(hf, inputs)
        if states:
            inputs.update(cross_inputs(hf, states, ids, g))
        if groups is not None:
            check_runs(hf, inputs, groups)
        if tower_keys(hf.config):
            cls, error, found = infer_towers(hf, inputs, model_type, states, TRACE_TOKENS)
        elif groups is not None or len(stacks := layer_lists(hf)) == 1:
            build = lambda overrides: trace_twin(hf_config, model_class, overrides)  # noqa: E731
            layouts, found = (candidates(hf, inputs, model_type, groups=groups, build=build) if groups is not None
                              else layouts_by_layer_kind(hf, inputs, model_type, build=build))
            cls, error = settle(hf, layouts, found, TRACE_TOKENS, states)
            cls, error = settle_alibi(cls, error, sizes(hf_config)[0],
                                      lambda: trace_twin(hf_config, model_class, model_heads=True),
                                      found, TRACE_TOKENS, states)
        else:
            cls, error, found = infer_stacks(hf, inputs, model_type, [p for p, _ in stacks], states)
    except IdinspectError:
        raise
    except Exception as exc:  # noqa: BLE001 - the model's own code failing on the twin, in one line
        raise IdinspectError(f"--auto: tracing {model_type!r} failed ({type(exc).__name__}: {one_line(exc)}); "
                             "an adapter must be written by hand (docs/adding-a-family.md)") from None
    with_cross_states(cls, states)
    cls.twin_model_class = model_class
    cls.trust_remote_code = trust_remote_code
    ADAPTERS.add_automatic(cls, {"proven_on_twin": False})
    proven = False
    try:
        from ..testing import check_adapter

        result = check_adapter(hf)
        proven = True
        # the names a folder saved by transformers holds (renamed, fused tensors split), proven on the saved twin
        cls.stored_names, stored = learn_stored_names(hf, cls)
    except (AssertionError, IdinspectError) as exc:
        raise IdinspectError(f"--auto: the inferred adapter of {model_type!r} is not proven ({one_line(exc)}); "
                             f"found {found}; an adapter must be written by hand") from None
    except Exception as exc:  # noqa: BLE001 - the model's own code failing on the proof's twin, in one line
        raise IdinspectError(f"--auto: proving the inferred adapter of {model_type!r} failed ({type(exc).__name__}: "
                             f"{one_line(exc)}); found {found}; an adapter must be written by hand") from None
    finally:
        if not proven:
            ADAPTERS.remove_automatic(model_type)
    proof = result["proof"]
    ADAPTERS.add_automatic(cls, {
        "proven_on_twin": True,
        "reference_error": max(error, result["max_reference_error"]),
        "jacobian_nullity": proof["jacobian_nullity"],
        "structural_unidentified": proof["structural_unidentified"],
        "found": found,
        "stored_names": stored,
    })
    return cls


def infer_stacks(hf, inputs: dict, model_type: str, paths: list[str], states: str | None) -> tuple[type, float, dict]:
    """(adapter class, worst reference error, what was found) of a model with an encoder's and a
    decoder's list of layers (``paths``, from the root): each stack traced and settled on its own (its
    blocks reproduced by its own layout), then read together, encoder first. The stacks are named by
    the first part of their paths that differs ("encoder", "decoder")."""
    from ..adapters.inferred_stacks import inferred_stacks_adapter

    prefix = getattr(hf, "base_model_prefix", "")
    rel = [p[len(prefix) + 1:] if prefix and p.startswith(prefix + ".") else p for p in paths]
    parts_of = [r.split(".") for r in rel]
    at = next(i for i, names in enumerate(zip(*parts_of)) if len(set(names)) > 1)
    parts, found, worst, exact, tokens = [], {}, 0.0, (), 0
    for path, r, names in zip(paths, rel, parts_of):
        stack = names[at]
        layouts, seen = layouts_by_layer_kind(hf, inputs, model_type, path, stack, tuple(x for x in rel if x != r))
        cls, error = settle(hf, layouts, {**seen, "stack": stack}, TRACE_TOKENS, states)
        parts.append(cls.found)
        found[stack], worst = seen, max(worst, error)
        exact = tuple(dict.fromkeys((*exact, *cls.exact_classes)))
        tokens = max(tokens, cls.twin_tokens)
    if len({(f.attention_module, f.output_module) for f in parts}) > 1:
        raise IdinspectError(f"--auto: the stacks' attention modules differ ({found}); an adapter must be written by hand")
    cls = inferred_stacks_adapter(parts)
    cls.exact_classes = exact
    with_cross_states(cls, states)
    cls.twin_tokens = tokens
    return cls, worst, found


def trace_twin(hf_config, model_class, overrides: dict | None = None, model_heads: bool = False):
    """The float64 twin the trace runs on (:data:`TRACE_SHAPE`, :data:`TRACE_LAYERS` layers), built by
    ``model_class`` from ``hf_config``'s own settings and ``overrides`` (the twin of layers kept in
    groups, :mod:`.groups`); with ``model_heads``, the model's own H and G heads (of the trace's width:
    ALiBi's slopes depend on H alone, :mod:`.alibi`). A one-line error where the config class refuses it.
    A config holding other models' configs (a text and a vision tower: CLIP, Qwen-VL) gets each tower
    shrunk so, inside its own settings (:func:`.towers.tower_keys`)."""
    towers = tower_keys(hf_config)
    if towers:
        settings = towers_twin_settings(hf_config, tuple(towers), lambda sub: _twin_settings(sub)[0])
        shape = {k: {n: settings[k].get(n) for n in ("hidden_size", "num_attention_heads")} for k in towers}
    else:
        settings, shape = _twin_settings(hf_config, model_heads)
    settings.update(overrides or {})
    try:
        config = type(hf_config)(**settings)
    except Exception as exc:  # noqa: BLE001 - whatever a config class's validation raises, in one line
        raise IdinspectError(f"--auto: transformers' {type(hf_config).__name__} refuses the trace twin {shape} "
                             f"({one_line(exc)}); an adapter must be written by hand") from None
    return instantiate(config, model_class._from_config)


def _twin_settings(hf_config, model_heads: bool = False) -> tuple[dict, dict]:
    """(settings of the trace twin of one model or tower config, its shape): see :func:`trace_twin`."""
    if not all(hasattr(hf_config, k) for k in ("num_attention_heads", "hidden_size", "num_hidden_layers")):
        raise IdinspectError(f"--auto: {type(hf_config).__name__} has no num_attention_heads / hidden_size / "
                             "num_hidden_layers of its own, nor towers that have (sub-configs with hidden_size and "
                             "num_hidden_layers); an adapter must be written by hand")
    H, G, _, _ = sizes(hf_config)
    shape = {**TRACE_SHAPE, "kv_heads": TRACE_SHAPE["kv_heads"] if G < H else TRACE_SHAPE["heads"]}
    if rotates_part(hf_config):    # two rotated planes and some unrotated dims: pairings and partial rotation differ
        shape.update(head_dim=2 * TRACE_SHAPE["head_dim"], hidden_size=2 * TRACE_SHAPE["hidden_size"])
    if model_heads:
        shape.update(heads=H, kv_heads=G, hidden_size=H * shape["head_dim"])
    pad = getattr(hf_config, "pad_token_id", None)
    n = int(hf_config.num_hidden_layers)
    # another stack's layer count kept from the model (BART's decoder_layers where it differs from the
    # encoder's) must not equal the twin's, or the trace could not tell which setting counts which stack
    kept = {v for k, v in hf_config.to_dict().items()
            if k.endswith("_layers") and isinstance(v, int) and not isinstance(v, bool) and v != n}
    layers = next(k for k in range(TRACE_LAYERS, TRACE_LAYERS + len(kept) + 1) if k not in kept)
    settings = {**twin_settings_from(hf_config, shape, layers), "num_hidden_layers": layers, "vocab_size": 32,
                "pad_token_id": pad if isinstance(pad, int) and 0 <= pad < 32 else None}
    for key, fallback in (("bos_token_id", 1), ("eos_token_id", 2)):
        # ids outside the twin's 32 tokens: None, or a token inside where the config class wants an int (Mllama)
        v = getattr(hf_config, key, None)
        settings[key] = None if v is None else v if isinstance(v, int) and 0 <= v < 32 else fallback
    for key, v in hf_config.to_dict().items():
        # every per-layer setting (layer types, NoPE flags) with each of its kinds on a twin layer, so the
        # trace tells which layers a window, a RoPE type or no RoPE applies to
        if n > 1 and isinstance(v, list) and len(v) == n and all(isinstance(x, (str, int)) for x in v):
            kinds = list(dict.fromkeys(v))
            if len(kinds) > 1:
                settings[key] = (kinds * layers)[:layers]
        elif _layer_indices(v, n):     # a list of some layers' indices (Mllama's cross_attention_layers): the
            settings[key] = [layers - 1]    # twin's last layer listed, its first not, so both kinds are traced
    if getattr(hf_config, "sliding_window", None):
        settings["sliding_window"] = TRACE_WINDOW    # shorter than the trace's sequences: a window shows
    return settings, shape


def _layer_indices(v, n: int) -> bool:
    """Whether ``v`` is a list of some (not all) of ``n`` layers' indices, increasing."""
    return (isinstance(v, list) and 0 < len(v) < n and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
            and v == sorted(set(v)) and 0 <= v[0] and v[-1] < n)


def folder_model_class(folder: Path, trust_remote_code: bool) -> tuple[object, type]:
    """(transformers config, model class) of a checkpoint folder: the transformers class config.json names
    in ``architectures`` where it is built from this config class (a task model's head is then traced and
    declared, not refused as unread tensors), else AutoModel's base model, else the repository's own
    class; remote code only with ``trust_remote_code``."""
    import transformers
    from transformers import AutoConfig, AutoModel

    from ..sources.hf_logging import quiet_transformers

    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise IdinspectError(f"{folder}/config.json: this model's configuration is custom code in the repository "
                                 "(auto_map); idinspect never runs it unless you pass --trust-remote-code (it then "
                                 "runs as transformers would run it)") from None
        raise IdinspectError(f"{folder}/config.json: transformers cannot read it ({one_line(exc)})") from None
    except (OSError, TypeError, KeyError, AttributeError) as exc:
        raise IdinspectError(f"{folder}/config.json: transformers cannot read it ({one_line(exc)})") from None
    archs = getattr(config, "architectures", None) or []
    named = getattr(transformers, archs[0], None) if archs else None
    if isinstance(named, type) and getattr(named, "config_class", None) is type(config):
        return config, named     # the class that saved the checkpoint: its head's tensors are traced too
    if type(config) in AutoModel._model_mapping:
        return config, AutoModel._model_mapping[type(config)]
    auto_map = getattr(config, "auto_map", None) or {}
    if trust_remote_code and "AutoModel" in auto_map:
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        return config, get_class_from_dynamic_module(auto_map["AutoModel"], str(folder))
    cls = named
    if not isinstance(cls, type):
        raise IdinspectError(f"{folder}/config.json: transformers has no model class for model_type "
                             f"{config.model_type!r}; --auto needs one to trace")
    return config, cls


def resolver(trust_remote_code: bool):
    """The function the registry calls for a model type it does not know (``--auto``)."""
    def resolve(model_type: str, folder: Path) -> None:
        config, cls = folder_model_class(folder, trust_remote_code)
        infer_adapter(model_type, config, cls, trust_remote_code)
    return resolve


def probe(model_type: str) -> dict:
    """What ``--auto`` makes of ``model_type`` on transformers' default config for it (the base model
    AutoModel maps): ``{"model_type", "state": "automatic" | "refused", "evidence" | "reason"}``. Nothing
    stays registered."""
    from transformers import AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    row: dict = {"model_type": model_type}
    try:
        config = CONFIG_MAPPING[model_type]()
        cls = AutoModel._model_mapping.get(type(config), None)
        if cls is None:
            raise IdinspectError(f"--auto: transformers' AutoModel maps no base model for {model_type!r}")
        infer_adapter(model_type, config, cls)
        row["state"], row["evidence"] = "automatic", ADAPTERS._evidence(model_type)
    except IdinspectError as exc:
        row["state"], row["reason"] = "refused", str(exc)
    except Exception as exc:  # noqa: BLE001 - a model class that does not build on its defaults, in one line
        row["state"], row["reason"] = "refused", f"--auto: {type(exc).__name__}: {one_line(exc)}"
    finally:
        ADAPTERS.remove_automatic(model_type)
    return row


def infer_for_module(model) -> None:
    """Infer and register the adapter of a live model's type from its own class (a config registered
    with ``AutoConfig.register`` works: no remote code is looked up)."""
    infer_adapter(model.config.model_type, model.config, type(model))


__all__ = ["TRACE_SHAPE", "folder_model_class", "infer_adapter", "infer_for_module", "probe", "resolver",
           "trace_twin"]
