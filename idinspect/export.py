"""``export``: a checkpoint in, the same checkpoint in the balanced gauge out.

Data flows one way: adapter.read_layer -> gauge.canonicalize (float64) -> adapter.write_layer
(one cast, original names / orientation / fusion) -> shard writer -> files. Every other tensor is
copied bit for bit (or cast, with ``dtype``); shard names, weight map and header metadata are
kept, with an ``idinspect`` provenance entry added to every shard.

One streaming pass, holding about one layer (plus the tensor being written): each shard is written
header first, then tensor by tensor in file order; a layer is canonicalised, cast and checked
(largest invariant change between the original and the cast result) when its first attention
tensor comes up. The largest error over all layers and the uniqueness flag go into every shard
header but are known only at the end: the header reserves fixed-width slots for them inside the
``idinspect`` metadata string (JSON whitespace pads the values), patched in place once every
shard is written, before config.json, the index and the rename.

Safety: nothing under the input is written; output goes to ``.OUT.idinspect-tmp-XXXX`` beside
``OUT``, config.json last, and is renamed to ``OUT`` only when complete.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checkpoint import INDEX_FILE, SafetensorsCheckpoint
from .errors import IdinspectError
from .export_files import CONFIG, config_text, copy_files, index_text, plan_copies
from .gauge import GAUGE_NAME, GAUGE_VERSION, Degeneracy, InvariantError, canonicalize, largest_invariant_error
from .hub import EXPORT_PATTERNS
from .model import Model, load
from .shard_writer import ShardWriter, Slot, TensorSpec, patch_slots

DTYPES: dict[str, torch.dtype | None] = {"keep": None, "float32": torch.float32, "float64": torch.float64,
                                          "bfloat16": torch.bfloat16, "float16": torch.float16}
_CASTABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TEMP_MARK = ".idinspect-tmp-"
#: Header slots patched after the data: the widest JSON a float can need (repr of a negative
#: subnormal is 24 characters) and true/false.
SLOT_WIDTHS = {"max_invariant_error": 24, "unique": 5}
PROVENANCE_KEY = "idinspect"

#: progress(stage, done, total): stage "gauge" counts layers, "write" counts tensors.
Progress = Callable[[str, int, int], None]


@dataclass
class ExportResult:
    """What was written, and how exactly it preserves the function."""

    out: Path
    source: str
    revision: str | None
    dtype: str
    shards: list[str]
    total_size: int
    tensors: int
    gauge_fixed_tensors: int
    copied_files: list[str]
    skipped_files: list[str]
    max_invariant_error: float
    worst_invariant: str
    degeneracies: list[Degeneracy] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"out": str(self.out), "source": self.source, "revision": self.revision, "dtype": self.dtype,
                "gauge": {"name": GAUGE_NAME, "version": GAUGE_VERSION}, "shards": self.shards,
                "total_size": self.total_size, "tensors": self.tensors,
                "gauge_fixed_tensors": self.gauge_fixed_tensors, "copied_files": self.copied_files,
                "skipped_files": self.skipped_files, "max_invariant_error": self.max_invariant_error,
                "worst_invariant": self.worst_invariant, "unique": not self.degeneracies,
                "degeneracies": [d.describe() for d in self.degeneracies]}


def export(source, out: str | Path, *, dtype: str = "keep", force: bool = False, revision: str | None = None,
           token: str | None = None, cache_dir: str | Path | None = None, local_files_only: bool = False,
           progress: Progress | None = None) -> ExportResult:
    """Write ``source`` (directory, hub id or open :class:`Model`) gauge-fixed to directory ``out``.

    ``dtype`` is one of :data:`DTYPES` ("keep" keeps every tensor's stored dtype). An existing
    ``out`` is an error unless ``force``. Raises :class:`IdinspectError` on bad input.
    """
    if dtype not in DTYPES:
        raise IdinspectError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    target = DTYPES[dtype]
    out = Path(out).expanduser()
    _refuse_existing(out, force)
    owned = not isinstance(source, Model)
    model = load(source, revision=revision, token=token, allow_patterns=EXPORT_PATTERNS, cache_dir=cache_dir,
                 local_files_only=local_files_only) if owned else source
    try:
        return _export(model, out, dtype, target, progress or (lambda *a: None))
    finally:
        if owned:
            model.close()


def _export(model: Model, out: Path, dtype_name: str, target: torch.dtype | None, progress: Progress) -> ExportResult:
    reader = model.reader
    src = model.provenance.path
    if not isinstance(reader, SafetensorsCheckpoint) or src is None:
        raise IdinspectError("export needs a checkpoint directory or hub id (a model in memory has no files to keep); "
                             "save_pretrained it first")
    _refuse_overlap(Path(src), out)
    owner = _attention_owners(model)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _make_temp_dir(out)
    try:
        copies, skipped = plan_copies(Path(src))
        rewritten = set(reader.shard_files) | {INDEX_FILE}
        skipped = [f for f in skipped if f not in rewritten]
        copy_files(Path(src), tmp, copies)
        info, slots = _provenance(model, dtype_name)
        layers = _LayerTensors(model, target, progress)
        total, count, changed = 0, 0, False
        n_tensors = len(reader.keys())
        patches: dict[str, dict[str, tuple[int, int]]] = {}
        for fname in reader.shard_files:
            specs: dict[str, TensorSpec] = {}
            for name in reader.keys_in(fname):
                stored = reader.dtype(name)
                out_dtype = target if target is not None and stored in _CASTABLE else stored
                changed |= out_dtype != stored
                specs[name] = TensorSpec(out_dtype, tuple(reader.shape(name)))
            metadata = {**reader.metadata(fname), "format": "pt", PROVENANCE_KEY: info}
            with ShardWriter(tmp / fname, specs, metadata, slots) as writer:
                for name in writer.order:
                    if name in owner:
                        tensor = layers.get(owner[name], name)
                    else:
                        tensor = reader.get(name)
                        if tensor.dtype != specs[name].dtype:
                            tensor = tensor.to(specs[name].dtype)
                    writer.write(name, tensor)
                    del tensor
                    count += 1
                    progress("write", count, n_tensors)
            patches[fname] = writer.slots
            total += sum(s.nbytes for s in specs.values())
        layers.release()
        worst, where, degeneracies = layers.summary()
        values = _slot_values(worst, unique=not degeneracies)
        for fname, at in patches.items():
            patch_slots(tmp / fname, at, values)
        if reader.index_path is not None:
            (tmp / INDEX_FILE).write_text(index_text(reader.index_path, total), encoding="utf-8")
        (tmp / CONFIG).write_text(config_text(Path(src), _config_dtype(target) if changed else None), encoding="utf-8")
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out=out, source=model.provenance.source, revision=model.provenance.revision, dtype=dtype_name,
                        shards=list(reader.shard_files), total_size=total, tensors=count,
                        gauge_fixed_tensors=len(owner), copied_files=[CONFIG, *copies], skipped_files=skipped,
                        max_invariant_error=worst, worst_invariant=where, degeneracies=degeneracies)


class _LayerTensors:
    """The gauge-fixed checkpoint tensors of one layer at a time, and what each layer's check found.

    A layer is computed when first asked for (canonicalise in float64, cast once to the output
    dtype, compare the invariants of the original and the cast result, write through the adapter)
    and kept until another layer is asked for. Recomputing an evicted layer (only for a sharding
    that splits a layer around another) gives the same tensors; its check is recorded once.
    """

    def __init__(self, model: Model, target: torch.dtype | None, progress: Progress):
        self.model, self.target, self.progress = model, target, progress
        self.index: int | None = None
        self.tensors: dict[str, torch.Tensor] = {}
        self.errors: dict[int, InvariantError] = {}
        self.degeneracies: dict[int, list[Degeneracy]] = {}

    def get(self, layer: int, name: str) -> torch.Tensor:
        if self.index != layer:
            self.release()
            self.tensors = self._compute(layer)
            self.index = layer
        return self.tensors[name]

    def release(self) -> None:
        self.tensors, self.index = {}, None

    def summary(self) -> tuple[float, str, list[Degeneracy]]:
        """(largest error, where, every non-uniqueness) over all layers, in layer order (last max wins)."""
        for i in range(self.model.num_layers):
            if i not in self.errors:      # every layer's tensors are written, so none is missing; be sure
                self._compute(i)
        worst, where, degeneracies = 0.0, "", []
        for i in range(self.model.num_layers):
            if self.errors[i].error >= worst:
                worst, where = self.errors[i].error, self.errors[i].where(i)
            degeneracies += self.degeneracies[i]
        return worst, where, degeneracies

    def _compute(self, i: int) -> dict[str, torch.Tensor]:
        layer = self.model.layer(i)
        original = layer.to(torch.float64)                      # the one widening cast, shared below
        fixed, report = canonicalize(original)
        cast = fixed.replace(**{role: t.to(self.target or getattr(layer, role).dtype)
                                for role, t in fixed.tensors().items()})
        if i not in self.errors:
            for role, t in fixed.tensors().items():             # round in place: the cast values in float64,
                t.copy_(getattr(cast, role))                    # without new float64 buffers
            self.errors[i] = largest_invariant_error(original, fixed)
            self.degeneracies[i] = report.degeneracies
            self.progress("gauge", len(self.errors), self.model.num_layers)
        del fixed, original
        return self.model.adapter.write_layer(cast, dtype=self.target)


def _attention_owners(model: Model) -> dict[str, int]:
    """Checkpoint tensor name -> layer index for every attention tensor the adapter rewrites."""
    owner = {}
    for i in range(model.num_layers):
        for name in model.adapter.attention_keys(i):
            if name not in model.reader:
                raise IdinspectError(f"tensor {name} (layer {i} attention) is missing from the checkpoint")
            owner[name] = i
    return owner


def _provenance(model: Model, dtype_name: str) -> tuple[str, dict[str, Slot]]:
    """The ``idinspect`` metadata string (compact JSON, sorted keys) with placeholder slots.

    ``max_invariant_error`` and ``unique`` are known only after every layer: their values are
    ``null`` padded with spaces to :data:`SLOT_WIDTHS` (valid JSON, so every header parses at
    every moment), overwritten by :func:`_slot_values`.
    """
    from . import __version__

    info = {"tool": "idinspect", "version": __version__, "gauge": {"name": GAUGE_NAME, "version": GAUGE_VERSION},
            "source": model.provenance.source, "revision": model.provenance.revision, "dtype": dtype_name,
            **{key: None for key in SLOT_WIDTHS}}
    text, slots = "{", {}
    for n, key in enumerate(sorted(info)):
        text += ("," if n else "") + json.dumps(key) + ":"
        if key in SLOT_WIDTHS:
            slots[key] = Slot(PROVENANCE_KEY, len(text), SLOT_WIDTHS[key])
            text += "null".ljust(SLOT_WIDTHS[key])
        else:
            text += json.dumps(info[key], sort_keys=True, separators=(",", ":"))
    return text + "}", slots


def _slot_values(worst: float, unique: bool) -> dict[str, str]:
    """The final slot texts: JSON values left-aligned in their fixed widths."""
    values = {"max_invariant_error": json.dumps(worst), "unique": json.dumps(unique)}
    for key, text in values.items():
        if len(text) > SLOT_WIDTHS[key]:
            raise IdinspectError(f"internal: {key} {text} is wider than its header slot")
    return {key: text.ljust(SLOT_WIDTHS[key]) for key, text in values.items()}


def _config_dtype(target: torch.dtype | None) -> str | None:
    return None if target is None else str(target).removeprefix("torch.")


def _refuse_existing(out: Path, force: bool) -> None:
    if (out.exists() or out.is_symlink()) and not force:
        raise IdinspectError(f"{out} already exists; choose another OUT or pass --force to replace it")


def _refuse_overlap(src: Path, out: Path) -> None:
    s, o = src.resolve(), out.resolve()
    if s == o or s.is_relative_to(o) or o.is_relative_to(s):
        raise IdinspectError(f"{out}: OUT must lie outside the input checkpoint {src} (the input is never modified)")


def _make_temp_dir(out: Path) -> Path:
    """``.OUT.idinspect-tmp-XXXXXXXX`` beside OUT, with the umask's usual permissions."""
    for _ in range(100):
        tmp = out.parent / f".{out.name}{TEMP_MARK}{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
    raise IdinspectError(f"{out.parent}: cannot create a temporary folder for the export")


def _publish(tmp: Path, out: Path) -> None:
    """Rename the finished temporary folder to ``out``, replacing an old ``out`` (--force)."""
    old = None
    if out.exists() or out.is_symlink():
        if out.is_dir() and not out.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.idinspect-old-", dir=out.parent))
            os.replace(out, old / out.name)
        else:
            out.unlink()
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
