"""The model card (README.md) an export writes: declared lineage and the export's own figures.

Hugging Face model cards are Markdown with a YAML header (huggingface_hub's ``ModelCard`` /
``ModelCardData``). The export declares ``base_model`` (the source it was exported from: its hub id,
or the path it was read from), adds the tags ``idinspect`` and ``gauge-fixed`` to whatever tags the
source's card had, and appends a section with the figures of the export's invariant check (largest
relative change of any invariant, where, whether the canonical form is unique, dtype, gauge). A
source card's text and other metadata are kept; ``idinspect audit --check-base-model`` reads the
``base_model`` back (:mod:`idinspect.audit.lineage`).
"""

from __future__ import annotations

TAGS = ("idinspect", "gauge-fixed")
SECTION = "## idinspect export"


def card_text(existing: str | None, base_model: str, figures: dict) -> str:
    """README.md text: ``existing`` (the source's card, or None) with ``base_model``, the tags and the
    figures section (replacing an earlier one)."""
    from huggingface_hub import ModelCard, ModelCardData

    card = ModelCard(existing) if existing and existing.lstrip().startswith("---") else None
    if card is None:
        body = existing or f"# {base_model.rstrip('/').split('/')[-1]} (gauge-fixed)\n"
        data = ModelCardData()
    else:
        body, data = card.text, card.data
    data.base_model = base_model
    data.tags = list(dict.fromkeys([*(data.tags or []), *TAGS]))
    if SECTION in body:
        body = body[:body.index(SECTION)].rstrip() + "\n"
    intro = f"Exported by idinspect in the gauge-fixed canonical form: the same function as `{base_model}`, " \
            "every attention layer's gauge fixed."
    lines = [SECTION, "", intro, "", "| figure | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in figures.items()]
    text = f"---\n{data.to_yaml()}\n---\n\n{body.rstrip()}\n\n" + "\n".join(lines) + "\n"
    return text
