"""The words of the ``whole_model`` section (``--whole-model``), shared by the text and HTML reports.

:func:`whole_model_rows` turns the section into (label, text) rows: one per component with its
count and closed form, the headline (logits), the log-probability extra, the nearly-null direction,
and for a tied head the tie diagnostics; a family whose form is not derived gets one row saying so.
"""

from __future__ import annotations

from .summary import fmt_int


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def whole_model_rows(section: dict) -> list[tuple[str, str]]:
    """(label, text) rows of the whole-model section."""
    total = section.get("parameters_total", 0)
    parts = ", ".join(f"{k} {fmt_int(v)}" for k, v in (section.get("parameters") or {}).items())
    rows = [("Parameters", f"{fmt_int(total)} stored: {parts}")]
    if not section.get("derived"):
        return rows + [("Not derived", str(section.get("reason", "")))]
    for c in section.get("components", []):
        rows.append((c["name"].replace("_", " "), f"{fmt_int(c['count'])}   {c['formula']}"))
    ratio = section.get("ratio")
    rows.append(("Exact (logits)", f"{fmt_int(section['exact'])} continuous symmetry dimensions"
                 + (f" ({ratio:.4%} of the parameters)" if ratio is not None else "")))
    extra = section.get("log_prob_extra", 0)
    rows.append(("Log-probabilities", f"+{fmt_int(extra)} = {fmt_int(section['exact_log_prob'])} where the outputs "
                 f"are log-probabilities ({section.get('log_prob_extra_formula')})"))
    near = section.get("nearly_null") or {}
    if near.get("count"):
        rows.append(("Nearly null", f"{near['count']}: {near.get('what')}, broken only by eps = {near.get('eps')}"))
    proof = section.get("proof")
    if proof:
        verdict = "agree" if proof["agree"] else "DISAGREE"
        rows.append(("Proof (--prove)", f"{proof['twin']['architecture']} twin, {fmt_int(proof['parameters'])} parameters: "
                     f"Jacobian nullity {proof['jacobian_nullity']} / {proof['jacobian_nullity_log_prob']} vs count "
                     f"{proof['whole_model_count']} / {proof['whole_model_count_log_prob']} (logits / log-probabilities), "
                     f"{verdict}; smallest kept {proof['smallest_kept_singular_value']:.1e}, cut {proof['rtol']:.0e}"))
    tie = section.get("tie")
    if tie:
        gain = f"; untying would add {fmt_int(tie['untie_gain'])} dimensions" if "untie_gain" in tie else ""
        rows.append(("Tied head", f"the tie blocks the residual rotation ({fmt_int(tie['residual_rotation_blocked'])} "
                     f"dimensions); the final gain has {fmt_int(tie['distinct_final_gain_values'])} distinct values "
                     f"({tie.get('repeated_final_gain_values', 0)} repeated), so {fmt_int(tie['surviving_dimension'])} "
                     f"survive{gain}, for {_bytes(tie['untie_bytes'])} of head weights"))
    return rows


__all__ = ["whole_model_rows"]
