"""``export``: a checkpoint in, the same checkpoint in the balanced gauge out.

Data flows one way: adapter.read_layer -> gauge.canonicalize (float64) -> one cast -> invariant
check -> adapter.write_layer (original names / orientation / fusion) -> shard writer -> files
(the layer work in :mod:`.export_layers`). Every other tensor is
copied bit for bit (or cast, with ``dtype``); shard names, weight map and header metadata are
kept, with an ``idinspect`` provenance entry added to every shard. Tensors kept bit for bit are
copied file to file by the kernel (:meth:`~idinspect.exporting.shard_writer.ShardWriter.copy`), never read
into memory.

One streaming pass: each shard is written header first, then tensor by tensor in file order; each
layer is canonicalised, cast and checked (largest invariant change between the original and the
cast result) on a worker thread one layer ahead of the writer, so memory stays at about two
layers' attention (one being written, one being computed) plus the tensor being copied. Closed
shards are fsynced on another thread while the next is written. The largest error over all
layers and the uniqueness flag go into every shard header but are known only at the end: the
header reserves fixed-width slots for them inside the ``idinspect`` metadata string (JSON
whitespace pads the values), patched in place once every shard is written and synced, before
config.json, the index and the rename.

Safety: nothing under the input is written; output goes to ``.OUT.idinspect-tmp-PID-XXXX`` beside
``OUT``, config.json last, and is renamed to ``OUT`` only when complete, with a no-replace rename
(:mod:`.claim`: what OUT may be, --force, stale temporary folders).
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import IdinspectError
from ..forms import form_of
from ..forms.per_head import Degeneracy
from ..model import Model, load
from ..sources.checkpoint import SafetensorsCheckpoint
from ..sources.file_names import CONFIG_FILE, INDEX_FILE
from ..sources.hub import EXPORT_PATTERNS
from ..sources.local_source import gguf_export_refusal
from ..sources.safetensors_format import tensor_spans
from ..sources.validate import os_reason
from . import DTYPE_NAMES
from .claim import check_out, make_temp, publish
from .files import config_text, copy_files, index_text, plan_copies
from .layers import LayerStream
from .provenance import verified_commit
from .shard_writer import (
    ShardWriter,
    Slot,
    TensorSpec,
    file_order,
    patch_slots,
    sync_file,
)

DTYPES: dict[str, torch.dtype | None] = dict(zip(DTYPE_NAMES, (None, torch.float32, torch.float64, torch.bfloat16,
                                                                torch.float16)))
_CASTABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
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
    gauge: str = "balanced"
    gauge_version: int = 1
    #: Why the source's commit is not recorded (its bytes could not be verified), else None.
    revision_note: str | None = None
    #: ``export --whole-model``: what the whole-model fix fixed and left (:class:`~.whole_model.WholeModelFix`).
    whole_model: dict | None = None

    def to_dict(self) -> dict:
        return {"out": str(self.out), "source": self.source, "revision": self.revision, "dtype": self.dtype,
                "gauge": {"name": self.gauge, "version": self.gauge_version}, "shards": self.shards,
                "total_size": self.total_size, "tensors": self.tensors,
                "gauge_fixed_tensors": self.gauge_fixed_tensors, "copied_files": self.copied_files,
                "skipped_files": self.skipped_files, "max_invariant_error": self.max_invariant_error,
                "worst_invariant": self.worst_invariant, "unique": not self.degeneracies,
                "degeneracies": [d.describe() for d in self.degeneracies], "revision_note": self.revision_note,
                "whole_model": self.whole_model}


def export(source, out: str | Path, *, dtype: str = "keep", force: bool = False, revision: str | None = None,
           token: str | None = None, cache_dir: str | Path | None = None, local_files_only: bool = False,
           progress: Progress | None = None, whole_model: bool = False) -> ExportResult:
    """Write ``source`` (directory, hub id or open :class:`Model`) gauge-fixed to directory ``out``.

    ``dtype`` is one of :data:`DTYPES` ("keep" keeps every tensor's stored dtype). An existing
    ``out`` is an error unless ``force``. ``whole_model``: also fix the whole-model symmetries
    (:mod:`idinspect.gauge.whole_model_fix`: norm gains, residual rotation, gated-unit scalings)
    before the attention gauge. Raises :class:`IdinspectError` on bad input.
    """
    if dtype not in DTYPES:
        raise IdinspectError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    target = DTYPES[dtype]
    out = Path(out).expanduser()
    if isinstance(source, (str, Path)) and Path(source).expanduser().is_dir():
        _refuse_overlap(Path(source).expanduser(), out)  # the more useful message, before --force is judged
    check_out(out, force)
    owned = not isinstance(source, Model)
    model = load(source, revision=revision, token=token, allow_patterns=EXPORT_PATTERNS, cache_dir=cache_dir,
                 local_files_only=local_files_only) if owned else source
    try:
        return _export(model, out, dtype, target, progress or (lambda *a: None), force, whole_model)
    finally:
        if owned:
            model.close()


def _export(model: Model, out: Path, dtype_name: str, target: torch.dtype | None, progress: Progress,
            force: bool = False, whole_model: bool = False) -> ExportResult:
    reader = model.reader
    src = model.provenance.path
    if getattr(reader, "gguf_architecture", None) is not None:
        raise gguf_export_refusal(src)
    if not isinstance(reader, SafetensorsCheckpoint) or src is None:
        raise IdinspectError("export needs a checkpoint directory or hub id (a model in memory has no files to keep); "
                             "save_pretrained it first")
    _refuse_overlap(Path(src), out)
    threading.Thread(target=_import_card_modules, name="idinspect-card-import", daemon=True).start()
    owner = _attention_owners(model)
    fixed = _whole_model_view(model) if whole_model else None
    view = fixed[0] if fixed else model
    plans = {fname: _shard_specs(reader, fname, target) for fname in reader.shard_files}
    changed = any(spec.dtype != reader.dtype(name) for specs in plans.values() for name, spec in specs.items())

    tmp = make_temp(out)  # OUT's parent made if needed; stale temporary folders of dead exports removed
    try:
        copies, skipped = plan_copies(Path(src))
        rewritten = set(reader.shard_files) | {INDEX_FILE}
        skipped = [f for f in skipped if f not in rewritten]
        read = [CONFIG_FILE, *copies, *reader.shard_files, *([INDEX_FILE] if reader.index_path is not None else [])]
        revision, revision_note = verified_commit(model.provenance.revision, Path(src), list(dict.fromkeys(read)))
        copy_files(Path(src), tmp, copies)
        info, slots = _provenance(model, dtype_name, revision, fixed is not None)
        total, count, n_tensors = 0, 0, len(reader.keys())
        patches: dict[str, dict[str, tuple[int, int]]] = {}
        with LayerStream(view, target, _schedule(plans, owner), progress) as layers, \
                ThreadPoolExecutor(max_workers=1, thread_name_prefix="idinspect-fsync") as syncer:
            synced = []
            for fname, specs in plans.items():
                metadata = {**reader.metadata(fname), "format": "pt", PROVENANCE_KEY: info}
                source = Path(src) / fname
                spans = tensor_spans(source)
                with ShardWriter(tmp / fname, specs, metadata, slots, sync=False) as writer, \
                        open(source, "rb", buffering=0) as raw:
                    for name in writer.order:
                        if name in owner:
                            writer.write(name, layers.get(owner[name], name))
                        elif fixed and fixed[1].transforms(name):
                            writer.write(name, fixed[1].get(name).to(specs[name].dtype))
                        elif specs[name].dtype == reader.dtype(name):
                            writer.copy(name, raw.fileno(), spans[name])      # bit for bit, file to file
                        else:
                            writer.write(name, reader.get(name).to(specs[name].dtype))
                        count += 1
                        progress("write", count, n_tensors)
                synced.append(syncer.submit(sync_file, tmp / fname))   # durable while the next shard is written
                patches[fname] = writer.slots
                total += sum(s.nbytes for s in specs.values())
            worst, where, degeneracies = layers.summary()
            for job in synced:
                job.result()
        _write_card(tmp, model, dtype_name, worst, where, degeneracies)
        values = _slot_values(worst, unique=not degeneracies)
        for fname, at in patches.items():
            patch_slots(tmp / fname, at, values)
        if reader.index_path is not None:
            (tmp / INDEX_FILE).write_text(index_text(reader.index_path, total), encoding="utf-8")
        (tmp / CONFIG_FILE).write_text(config_text(Path(src), _config_dtype(target) if changed else None), encoding="utf-8")
        publish(tmp, out, force)  # atomic, never over what appeared at OUT meanwhile
    except OSError as exc:  # a full disk, a size limit, a vanished folder: named, and nothing left behind
        shutil.rmtree(tmp, ignore_errors=True)
        where = exc.filename or tmp
        raise IdinspectError(f"{out}: the export could not be written ({where}: {os_reason(exc)}); nothing was "
                             "left behind") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(out=out, source=model.provenance.source, revision=revision, dtype=dtype_name,
                        shards=list(reader.shard_files), total_size=total, tensors=count,
                        gauge_fixed_tensors=len(owner), copied_files=[CONFIG_FILE, *copies], skipped_files=skipped,
                        max_invariant_error=worst, worst_invariant=where, degeneracies=degeneracies,
                        gauge=gauge_name(model), gauge_version=form_of(model).gauge_version, revision_note=revision_note,
                        whole_model=fixed[1].fix.to_dict() if fixed else None)


def _import_card_modules() -> None:
    """Import what :func:`_write_card` needs (huggingface_hub's model card, its hub client and YAML:
    0.22-0.24 s of one core) on a thread while the layers are computed, instead of after the last
    one on the export's critical path; the card itself then takes ~1 ms."""
    from huggingface_hub import ModelCard, ModelCardData  # noqa: F401


def _write_card(tmp: Path, model: Model, dtype_name: str, worst: float, where: str, degeneracies: list) -> None:
    """README.md: the model card declaring the source as ``base_model``, with the export's figures (:mod:`.model_card`)."""
    from .model_card import card_text

    readme = tmp / "README.md"
    if readme.is_symlink():                    # never write through a link the source shipped
        readme.unlink()
    existing = readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None
    figures = {"largest relative change of an invariant": f"{worst:.3g}", "where": where or "-",
               "canonical form unique": "yes" if not degeneracies else f"no ({len(degeneracies)} degeneracies)",
               "dtype": dtype_name, "gauge": f"{gauge_name(model)} (version {form_of(model).gauge_version})",
               "check": f"idinspect verify {model.provenance.source} THIS_FOLDER"}
    readme.write_text(card_text(existing, str(model.provenance.source), figures), encoding="utf-8")


def _whole_model_view(model: Model):
    """(the model seen through the whole-model fix of its form (:class:`~.whole_model.WholeModelReader`,
    :class:`~.whole_model_ln.PreLayerNormReader`), that reader): the attention blocks are read,
    gauge-fixed and checked as the fix transformed them; IdinspectError where the form is not fixed."""
    import copy

    from ..analysis.whole_model import PRE_LN
    from ..analysis.whole_model_read import FORM_BY_TYPE
    from .whole_model import WholeModelReader, refusal
    from .whole_model_ln import PreLayerNormReader

    why = refusal(model)
    if why:
        raise IdinspectError(why)
    form = FORM_BY_TYPE[model.config.model_type]
    transformed = PreLayerNormReader(model) if form == PRE_LN else WholeModelReader(model)
    adapter = copy.copy(model.adapter)
    adapter.reader = transformed
    view = copy.copy(model)
    view.adapter, view.reader = adapter, transformed
    return view, transformed


def _shard_specs(reader: SafetensorsCheckpoint, fname: str, target: torch.dtype | None) -> dict[str, TensorSpec]:
    """What the output shard holds: the input's names and shapes; floating dtypes cast to ``target``."""
    specs = {}
    for name in reader.keys_in(fname):
        stored = reader.dtype(name)
        specs[name] = TensorSpec(target if target is not None and stored in _CASTABLE else stored,
                                 tuple(reader.shape(name)))
    return specs


def _schedule(plans: dict[str, dict[str, TensorSpec]], owner: dict[str, int]) -> list[int]:
    """Layer indices in the order the writer first needs each (a repeat where shards interleave layers)."""
    order: list[int] = []
    for specs in plans.values():
        for name in file_order(specs):
            if name in owner and (not order or order[-1] != owner[name]):
                order.append(owner[name])
    return order


def _attention_owners(model: Model) -> dict[str, int]:
    """Checkpoint tensor name -> layer index for every attention tensor the adapter rewrites."""
    owner = {}
    for i in range(model.num_layers):
        for name in model.adapter.attention_keys(i):
            if name not in model.reader:
                raise IdinspectError(f"tensor {name} (layer {i} attention) is missing from the checkpoint")
            owner[name] = i
    return owner


def gauge_name(model: Model) -> str:
    """The gauge-fixed form the export writes: its form's (``balanced`` for the per-head form,
    ``balanced-latent`` for multi-head latent attention)."""
    return form_of(model).gauge_name


def _provenance(model: Model, dtype_name: str, revision: str | None,
                whole_model: bool = False) -> tuple[str, dict[str, Slot]]:
    """The ``idinspect`` metadata string (compact JSON, sorted keys) with placeholder slots.

    ``max_invariant_error`` and ``unique`` are known only after every layer: their values are
    ``null`` padded with spaces to :data:`SLOT_WIDTHS` (valid JSON, so every header parses at
    every moment), overwritten by :func:`_slot_values`.
    """
    from .. import __version__

    info = {"tool": "idinspect", "version": __version__, "gauge": {"name": gauge_name(model), "version": form_of(model).gauge_version},
            "source": model.provenance.source, "revision": revision, "dtype": dtype_name,
            **{key: None for key in SLOT_WIDTHS}}
    if whole_model:
        from ..gauge.whole_model_fix import WHOLE_GAUGE_NAME, WHOLE_GAUGE_VERSION

        info["whole_model_gauge"] = {"name": WHOLE_GAUGE_NAME, "version": WHOLE_GAUGE_VERSION}
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


def _refuse_overlap(src: Path, out: Path) -> None:
    s, o = src.resolve(), out.resolve()
    if s == o or s.is_relative_to(o) or o.is_relative_to(s):
        raise IdinspectError(f"{out}: OUT must lie outside the input checkpoint {src} (the input is never modified)")
