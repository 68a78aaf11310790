"""One survey row per model: ``idinspect.inspect`` on the model, reduced to one flat record.

A row never raises: a model that cannot be opened or analysed gives a row with ``status``
"failed", the one-line ``error`` and its ``error_kind`` ("bad-input": an IdinspectError, never
retried; "transient": a :class:`~idinspect.errors.TransientError`, an OSError or MemoryError,
which the backends retry; "internal": anything else, a bug, not retried).

Every field but :data:`TIMING_FIELDS` is a function of the model's files and the options, so two
backends (process pool, Ray) give identical rows for the same survey.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

from .resume import local_revision, local_source_revision

#: Version of the row layout; fields are only ever added.
ROW_VERSION = 1

#: (field, type) in column order; types are "string", "int64", "float64" (all nullable).
ROW_FIELDS: tuple[tuple[str, str], ...] = (
    ("source", "string"),
    ("revision", "string"),
    ("status", "string"),
    ("family", "string"),
    ("model_type", "string"),
    ("architecture", "string"),
    ("layers", "int64"),
    ("hidden_size", "int64"),
    ("heads", "int64"),
    ("kv_heads", "int64"),
    ("head_dim", "int64"),
    ("positional", "string"),
    ("rotary_dim", "int64"),
    ("model_parameters", "int64"),
    ("attention_parameters", "int64"),
    ("unidentified_parameters", "int64"),
    ("identification_ratio", "float64"),
    ("unidentified_with_weights", "int64"),
    ("closed_form", "string"),
    ("closed_form_ratio", "float64"),
    ("findings_error", "int64"),
    ("findings_warning", "int64"),
    ("findings_note", "int64"),
    ("fingerprint", "string"),
    ("heavy_tail_alpha_qk", "float64"),
    ("heavy_tail_alpha_ov", "float64"),
    ("heavy_tail_layers_outside", "int64"),
    ("whole_model_form", "string"),
    ("whole_model_symmetries", "int64"),
    ("bytes_read", "int64"),
    ("bytes_fetched", "int64"),
    ("seconds", "float64"),
    ("error", "string"),
    ("error_kind", "string"),
    ("tool_version", "string"),
    ("row_version", "int64"),
)
FIELD_NAMES = tuple(name for name, _ in ROW_FIELDS)

#: Fields that depend on when and where the row was made, not on the model.
TIMING_FIELDS = ("seconds",)


@dataclass(frozen=True)
class SurveyOptions:
    """What every model of a survey is inspected with (sent to each worker; plain values only)."""

    token: str | None = None
    cache_dir: str | None = None
    offline: bool = False
    device: str = "cpu"
    #: Also compute the model's fingerprint (:mod:`idinspect.compare.fingerprint`) and fill the
    #: row's ``fingerprint`` column with its digest (as ``idinspect fingerprint --digest`` prints it).
    fingerprint: bool = False
    #: Per-model wall-clock limit in seconds (None: none); see :mod:`idinspect.survey.limits`.
    timeout: float | None = 3600.0
    #: Per-model memory limit in bytes beyond the worker's own (None: the local pool's memory budget).
    model_memory: int | None = None
    #: Also count the whole model's continuous symmetries (:mod:`idinspect.analysis.whole_model`): the
    #: ``whole_model_form`` column ("not derived" where the family's form is not) and
    #: ``whole_model_symmetries`` (logits convention; null where not derived).
    whole_model: bool = False
    #: Also fit the heavy-tailed spectra (:mod:`idinspect.forms.per_head.heavy_tail`): the ``heavy_tail_*`` columns.
    heavy_tails: bool = False


def empty_row(source: str) -> dict:
    """A row with every field present and null except ``source`` and the versions."""
    from .. import __version__

    row = dict.fromkeys(FIELD_NAMES)
    row.update(source=source, tool_version=__version__, row_version=ROW_VERSION)
    return row


def survey_row(source: str, options: SurveyOptions | dict | None = None) -> dict:
    """Inspect ``source`` (directory, ``pkg:``, ``org/name[@rev]``) and return its row; never raises
    (except KeyboardInterrupt/SystemExit)."""
    opts = options if isinstance(options, SurveyOptions) else SurveyOptions(**(options or {}))
    row = empty_row(source)
    start = time.perf_counter()
    try:
        _fill(row, source, opts)
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - the row records it; the survey goes on
        row.update(status="failed", error=_message(exc), error_kind=error_kind(exc))
        if row["revision"] is None:
            row["revision"] = local_source_revision(source)
    row["seconds"] = round(time.perf_counter() - start, 6)
    return row


def error_kind(exc: BaseException) -> str:
    """"transient" (retry may help), "bad-input" (an IdinspectError) or "internal" (a bug)."""
    from ..errors import IdinspectError

    if isinstance(exc, IdinspectError):
        return "transient" if exc.transient else "bad-input"
    if isinstance(exc, (OSError, MemoryError)):
        return "transient"
    return "internal"


def _message(exc: BaseException) -> str:
    from ..errors import IdinspectError, one_line

    text = one_line(exc)
    return text if isinstance(exc, IdinspectError) else f"{type(exc).__name__}: {text}"


def _fill(row: dict, source: str, opts: SurveyOptions) -> None:
    from ..analysis.inspection import inspect
    from ..model import load

    model = load(source, token=opts.token, cache_dir=opts.cache_dir, local_files_only=opts.offline)
    with model:
        counter = _count_bytes_read(model)
        result = inspect(model, device=opts.device, whole_model=opts.whole_model, heavy_tails=opts.heavy_tails)
        if opts.fingerprint:
            row["fingerprint"] = fingerprint_digest(model, opts)
        row["bytes_read"] = counter.total
        path = model.provenance.path
        row["revision"] = model.provenance.revision or (local_revision(path) if path is not None else None)
    row.update(row_fields(result))


def row_fields(result: dict) -> dict:
    """The model-dependent fields of a row from an ``inspect`` result (the JSON-contract dict)."""
    model, totals = result.get("model") or {}, result.get("totals") or {}
    counts = {"error": 0, "warning": 0, "note": 0}
    for finding in result.get("findings") or []:
        if finding.get("severity") in counts:
            counts[finding["severity"]] += 1
    return {
        "family": model.get("family") or model.get("model_type"), "model_type": model.get("model_type"),
        "architecture": model.get("architecture"),
        "layers": model.get("layers"), "hidden_size": model.get("hidden_size"), "heads": model.get("heads"),
        "kv_heads": model.get("kv_heads"), "head_dim": model.get("head_dim"), "positional": model.get("positional"),
        "rotary_dim": model.get("rotary_dim"),
        "model_parameters": totals.get("model_parameters"),
        "attention_parameters": totals.get("attention_parameters"),
        "unidentified_parameters": totals.get("unidentified_parameters"),
        "identification_ratio": totals.get("identification_ratio"),
        "unidentified_with_weights": totals.get("unidentified_with_weights"),
        "closed_form": totals.get("closed_form"), "closed_form_ratio": totals.get("closed_form_ratio"),
        "bytes_fetched": (model.get("fetch") or {}).get("bytes_fetched"),
        "findings_error": counts["error"], "findings_warning": counts["warning"], "findings_note": counts["note"],
        **_heavy_tail_fields(result),
        **_whole_model_fields(result.get("whole_model")),
    }


def _heavy_tail_fields(result: dict) -> dict:
    """Median over layers of the heavy-tail exponent alpha of the per-layer circuit sums W_QK and
    W_OV (gauge-invariant; docs/mathematics.md, "Heavy-tailed spectra"), and how many layers have
    either outside the usual range (nothing when the result has no heavy-tail figures)."""
    from ..reports.heavy_tail import layer_tails

    tails, _ = layer_tails(result)
    if not tails:
        return {}
    out: dict = {"heavy_tail_layers_outside": sum(any(t.outside.values()) for t in tails)}
    for form in ("qk", "ov"):
        alphas = [t.alpha[form] for t in tails if t.alpha[form] is not None]
        out[f"heavy_tail_alpha_{form}"] = statistics.median(alphas) if alphas else None
    return out


def _whole_model_fields(section: dict | None) -> dict:
    """The row's whole-model columns from the ``whole_model`` section (nothing when not asked)."""
    if section is None:
        return {}
    if not section.get("derived"):
        return {"whole_model_form": "not derived"}
    return {"whole_model_form": section["form"], "whole_model_symmetries": section["exact"]}


def fingerprint_digest(model, opts: SurveyOptions) -> str:
    """The digest of the open model's fingerprint, the one ``idinspect fingerprint --digest`` prints
    (:func:`idinspect.compare.fingerprint_digest`; it leaves out source and revision, so it does not
    depend on how the survey named the model). Reads the attention tensors a second time."""
    from ..compare import fingerprint_dict, model_invariants
    from ..compare import fingerprint_digest as digest

    inv = model_invariants(model, device=opts.device)
    return digest(fingerprint_dict(inv, model.provenance.revision))


@dataclass
class _ByteCounter:
    total: int = 0


def _count_bytes_read(model) -> _ByteCounter:
    """Count the tensor bytes the model's reader hands out (the reader is shared with the adapter,
    so wrapping its ``get`` on the instance sees every read of the inspection)."""
    counter = _ByteCounter()
    reader = model.reader
    read = reader.get

    def counting_get(name: str):
        tensor = read(name)
        counter.total += tensor.numel() * tensor.element_size()
        return tensor

    reader.get = counting_get
    return counter


def comparable(row: dict) -> dict:
    """``row`` without :data:`TIMING_FIELDS` (what two backends must agree on)."""
    return {k: v for k, v in row.items() if k not in TIMING_FIELDS}


def options_dict(opts: SurveyOptions) -> dict:
    return asdict(opts)
