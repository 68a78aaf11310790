"""Plain-text rendering of the diff document (``idinspect diff A B``)."""

from __future__ import annotations

from .summary import plural


def _f(v, spec: str = ".3g") -> str:
    return "n/a" if v is None else format(v, spec)


#: How to read the two headline figures (also in the HTML report).
DIFF_READING = ("  The invariant change decides whether the function changed (0 up to rounding: same function, "
                "whatever rho);",
                "  rho is a first-order (tangent) share: 1 for a small gauge move, lower for a large one (the orbit "
                "is curved).")


def render_diff(doc: dict, *, heads: bool = False) -> str:
    """One line per layer (rho of QK, VO and both, beside the references; beta A -> B; mu; raw and
    invariant change), then the ill-posed groups; with ``heads`` one line per kv group and side."""
    m = doc["model"]
    lines = [f"diff {doc['a']['source']} -> {doc['b']['source']}",
             f"  {m.get('model_type')} {m.get('layers')} layers, H={m.get('heads')}, G={m.get('kv_heads')}, "
             f"d_k={m.get('head_dim')}, positional {m.get('positional')}",
             f"  rho (first-order share: the step's squared length along the tangent of A's gauge orbit): "
             f"{_f(doc['totals']['rho'], '.4f')}   reference 1/(2H) = {_f(doc['one_over_2H'], '.4f')}",
             f"  largest relative change of an invariant: {_f(doc['totals']['invariant_change_max'], '.2e')}",
             *DIFF_READING,
             "",
             f"{'layer':>5} {'rho':>7} {'qk rho':>7} {'qk ref':>7} {'vo rho':>7} {'vo ref':>7} "
             f"{'qk beta A -> B':>21} {'vo beta A -> B':>21} {'qk mu':>8} {'raw rel':>8} {'inv chg':>8}"]
    for L in doc["layers"]:
        qk, vo = L["qk"], L["vo"]
        lines.append(f"{L['index']:>5} {_f(L['rho'], '.4f'):>7} {_f(qk['rho'], '.4f'):>7} {_f(qk['reference'], '.4f'):>7} "
                     f"{_f(vo['rho'], '.4f'):>7} {_f(vo['reference'], '.4f'):>7} "
                     f"{_f(qk['beta_a'], '.3e'):>10}->{_f(qk['beta_b'], '.3e'):<10} "
                     f"{_f(vo['beta_a'], '.3e'):>10}->{_f(vo['beta_b'], '.3e'):<10} {_f(qk['mu_min'], '.2e'):>8} "
                     f"{_f(L['raw_change']['relative'], '.2e'):>8} {_f(L['invariant_change_max'], '.2e'):>8}")
        if heads:
            for g in L["groups"]:
                for side in ("qk", "vo"):
                    s = g[side]
                    lines.append(f"{'':>5}   group {g['group']} (heads {','.join(map(str, g['heads']))}) {side}: "
                                 f"rho {_f(s['rho'], '.4f')}, beta {_f(s['beta_a'], '.3e')} -> {_f(s['beta_b'], '.3e')}, "
                                 f"tau {_f(s['tau_a'], '.3e')} -> {_f(s['tau_b'], '.3e')}, mu {_f(s['mu'], '.2e')}"
                                 + (" ILL-POSED" if s["ill_posed"] else ""))
    ill = doc["totals"]["ill_posed"]
    if ill:
        where = ", ".join(f"layer {i} {side} group {g}" for i, side, g in ill[:20]) + (" ..." if len(ill) > 20 else "")
        lines += ["", f"ill-posed projection (mu ~ 0: a direction that neither factor sees; rho is still the exact "
                      f"least-squares share, but the tangent coordinate X is not unique) in {plural(len(ill), 'group')}: {where}"]
    return "\n".join(lines)
