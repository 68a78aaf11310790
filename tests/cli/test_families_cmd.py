"""``idinspect families``: one line per model type transformers ships, in the state the registry gives it."""

from __future__ import annotations

import json

from idinspect.adapters import ADAPTERS, family_states
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

from tests.support.cli import run_cli


def test_every_model_type_transformers_ships_has_one_row_in_its_state():
    rows = {r["model_type"]: r for r in family_states()}
    assert set(CONFIG_MAPPING_NAMES) <= set(rows)
    for model_type, cls in ADAPTERS.items():
        assert rows[model_type]["state"] == "supported"
        assert (rows[model_type]["family"], rows[model_type]["module"], rows[model_type]["distribution"]) == (
            cls.family, cls.__module__, "idinspect")
    for model_type, reason in ADAPTERS.refused.items():
        assert model_type not in ADAPTERS and rows[model_type] == {
            "model_type": model_type, "state": "refused", "family": None, "module": None, "distribution": None,
            "reason": reason}
    unknown = [t for t, r in rows.items() if r["state"] == "unknown"]
    assert unknown and not set(unknown) & (set(ADAPTERS) | set(ADAPTERS.refused))


def test_the_command_prints_the_rows_and_their_counts():
    text = run_cli("families")
    assert text.code == 0
    lines = text.stdout.splitlines()
    rows = family_states()
    assert len(lines) == len(rows)
    llama = next(line for line in lines if line.split()[0] == "llama")
    assert llama.split()[1] == "supported" and "idinspect.adapters.llama" in llama
    mamba = next(line for line in lines if line.split()[0] == "mamba")
    assert mamba.split()[1] == "refused" and "no attention layers" in mamba
    counts = {s: sum(r["state"] == s for r in rows) for s in ("supported", "refused", "unknown")}
    assert text.stderr.strip() == (f"{counts['supported']} supported, 0 automatic, {counts['refused']} refused, "
                                   f"{counts['unknown']} unknown")

    js = run_cli("families", "--format", "json", "--state", "refused")
    assert js.code == 0 and js.stderr == ""
    doc = json.loads(js.stdout)
    assert doc["schema_version"] == 1 and doc["families"] == [r for r in rows if r["state"] == "refused"]


def test_probe_marks_a_plain_variant_automatic_and_refuses_what_is_not_modelled():
    """arcee: a Llama-like decoder transformers ships with no adapter here; mamba: no attention at all."""
    from idinspect.automatic import probe

    arcee = probe("arcee")
    assert arcee["state"] == "automatic", arcee
    assert arcee["evidence"]["jacobian_nullity"] == arcee["evidence"]["structural_unidentified"]
    assert "arcee" not in ADAPTERS                     # a probe registers nothing
    mamba = probe("mamba")
    assert mamba["state"] == "refused" and mamba["reason"].startswith("--auto:")
