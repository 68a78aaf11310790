"""Plain-text rendering of a ``compare`` result (the dict of ``CompareResult.to_dict``)."""

from __future__ import annotations


def render_compare_text(r: dict) -> str:
    """One header line per model, one row per layer, the evidence, then the verdict."""
    a, b = r["a"], r["b"]
    lines = [f"compare {a['source']} -> {b['source']}"]
    for tag, side in (("A", a), ("B", b)):
        gains = "norm gains folded" if side["gains_folded"] else "no norm gains found"
        lines.append(f"  {tag}: {side['source']} ({side['origin']}; {side['dtype']}, unit roundoff "
                     f"{side['unit_roundoff']:.1e}; {side['layers']} layers; {gains})")
    for note in r["structure_notes"]:
        lines.append(f"  structure: {note}")
    if r.get("alignment"):
        al = r["alignment"]
        lines.append("  B layer  <- A layer  heads A/B  votes  runner-up (votes)  similarity  min head")
        for L in r["layers"]:
            ha, hb = L["heads"]
            runner = "-" if L["runner_up"] is None else f"{L['runner_up'][0]} ({L['runner_up'][1]})"
            lines.append(f"  {L['index']:>7}  <- {L['aligned_a']:>7}  {ha:>4}/{hb:<4}  {L['votes']:>2}/{hb:<3}"
                         f"  {runner:>17}  {L['similarity']:>10.6f}  {L['min_similarity']:>8.6f}")
        lines.append(f"  alignment: B's layers come from A's layers {al['b_from_a']}; A layers unused "
                     f"{al['a_layers_unused'] or 'none'}, repeated {al['a_layers_repeated'] or 'none'}")
    elif r["layers"]:
        lines.append("  layer  heads    similarity  min head  nearest in layer  max |dS|/tolerance")
        for L in r["layers"]:
            ha, hb = L["heads"]
            lines.append(f"  {L['index']:>5}  {ha:>3}/{hb:<3}  {L['similarity']:>10.6f}  {L['min_similarity']:>8.6f}"
                         f"  {L['nearest_in_layer']:>7}/{ha:<8}  {L['tolerance_ratio']:.3g}")
        lines.append(f"  mean similarity of matched heads {r['similarity']:.6f} (1 - mean relative distance of "
                     "singular values; heads matched within layers by least total distance)")
    sf = r["same_function"]
    w = sf.get("worst")
    attention = sf.get("attention_holds", sf["holds"])
    if w:
        lines.append(f"  attention: {'same' if attention else 'differs'}: largest |s_A - s_B| {w['error']:.3g} against "
                     f"tolerance {w['tolerance']:.3g} (ratio {w['ratio']:.3g}) at layer {w['layer']} head "
                     f"{w['head_a']}/{w['head_b']} {w['kind']}")
    mlp = sf.get("mlp")
    if mlp and mlp.get("compared"):
        m = mlp.get("worst") or {}
        where = (f": largest |x_A - x_B| {m['error']:.3g} against tolerance {m['tolerance']:.3g} (ratio "
                 f"{m['ratio']:.3g}) at layer {m['layer']} {m['quantity']}") if "layer" in m else ""
        lines.append(f"  MLP units: {'same' if mlp['holds'] else 'differ'}{where or ' (' + mlp.get('reason', '') + ')'}")
    elif mlp:
        lines.append(f"  MLP units: not compared ({mlp['reason']})")
    if w or sf.get("reason"):
        why = f" ({sf['reason']})" if sf.get("reason") and not sf["holds"] else ""
        decided = f"; decided by {sf['decided_by']}" if sf.get("decided_by") else ""
        lines.append(f"  same function: {'yes' if sf['holds'] else 'no'}{why}{decided}")
    t = r["lineage"]
    if t is not None and r.get("alignment"):
        lines.append(f"  lineage: {t['statistic']} of {t['heads']} heads of B have their nearest head of A in the A layer "
                     f"their layer is aligned to (at most {t['null_mean']:.0f} by chance in the mean); p = "
                     f"{t['p_value']:.3g} (Chatterjee bound {t['chatterjee_bound']:.3g} times the "
                     f"{r['alignment']['maps']} alignments); alpha {r['alpha']:.0e}")
    elif t is not None:
        lines.append(f"  lineage: {t['statistic']} of {t['heads']} heads have their nearest counterpart in the same "
                     f"layer (chance: {t['null_mean']:.2f}); p = {t['p_value']:.3g} (Chatterjee bound "
                     f"{t['chatterjee_bound']:.3g}, Monte Carlo {_mc(t)} over {t['permutations']} "
                     f"random re-pairings); alpha {r['alpha']:.0e}")
    lines.append(f"verdict: {r['verdict']}")
    return "\n".join(lines)


def _mc(t: dict) -> str:
    return "skipped (bound below its resolution)" if t["p_monte_carlo"] is None else f"{t['p_monte_carlo']:.3g}"
