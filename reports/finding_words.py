"""A finding's extra fields in words, for people: ``head 2 (kv 2), W_OV rank 0 of 4, dead``.

The JSON keeps every field as data; the terminal and HTML show these phrases instead of a
``key=value`` dump. Tensor lists are not repeated here (the writers show them in their own column).
"""

from __future__ import annotations

from .summary import finding_details, fmt_float, fmt_int

#: Fields shown elsewhere (tensor column, message) or internal to the JSON.
HIDDEN = frozenset({"tensors", "columns", "rank_rule", "head_kind", "role", "into", "heads", "head", "kv_head",
                    "kind", "rank", "full_rank", "dead", "max_abs", "singular_values", "tolerance",
                    "group_extra_unidentified", "group_extra_unidentified_qk", "layer_extra_unidentified",
                    "nan", "inf", "limit"})

FORM = {"qk": "W_QK", "ov": "W_OV"}


def finding_phrases(finding: dict) -> list[str]:
    """Short phrases for a finding's extra fields, most telling first."""
    f = finding
    out: list[str] = []
    if f.get("head") is not None:
        kv = f" (kv {f['kv_head']})" if f.get("kv_head") is not None and f.get("kv_head") != f.get("head") else ""
        out.append(f"head {f['head']}{kv}")
    elif f.get("heads"):
        heads = [str(h) for h in f["heads"]]
        out.append(("heads " if len(heads) > 1 else "head ") + ", ".join(heads[:8]) + (", …" if len(heads) > 8 else ""))
    if f.get("rank") is not None:
        form = FORM.get(str(f.get("kind")), str(f.get("kind") or "rank"))
        full = f" of {f['full_rank']}" if f.get("full_rank") is not None else ""
        out.append(f"{form} rank {f['rank']}{full}")
    if f.get("dead"):
        out.append("dead (passes nothing to the output)")
    if f.get("role") and (f.get("nan") is not None or f.get("inf") is not None):
        out.append(f"{f['role']}: {fmt_int(f.get('nan'))} NaN, {fmt_int(f.get('inf'))} ±Inf")
    elif f.get("role") and f.get("limit") is not None:
        out.append(f"{f['role']}")
    if f.get("max_abs") is not None:
        out.append(f"max |value| {fmt_float(f['max_abs'])}")
    if f.get("limit") is not None:
        out.append(f"limit {fmt_float(f['limit'])}")
    if f.get("singular_values"):
        values = [fmt_float(v) for v in f["singular_values"][:6]]
        out.append("σ " + ", ".join(values) + (", …" if len(f["singular_values"]) > 6 else ""))
    extra = [(f.get("group_extra_unidentified_qk"), "QK"), (f.get("group_extra_unidentified"), "VO" if f.get("kind") == "ov"
                                                                                     else "QK" if f.get("kind") == "qk" else "")]
    gained = [f"+{fmt_int(n)} {side}".rstrip() for n, side in extra if n]
    if gained:
        out.append(f"kv group {f.get('kv_head', '?')} gains " + ", ".join(gained))
    if f.get("layer_extra_unidentified"):
        out.append(f"layer gains +{fmt_int(f['layer_extra_unidentified'])} in all")
    out += [f"{key.replace('_', ' ')} {text}" for key, text in finding_details(f) if key not in HIDDEN]
    return out


def finding_tensors(finding: dict) -> list[str]:
    """The stored tensors a finding names (one per entry), else its ``tensor`` text."""
    tensors = finding.get("tensors")
    if isinstance(tensors, list) and tensors and all(isinstance(t, str) for t in tensors):
        return list(tensors)
    tensor = finding.get("tensor")
    return [t for t in str(tensor).split(", ") if t] if tensor else []


__all__ = ["finding_phrases", "finding_tensors"]
