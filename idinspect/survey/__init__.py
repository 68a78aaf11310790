"""``idinspect survey``: one row per model over many models, on a local process pool or a Ray cluster.

``run_survey(sources, jsonl=..., parquet=...)`` runs :func:`idinspect.inspect` on each model
(:mod:`.rows`), on a backend (:mod:`.pool`, :mod:`.ray_backend`), writing rows as they finish
(:mod:`.output`) and skipping models already done at the same revision (:mod:`.resume`).
"""

from __future__ import annotations

from .rows import FIELD_NAMES, ROW_FIELDS, TIMING_FIELDS, SurveyOptions, comparable, survey_row
from .runner import SurveyResult, read_sources, run_survey

__all__ = ["FIELD_NAMES", "ROW_FIELDS", "TIMING_FIELDS", "SurveyOptions", "SurveyResult", "comparable",
           "read_sources", "run_survey", "survey_row"]
