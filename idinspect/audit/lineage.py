"""``audit --check-base-model``: is the model related to the base its model card declares?

The model card (README.md in the model's folder, read with huggingface_hub's ``ModelCard``) may name
``base_model`` (one id or a list). Each declared base is opened as ``compare`` opens a model: a local
path (relative to the model's folder, else to the working directory) or a hub id, fetched only as
the hub code fetches anything (``--offline`` forbids it, and an unreachable base is then an error of
the audit, naming it). The comparison is ``compare BASE MODEL``: a finding ``base-model-unrelated``
when its verdict is ``unrelated``, with the lineage p-value (a fine-tune of the base is same-lineage,
a gauge-fixed export of it same-function; docs/compare.md).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import IdinspectError
from ..rules import default_severity

README = "README.md"


def declared_bases(directory: Path | None) -> list[str]:
    """The card's ``base_model`` entries ([] without a card or without the key)."""
    if directory is None or not (Path(directory) / README).is_file():
        return []
    from huggingface_hub import ModelCard

    path = Path(directory) / README
    try:
        card = ModelCard.load(path)
    except Exception as exc:  # noqa: BLE001 - huggingface_hub raises several kinds for a bad YAML header
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise IdinspectError(f"{path}: not a readable model card ({reason}); fix its YAML header") from None
    base = card.data.base_model
    if base is None:
        return []
    bases = [base] if isinstance(base, str) else list(base)
    bad = [b for b in bases if not isinstance(b, str) or not b.strip()]
    if bad:
        raise IdinspectError(f"{path}: base_model {bad[0]!r} is not a model id or path; fix the card's YAML header")
    return bases


def _where(base: str, directory: Path | None, cwd: Path) -> str:
    for root in (directory, cwd):
        if root is not None and (Path(root) / base).exists():
            return str(Path(root) / base)
    return base


def base_model_findings(model, directory: Path | None, load_options: dict, cwd: Path, alpha: float | None = None) -> list[dict]:
    """Analyzer-style findings: one per declared base the weights are unrelated to."""
    from ..compare import ALPHA, compare

    alpha = ALPHA if alpha is None else alpha
    out = []
    for base in declared_bases(directory):
        r = compare(_where(base, directory, cwd), model, alpha=alpha, **load_options)
        if r.verdict != "unrelated":
            continue
        t = r.lineage
        evidence = ("no layer has heads of the same width" if t is None else
                    f"lineage p = {t.p_value:.3g} (alpha {alpha:g}; {t.statistic} of {t.heads} heads nearest in their "
                    f"own layer, {t.expected:.1f} by chance)")
        out.append({"rule": "base-model-unrelated", "severity": default_severity("base-model-unrelated"), "layer": None, "tensor": None, "file": README,
                    "base_model": base, "p_value": None if t is None else t.p_value,
                    "message": f"the model card declares base_model {base!r}, but the weights are unrelated to it: "
                               f"{evidence}"})
    return out
