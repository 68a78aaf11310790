"""The report's formulas as MathML Core (rendered natively by browsers; no script, no font, no URL).

Only the closed forms idinspect writes (``analysis/counts.py``) and U / P are translated; any other
text is returned escaped, so a formula never depends on a renderer being present. Each ``<math>``
carries its plain-text form in ``alttext`` and ``aria-label`` for screen readers and text copies.
"""

from __future__ import annotations

from .svg_charts import esc


def _mi(x: str) -> str:
    return f"<mi>{x}</mi>"


def _mn(x: str) -> str:
    return f"<mn>{x}</mn>"


def _mo(x: str) -> str:
    return f"<mo>{x}</mo>"


def _sub(base: str, sub: str) -> str:
    return f"<msub><mi>{base}</mi><mi>{sub}</mi></msub>"


def _row(*parts: str) -> str:
    return "<mrow>" + "".join(parts) + "</mrow>"


def _frac(num: str, den: str) -> str:
    return f"<mfrac>{num}{den}</mfrac>"


def _paren(*parts: str) -> str:
    return _row(_mo("("), *parts, _mo(")"))


_dk, _dv, _rd = _sub("d", "k"), _sub("d", "v"), _row(_mi("r"), _mi("d"))
_H_plus_G = _paren(_mi("H"), _mo("+"), _mi("G"))

#: The closed forms of analysis/counts.py, by their plain-text names.
FORMS = {
    "1/(2H)": _frac(_mn("1"), _row(_mn("2"), _mi("H"))),
    "G/(H(H+G))": _frac(_mi("G"), _row(_mi("H"), _H_plus_G)),
    "G(d_k + d_v^2)/(2 d d_k (H+G))": _frac(
        _row(_mi("G"), _paren(_dk, _mo("+"), f"<msup>{_dv}{_mn('2')}</msup>")),
        _row(_mn("2"), _mi("d"), _dk, _H_plus_G)),
    "G(rd + (d_k-rd)^2 + d_v^2)/(d(H+G)(d_k+d_v))": _frac(
        _row(_mi("G"), _paren(_rd, _mo("+"), f"<msup>{_paren(_dk, _mo('−'), _rd)}{_mn('2')}</msup>", _mo("+"),
                              f"<msup>{_dv}{_mn('2')}</msup>")),
        _row(_mi("d"), _H_plus_G, _paren(_dk, _mo("+"), _dv))),
    "U/P": _frac(_mi("U"), _mi("P")),
}
#: Spellings the writers use for the same forms.
ALIASES = {"G(d_k + d_v^2) / (2 d d_k (H + G))": "G(d_k + d_v^2)/(2 d d_k (H+G))", "U / P": "U/P"}


def math(form: str) -> str:
    """``form`` as an inline ``<math>`` element when idinspect knows it, else the escaped text."""
    key = ALIASES.get(form, form)
    body = FORMS.get(key)
    if body is None:
        return esc(form)
    return f'<math alttext="{esc(form)}" aria-label="{esc(form)}">{body}</math>'


def with_formula(text: str, form: str | None) -> str:
    """``text`` escaped, its first occurrence of ``form`` replaced by the formula's MathML."""
    if not form or form not in text:
        return esc(text)
    before, _, after = text.partition(form)
    return esc(before) + math(form) + esc(after)


__all__ = ["math", "with_formula", "FORMS"]
