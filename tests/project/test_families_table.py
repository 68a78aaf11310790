"""docs/families.md and the adapter registry say the same: every supported model_type has its row (the
first column), every type a row names is supported, each row names the adapter module that reads its
types, and every model_type refused by name is named in the page (with its reason beside it)."""

from __future__ import annotations

import re
from pathlib import Path

from idinspect.adapters import ADAPTERS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "families.md"


def _rows() -> list[tuple[list[str], str]]:
    """(model types of the first column, the adapter module of the second) per table row."""
    from idinspect.commands.families_cmd import BEGIN

    out = []
    for line in PAGE.read_text(encoding="utf-8").split(BEGIN)[0].splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out.append((re.findall(r"`([^`]+)`", cells[0]), cells[1].strip("`")))
    return out


def test_every_supported_type_has_its_row_and_no_row_names_an_unsupported_one():
    listed = [t for types, _ in _rows() for t in types if t != "model_type"]
    assert sorted(set(ADAPTERS) - set(listed)) == [], "supported but missing from docs/families.md"
    assert sorted(set(listed) - set(ADAPTERS)) == [], "named in docs/families.md's first column but not supported"
    assert len(listed) == len(set(listed)), "a model_type has two rows"


def test_each_row_names_the_module_that_reads_its_types():
    for types, module in _rows():
        for t in (t for t in types if t in ADAPTERS):
            assert ADAPTERS[t].__module__.rsplit(".", 1)[1] + ".py" == module, (t, module)


def test_every_refused_type_is_named_in_the_page():
    text = PAGE.read_text(encoding="utf-8")
    assert [t for t in sorted(ADAPTERS.refused) if f"`{t}`" not in text] == []


def _generated_part() -> tuple[str, list[str]]:
    from idinspect.commands.families_cmd import BEGIN, END

    text = PAGE.read_text(encoding="utf-8")
    part = text[text.index(BEGIN):text.index(END) + len(END)]
    auto = re.search(r"^Automatic \(`--auto`.*?\n\n(.*?)\.$", part, re.DOTALL | re.MULTILINE)
    return part, re.findall(r"`([^`]+)`", auto.group(1)) if auto else []


def test_the_generated_part_is_what_idinspect_families_prints():
    """The page's generated tables are `idinspect families --auto --format markdown` for the installed
    transformers: supported, refused and unknown states from the registry now, automatic as the page
    recorded it (proven below). Regenerate the part with that command when this fails."""
    from idinspect.adapters import family_states

    from idinspect.commands.families_cmd import markdown

    part, automatic = _generated_part()
    assert markdown(family_states({t: {} for t in automatic}), auto=True) == part


def test_types_the_page_calls_automatic_are_proven():
    """Two of the page's automatic types (a different pair each day) go through --auto's proof."""
    import datetime

    from idinspect.automatic import probe

    _, automatic = _generated_part()
    assert automatic, "the page lists no automatic type"
    day = datetime.date.today().toordinal()
    for model_type in {automatic[day % len(automatic)], automatic[(day * 7 + 3) % len(automatic)]}:
        row = probe(model_type)
        assert row["state"] == "automatic", row
