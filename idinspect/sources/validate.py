"""config.json checked before anything trusts it: JSON that parses safely, settings of the right type,
and sizes that the safetensors headers can hold.

Every failure is an :class:`IdinspectError` on one line naming the file and the key, in the style
of the config classes' own validation (transformers refuses a ``num_attention_heads`` of 2.5 too),
but without importing them. :func:`read_json` is the one safe JSON reader for files a checkpoint,
a baseline or a policy controls: a recursion bomb, invalid UTF-8 or a permission problem each get
their own message, never a crash.

Called from :func:`idinspect.model.open_directory` (the settings) and
:meth:`idinspect.Model.check_layout` (the sizes, before RoPE frequencies or any tensor is made).
"""

from __future__ import annotations

import errno
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import IdinspectError

#: Settings that must be positive integers wherever config.json sets them (GPT-2 spellings included).
POSITIVE_INTEGERS = ("num_hidden_layers", "n_layer", "hidden_size", "n_embd", "num_attention_heads", "n_head",
                     "num_key_value_heads", "head_dim", "intermediate_size", "n_inner", "vocab_size",
                     "max_position_embeddings", "n_positions", "n_ctx",
                     "original_max_position_embeddings", "attention_chunk_size")
#: Settings that must be integers >= 0 where set (Qwen2's max_window_layers may be 0; DeBERTa-v3 stores
#: type_vocab_size 0: no token-type embeddings).
NON_NEGATIVE_INTEGERS = ("max_window_layers", "sliding_window", "type_vocab_size")
#: Settings that must be positive finite numbers where set.
POSITIVE_NUMBERS = ("rope_theta", "partial_rotary_factor", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon",
                    "floor_scale")
#: Settings that must be a JSON object (a dict) where set.
OBJECTS = ("rope_scaling", "rope_parameters")
#: Inside a RoPE dict: numbers that must be positive.
ROPE_NUMBERS = ("rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                "beta_fast", "beta_slow", "attention_factor", "partial_rotary_factor")


def read_json(path: Path, what: str = "JSON", fix: str = "fix or re-download it") -> Any:
    """``path`` parsed as JSON; one-line errors for a missing or unreadable file, a directory, a FIFO
    or device (never opened for a blocking read), a file over 64 MB, invalid UTF-8, invalid JSON and nesting too deep for the parser (a recursion bomb)."""
    from .regular_file import read_regular

    path = Path(path)
    try:
        raw = read_regular(path, fix=fix)
    except OSError as exc:
        raise IdinspectError(f"{path}: {os_reason(exc)}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IdinspectError(f"{path}: not UTF-8 text (byte {exc.start}); {fix}") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise IdinspectError(f"{path}: {what} nested too deeply to read; {fix}") from None
    except ValueError as exc:
        raise IdinspectError(f"{path}: not valid {what} ({str(exc).splitlines()[0]}); {fix}") from None


def os_reason(exc: OSError) -> str:
    """What an OSError means for the user, in words (permission apart from absence, loops named)."""
    reasons = {errno.EACCES: "permission denied; check the file's permissions (chmod) or run as its owner",
               errno.EPERM: "operation not permitted; check the file's permissions",
               errno.ENOENT: "no such file or directory",
               errno.ELOOP: "a symbolic link loop (the link points back to itself); fix or remove the link",
               errno.EISDIR: "is a directory, expected a file",
               errno.ENOTDIR: "a part of the path is a file, not a directory",
               errno.ENAMETOOLONG: "the name is too long for the file system; choose a shorter one",
               errno.ENOSPC: "no space left on the device; free some space or write elsewhere",
               errno.EROFS: "the file system is read-only; write elsewhere",
               errno.EFBIG: "file too large (a file-size limit such as ulimit -f, or the file system's maximum); "
                            "free the limit or write elsewhere",
               errno.EDQUOT: "disk quota exceeded; free some space or write elsewhere"}
    return reasons.get(exc.errno, exc.strerror or str(exc))


def check_settings(path: Path, settings: Any) -> Mapping[str, Any]:
    """Raise naming ``path`` and the key for any setting of the wrong type; return ``settings``."""
    if not isinstance(settings, dict):
        raise IdinspectError(f"{path}: not a JSON object of settings ({type(settings).__name__}); fix or re-download it")
    model_type = settings.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise IdinspectError(f"{path}: model_type is {_short(model_type)}, not a string such as \"llama\"; fix the config")
    archs = settings.get("architectures")
    if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise IdinspectError(f"{path}: architectures is {_short(archs)}, not a list of class names such as "
                             "[\"LlamaForCausalLM\"]; fix the config")
    for key in POSITIVE_INTEGERS:
        value = settings.get(key)
        if value is not None and not _positive_int(value):
            raise IdinspectError(f"{path}: {key} is {_short(value)}, not a positive integer; fix the config")
    heads = _first(settings, "num_attention_heads", "n_head")
    kv = settings.get("num_key_value_heads")
    if heads and kv and heads[1] % kv:
        raise IdinspectError(f"{path}: {heads[0]} {heads[1]} does not divide into num_key_value_heads {kv}; "
                             "fix the config")
    width = _first(settings, "hidden_size", "n_embd")
    if heads and width and settings.get("head_dim") is None and width[1] % heads[1]:
        raise IdinspectError(f"{path}: {width[0]} {width[1]} is not divisible by {heads[0]} {heads[1]} (and no "
                             "head_dim is set); fix the config")
    for key in NON_NEGATIVE_INTEGERS:
        value = settings.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise IdinspectError(f"{path}: {key} is {_short(value)}, not an integer >= 0; fix the config")
    for key in POSITIVE_NUMBERS:
        value = settings.get(key)
        if value is not None and not _positive_number(value):
            raise IdinspectError(f"{path}: {key} is {_short(value)}, not a positive number; fix the config")
    for key in OBJECTS:
        value = settings.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise IdinspectError(f"{path}: {key} is {_short(value)}, not a JSON object such as "
                                 "{\"rope_type\": \"linear\", \"factor\": 2.0}; fix the config")
        _check_rope_dict(path, key, value)
    return settings


def _check_rope_dict(path: Path, key: str, value: dict) -> None:
    nested = [v for v in value.values() if isinstance(v, dict)]
    if nested and len(nested) == len(value):  # one RoPE dict per layer type (transformers >= 5)
        for name, sub in value.items():
            _check_rope_dict(path, f"{key}.{name}", sub)
        return
    kind = value.get("rope_type", value.get("type"))
    if kind is not None and not isinstance(kind, str):
        raise IdinspectError(f"{path}: {key}.rope_type is {_short(kind)}, not a string; fix the config")
    for name in ROPE_NUMBERS:
        v = value.get(name)
        if v is not None and not _positive_number(v):
            raise IdinspectError(f"{path}: {key}.{name} is {_short(v)}, not a positive number; fix the config")


#: Settings that count layers, and settings that are widths of some stored tensor.
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")
WIDTHS = ("hidden_size", "n_embd", "head_dim", "d_model")


def check_settings_against_headers(path: Path, settings: Mapping[str, Any], reader) -> None:
    """Layer counts and widths of config.json (already type-checked) against the safetensors headers,
    before an adapter loops over layers or sizes anything: a count above the number of stored
    tensors, or a width above the largest stored dimension, cannot belong to these weights."""
    keys = reader.keys()
    for key in LAYER_COUNTS:
        value = settings.get(key)
        if isinstance(value, int) and value > len(keys):
            raise IdinspectError(f"{path}: {key} {value} exceeds the {len(keys)} tensors in the checkpoint; the config "
                                 "does not belong to these weights")
    largest = max((max(reader.shape(k), default=1) for k in keys), default=0)
    heads = _first(settings, "num_attention_heads", "n_head")
    for key in WIDTHS:
        value = settings.get(key)
        if isinstance(value, int) and value > largest:
            raise IdinspectError(f"{path}: {key} {value} is larger than any tensor in the checkpoint (largest "
                                 f"dimension {largest}); the config does not belong to these weights")
    head_dim = settings.get("head_dim")
    if heads and isinstance(head_dim, int) and heads[1] * head_dim > largest:
        raise IdinspectError(f"{path}: {heads[0]} {heads[1]} x head_dim {head_dim} is larger than any tensor in the "
                             f"checkpoint (largest dimension {largest}); the config does not belong to these weights")


def check_sizes_against_headers(adapter, reader, config_file: str = "config.json") -> None:
    """Sizes config.json implies, against the safetensors headers, before anything is allocated.

    A head width, model width or layer count larger than any tensor could hold means the config
    does not belong to these weights (and would otherwise size RoPE tables or buffers first):
    every per-layer width must fit in the largest tensor dimension, and the layer count in the
    number of stored tensors.
    """
    keys = reader.keys()
    largest = max((max(reader.shape(k), default=1) for k in keys), default=0)
    aliases = getattr(getattr(adapter.config, "_spec", None), "aliases", {})  # name -> config.json's key
    n_layers = adapter.num_layers
    if n_layers > len(keys):
        raise IdinspectError(f"{config_file}: num_hidden_layers {n_layers} exceeds the {len(keys)} tensors in the "
                             "checkpoint; the config does not belong to these weights")
    sizes = [adapter.sizes(site) for site in adapter.sites] or [(adapter.n_heads, adapter.n_kv_heads,
                                                                 adapter.head_dim, adapter.hidden_size)]
    widths = {"hidden_size": max(d for *_, d in sizes), "head_dim": max(hd for _, _, hd, _ in sizes),
              "num_attention_heads": max(H * hd for H, _, hd, _ in sizes),
              "num_key_value_heads": max(G * hd for _, G, hd, _ in sizes)}
    for name, value in widths.items():
        if value > largest:
            stored = aliases.get(name, name)
            label = name if stored == name else f"{name} ({stored})"
            raise IdinspectError(f"{config_file}: {label} implies a width of {value}, larger than any tensor in the "
                                 f"checkpoint (largest dimension {largest}); the config does not belong to these weights")


def _first(settings: Mapping[str, Any], *keys: str) -> tuple[str, int] | None:
    """(key, value) of the first of ``keys`` set (already checked to be a positive integer)."""
    for key in keys:
        if settings.get(key) is not None:
            return key, settings[key]
    return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["check_settings", "check_settings_against_headers", "check_sizes_against_headers", "os_reason", "read_json"]
