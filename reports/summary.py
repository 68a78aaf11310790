"""Format-neutral views of an inspection result, shared by the terminal and HTML writers.

Everything here reads the JSON-contract dict (docs/json-contract.md) and returns plain Python
values; nothing renders, nothing knows about checkpoints. Missing keys (a result from before the
analyzer added them) give empty views rather than errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..rules import WORST_FIRST, severity_rank

#: The per-layer columns that decide whether consecutive layers are "identical" in the table.
LAYER_KEYS = ("attention_parameters", "qk_gauge", "vo_gauge", "noop_bias", "absorbable_bias",
              "unidentified_parameters", "identification_ratio", "closed_form_ratio", "heads", "kv_heads",
              "d_k", "d_v", "positional", "rotary_dim", "kind", "stack", "not_analysed", "near_unidentified",
              # what the actual weights add: a layer with a dead head is never "identical" to the rest
              "extra_unidentified", "unidentified_with_weights", "dead_heads")


def near_unidentified_text(totals: dict) -> str | None:
    """``"6 directions, not in the unidentified count: ..."``, or None where there are none (no q/k
    norm): reported beside U, never in it."""
    near = totals.get("near_unidentified")
    if not near:
        return None
    brk = totals.get("near_unidentified_break")
    size = f" (eps is at most {fmt_float(brk)} of the normalised mean square)" if brk is not None else ""
    return (f"{fmt_int(near)} directions, not in the unidentified count: a q/k norm removes the scales of W_Q "
            f"and W_K only up to its eps{size}")


def fmt_int(value) -> str:
    """``1234567`` -> ``1,234,567``; None -> an en dash."""
    if value is None:
        return "–"
    return f"{int(value):,}"


def plural(count, noun: str, plural_form: str | None = None) -> str:
    """``1 parameter``, ``6 warnings``, ``1,024 parameters``: the count (with thousands separators) and the noun."""
    n = int(count or 0)
    return f"{n:,} {noun if n == 1 else (plural_form or noun + 's')}"


def fmt_ratio(value) -> str:
    """A share as a percentage with four significant digits: 0.0428571 -> ``4.286%``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    pct = 100.0 * float(value)
    if pct == 0:
        return "0%"
    digits = max(0, 3 - int(math.floor(math.log10(abs(pct)))))
    return f"{pct:.{digits}f}%"


def fmt_float(value, digits: int = 3) -> str:
    """Compact float: ``3.142``, ``1.2e+06``; None -> ``–`` (e.g. an infinite condition number)."""
    if value is None:
        return "–"
    value = float(value)
    if not math.isfinite(value):
        return "∞" if value > 0 else ("-∞" if value < 0 else "NaN")
    if value != 0 and (abs(value) >= 10 ** (digits + 2) or abs(value) < 10 ** -(digits - 1)):
        return f"{value:.{max(digits - 1, 1)}e}"
    return f"{value:.{digits}g}"


def severity_counts(findings: Iterable[dict]) -> dict[str, int]:
    """Counts per severity, always listing error, warning and note (then any others, sorted)."""
    counts = {s: 0 for s in WORST_FIRST}
    for f in findings:
        sev = str(f.get("severity", "note"))
        counts[sev] = counts.get(sev, 0) + 1
    extra = sorted(k for k in counts if k not in WORST_FIRST)
    return {k: counts[k] for k in (*WORST_FIRST, *extra)}


def findings_by_rule(findings: Iterable[dict]) -> list[tuple[str, str, list[dict]]]:
    """``[(rule, worst severity, findings sorted by layer and tensor)]``, worst rule first."""
    groups: dict[str, list[dict]] = {}
    for f in findings:
        groups.setdefault(str(f.get("rule", "?")), []).append(f)
    out = []
    for rule, items in groups.items():
        items = sorted(items, key=lambda f: (_int_or(f.get("layer"), -1), str(f.get("tensor", "")),
                                             _int_or(f.get("head"), -1)))
        worst = max((str(f.get("severity", "note")) for f in items), key=severity_rank)
        out.append((rule, worst, items))
    out.sort(key=lambda t: (-severity_rank(t[1]), t[0]))
    return out


def _int_or(value, default: int) -> int:
    return value if isinstance(value, int) else default


#: Keys of a finding that the writers show in their own columns (the rest are "details").
FINDING_MAIN_KEYS = ("rule", "severity", "layer", "tensor", "parameters", "message")


def finding_details(finding: dict, max_items: int = 6) -> list[tuple[str, str]]:
    """The extra fields of a finding (magnitudes, heads, tolerance...) as sorted (name, text) pairs.

    Scalars and short lists of scalars are kept (lists shortened to ``max_items``); nested
    objects are left to the JSON output.
    """
    out = []
    for key in sorted(finding):
        if key in FINDING_MAIN_KEYS:
            continue
        text = _detail_text(finding[key], max_items)
        if text is not None:
            out.append((key, text))
    return out


def _detail_text(value, max_items: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        return fmt_float(value, 3)
    if isinstance(value, (str, int, bool)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        items = [fmt_float(v, 3) if isinstance(v, float) else str(v) for v in value[:max_items]]
        return "[" + ", ".join(items) + (", …" if len(value) > max_items else "") + "]"
    return None


@dataclass(frozen=True)
class LayerGroup:
    """Consecutive layers ``first..last`` whose table columns are all equal (``row`` is the first)."""

    first: int
    last: int
    row: dict
    last_row: dict | None = None
    #: Every block of the model is plain self-attention of one stack, numbered as its layer.
    plain: bool = True

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def label(self) -> str:
        """``layer 3`` / ``layers 0-5 (6 identical)`` for plain self-attention of one stack; otherwise the
        flat block numbers with each block's stack, layer number and kind: ``block 7: decoder layer 1,
        cross`` / ``blocks 0-5: encoder layers 0-5, self (6 identical)``."""
        row, last = self.row, self.last_row or self.row
        kind, stack = row.get("kind") or "self", row.get("stack") or ""
        if self.plain:
            if self.count == 1:
                return f"layer {self.first}"
            return f"layers {self.first}-{self.last} ({self.count} identical)"
        where = f"{stack} " if stack else ""
        if self.count == 1:
            return f"block {self.first}: {where}layer {row.get('layer')}, {kind}"
        return (f"blocks {self.first}-{self.last}: {where}layers {row.get('layer')}-{last.get('layer')}, {kind} "
                f"({self.count} identical)")


def _signature(layer: dict) -> tuple:
    return tuple(layer.get(k) for k in LAYER_KEYS)


def layer_groups(layers: list[dict], collapse: bool = True) -> list[LayerGroup]:
    """Rows for the per-layer table; with ``collapse``, runs of identical layers become one group."""
    groups: list[LayerGroup] = []
    plain = all((x.get("kind") or "self") == "self" and not x.get("stack") and x.get("layer") in (None, x.get("index"))
                for x in layers)
    for layer in sorted(layers, key=lambda x: x.get("index", 0)):
        idx = int(layer.get("index", 0))
        if (collapse and groups and groups[-1].last == idx - 1
                and _signature(groups[-1].row) == _signature(layer)):
            prev = groups[-1]
            groups[-1] = LayerGroup(prev.first, idx, prev.row, layer, plain)
        else:
            groups.append(LayerGroup(idx, idx, layer, plain=plain))
    return groups


@dataclass(frozen=True)
class HeadRow:
    """Per-head spectral detail of one layer."""

    head: int
    kv_head: int
    qk_rank: int | None
    qk_condition: float | None
    qk_top: list[float]
    ov_rank: int | None
    ov_condition: float | None
    ov_top: list[float]
    qk_effective_rank: float | None = None
    ov_effective_rank: float | None = None


def head_rows(layer: dict, top: int = 3) -> list[HeadRow]:
    """One :class:`HeadRow` per query head (empty without ``spectra``)."""
    spectra = layer.get("spectra") or {}
    qk, ov = spectra.get("qk") or [], spectra.get("ov") or []
    n = max(len(qk), len(ov))
    h, g = layer.get("heads") or n or 1, layer.get("kv_heads") or n or 1
    r = max(1, h // g) if g else 1

    def pick(key: str, i: int):
        values = spectra.get(key) or []
        return values[i] if i < len(values) else None

    def values(side: list, i: int) -> list[float]:
        return list(side[i]) if i < len(side) and side[i] else []

    return [HeadRow(i, i // r, pick("qk_rank", i), pick("qk_condition", i), values(qk, i)[:top],
                    pick("ov_rank", i), pick("ov_condition", i), values(ov, i)[:top],
                    effective_rank(values(qk, i)), effective_rank(values(ov, i)))
            for i in range(n)]


def proof_near_text(proof: dict) -> str | None:
    """The twin's nearly-null band beside its derived count, said per twin block: the model's own
    "nearly null" figure sums the same per-block count over all its layers (a 2-layer OLMoE reports
    4 where its one-block twin shows 2: both are right)."""
    if proof.get("jacobian_near_nullity") is None:
        return None
    blocks = len(proof.get("blocks") or []) or 1
    return (f"{proof['jacobian_near_nullity']} singular values between the exact cut and "
            f"{fmt_float(proof.get('near_rtol'))} vs {proof.get('structural_near_unidentified')} nearly-unidentified "
            f"scales (q/k norm), in the twin's {blocks} block{'s' if blocks != 1 else ''}; the model's figure sums "
            "the same per-block count over its layers")


def plugin_text(model: dict) -> str | None:
    """"adapter NAME from DIST VERSION (MODULE)" where a plugin package read the model, "automatic,
    proven on a twin (...)" where --auto inferred it, else None."""
    adapter = model.get("adapter") or {}
    auto = adapter.get("automatic")
    if auto:
        return (f"automatic, proven on a twin (Jacobian nullity {auto.get('jacobian_nullity')} = count "
                f"{auto.get('structural_unidentified')}; reference error {auto.get('reference_error', 0):.1e})")
    if adapter.get("distribution") in (None, "idinspect") and adapter.get("module", "idinspect.").startswith("idinspect."):
        return None
    return (f"{adapter.get('name', '?')} from the plugin {adapter.get('distribution') or '?'} "
            f"{adapter.get('version') or ''} ({adapter.get('module', '?')})").replace("  ", " ")


def revision_text(model: dict) -> str:
    """The resolved revision, or a word saying why there is none."""
    rev = model.get("revision")
    if rev:
        return str(rev)
    source = str(model.get("source", ""))
    return "local files (no revision)" if source else "unknown"


def gguf_text(model: dict) -> str | None:
    """For a GGUF input: the file, its architecture and the stored type of each attention tensor,
    by tensor kind across layers (``attn_q Q4_K x32 · attn_v Q6_K x16, Q4_K x16``); None otherwise."""
    g = model.get("gguf")
    if not isinstance(g, dict):
        return None
    kinds: dict[str, dict[str, int]] = {}
    for name, kind in (g.get("tensor_types") or {}).items():
        parts = str(name).split(".")
        stem = ".".join(parts[2:]) if parts[0] == "blk" and len(parts) > 2 else str(name)
        counts = kinds.setdefault(stem.removesuffix(".weight"), {})
        counts[str(kind)] = counts.get(str(kind), 0) + 1
    types = " · ".join(f"{stem} " + ", ".join(f"{k} x{n}" for k, n in sorted(c.items(), key=lambda kv: -kv[1]))
                       for stem, c in kinds.items())
    return f"{g.get('file', '?')} ({g.get('architecture', '?')}): {types}" if types else str(g.get("file", "?"))


def attention_shape(model: dict) -> str:
    """``H=12, G=12, d_k=32`` (with d_model and layer count)."""
    sizes = model.get("stack_sizes") or {}
    keys = ("heads", "kv_heads", "head_dim", "hidden_size")
    if len({tuple(s.get(k) for k in keys) for s in sizes.values()}) > 1:
        text = f"sizes per stack (below), {model.get('layers')} layers"
    else:
        text = (f"H={model.get('heads')}, G={model.get('kv_heads')}, d_k={model.get('head_dim')}, "
                f"d={model.get('hidden_size')}, {model.get('layers')} layers")
    if model.get("attention") == "latent":
        lat = model.get("latent") or {}
        text += (f", multi-head latent attention (q latent {lat.get('q_rank') or 'none'}, kv latent "
                 f"{lat.get('kv_rank')}, no-position {lat.get('nope_dim')} + rotary {lat.get('rope_dim')} per head, "
                 f"values {lat.get('v_dim')})")
    kinds, blocks = model.get("block_kinds") or ["self"], model.get("attention_blocks")
    stacks = model.get("stacks") or []
    if kinds != ["self"] or (blocks is not None and blocks != model.get("layers")) or stacks:
        where = f" in stacks {', '.join(stacks)}" if stacks else ""
        text += f", {blocks} attention blocks{where} ({', '.join(kinds)})"
    return text


def near_null_text(result: dict) -> str | None:
    """``2 directions (scales a norm divides out up to its eps; breaking term <= 2.6e-07), not in U``, or
    None where the model has none."""
    layers = result.get("layers") or []
    n = sum(layer.get("near_unidentified") or 0 for layer in layers)
    if not n:
        return None
    sizes = [layer["near_unidentified_scale"] for layer in layers if layer.get("near_unidentified_scale") is not None]
    size = f"; breaking term <= {max(sizes):.2g}" if sizes else ""
    return f"{fmt_int(n)} directions (scales a norm divides out only up to its eps{size}), not counted in U"


def stack_lines(result: dict) -> list[str]:
    """One line per stack of a multi-stack model: its shape and totals (``text: H=4, d_k=4, d=16, 2
    blocks; 544 parameters, 100 unidentified = 18.38%``); empty for one stack."""
    sizes = (result.get("model") or {}).get("stack_sizes") or {}
    totals = (result.get("totals") or {}).get("stacks") or {}
    lines = []
    for name in dict.fromkeys([*sizes, *totals]):
        size, t = sizes.get(name) or {}, totals.get(name) or {}
        shape = (f"H={size.get('heads')}, G={size.get('kv_heads')}, d_k={size.get('head_dim')}, "
                 f"d={size.get('hidden_size')}, " if size else "")
        n = t.get("blocks")
        line = f"{name}: {shape}{fmt_int(n)} block{'' if n == 1 else 's'}"
        if t:
            line += (f"; {fmt_int(t.get('attention_parameters'))} parameters, "
                     f"{fmt_int(t.get('unidentified_parameters'))} unidentified = {fmt_ratio(t.get('identification_ratio'))}")
        lines.append(line)
    return lines


def not_analysed_lines(model: dict) -> list[str]:
    """One line per attention module the counts leave out: where, how many parameters, why."""
    return [f"{m.get('module')} ({fmt_int(m.get('parameters'))} parameters in {len(m.get('tensors') or [])} tensors, "
            f"not in the totals): {m.get('reason')}" for m in model.get("not_analysed") or []]


def positional_text(model: dict, layers: list[dict] | None = None) -> str:
    """The model's positional scheme; where ``layers`` differ in it (Llama 4's NoPE layers), how many
    layers have each."""
    kind = str(model.get("positional", "?"))
    rd = model.get("rotary_dim") or 0
    text = kind
    if kind == "rope":
        hd = model.get("head_dim")
        text = f"RoPE (rotary_dim {rd} of {hd})" if hd and rd != hd else f"RoPE (rotary_dim {rd})"
    kinds = [str(layer.get("positional")) for layer in layers or []]
    if len(set(kinds)) > 1:
        others = sorted(set(kinds) - {kind})
        text += f" in {kinds.count(kind)} of {plural(len(kinds), 'layer')}; " + ", ".join(
            f"{'no positions' if k == 'none' else k} in {kinds.count(k)}" for k in others)
    return text


def layer_kinds_text(result: dict) -> str | None:
    """Per-layer attention features beyond the positional scheme that Llama 4 mixes: a q/k norm after
    RoPE, chunked attention, temperature-tuned queries, each with its number of layers; None without."""
    layers = result.get("layers") or []
    parts = []
    after = sum(1 for layer in layers if (layer.get("qk_norm") or {}).get("after_rope"))
    if after:
        parts.append(f"q/k norm after RoPE in {plural(after, 'layer')}")
    chunks = sorted({int(layer["attention_chunk"]) for layer in layers if layer.get("attention_chunk")})
    if chunks:
        n = sum(1 for layer in layers if layer.get("attention_chunk"))
        parts.append(f"attention in chunks of {', '.join(map(str, chunks))} in {plural(n, 'layer')}")
    tuned = [layer["query_temperature"] for layer in layers if layer.get("query_temperature")]
    if tuned:
        t = tuned[0]
        parts.append(f"queries scaled by 1 + {t['attn_scale']:g} log(1 + floor((t + 1) / {t['floor_scale']:g})) "
                     f"in {plural(len(tuned), 'layer')}")
    return "; ".join(parts) or None


def softmax_text(result: dict) -> str | None:
    """What changes the softmax beyond the scale: logit soft-capping and attention sinks (which make
    the key bias live, and with sinks the value bias too), with the layers that have them; None
    when every layer has a plain softmax."""
    layers = result.get("layers") or []
    parts = []
    capped = sorted({float(layer["logit_softcap"]) for layer in layers if layer.get("logit_softcap")})
    if capped:
        n = sum(1 for layer in layers if layer.get("logit_softcap"))
        caps = ", ".join(f"{c:g}" for c in capped)
        parts.append(f"logits soft-capped at {caps} (c tanh(s / c)) in {plural(n, 'layer')}: key biases are live")
    sinks = [layer for layer in layers if layer.get("sinks")]
    if sinks:
        parts.append(f"attention sinks ({plural(int(sinks[0]['sinks']), 'learned logit')} per layer) in "
                     f"{plural(len(sinks), 'layer')}: rows over real keys sum to less than one, so key and value "
                     "biases are live")
    return "; ".join(parts) or None


def closed_form_name(result: dict) -> str | None:
    """The closed form's plain-text name (``1/(2H)``) when the model has one form, else None."""
    forms = {layer.get("closed_form") for layer in result.get("layers") or [] if layer.get("closed_form")}
    if not forms and (result.get("totals") or {}).get("closed_form"):
        forms = {result["totals"]["closed_form"]}
    return forms.pop() if len(forms) == 1 else None


def closed_form_text(result: dict) -> str:
    """``1/(2H) = 4.167%`` from the layers (or the totals' ratio alone), ``–`` when unknown."""
    layers = result.get("layers") or []
    totals = result.get("totals") or {}
    forms = {layer.get("closed_form") for layer in layers if layer.get("closed_form")}
    if not forms and totals.get("closed_form"):
        forms = {totals["closed_form"]}
    ratio = totals.get("closed_form_ratio")
    if ratio is None:
        return "varies by layer" if len({layer.get("closed_form_ratio") for layer in layers}) > 1 else "–"
    if len(forms) == 1:
        return f"{forms.pop()} = {fmt_ratio(ratio)}"
    return fmt_ratio(ratio)


def bias_free_ratio(result: dict) -> float | None:
    """U / P counted without biases (the analyzer's ``bias_free_*`` per layer): what the closed form predicts."""
    layers = result.get("layers") or []
    if not layers or any(layer.get("bias_free_parameters") is None for layer in layers):
        return None
    params = sum(layer["bias_free_parameters"] for layer in layers)
    un = sum(layer.get("bias_free_unidentified") or 0 for layer in layers)
    return un / params if params else None


def model_has_biases(result: dict) -> bool | None:
    """Whether any attention block carries a bias (None when the layers do not say)."""
    layers = result.get("layers") or []
    if not layers or any("biases" not in layer for layer in layers):
        return None
    return any(layer.get("biases") for layer in layers)


def closed_form_line(result: dict) -> str:
    """The closed form in plain words, e.g. ``1/(2H) = 7.812%, exactly this model's structural share (it has
    no attention biases)`` or ``1/(2H) = 4.167% without biases; this model's biases bring it to 4.286%``."""
    text = closed_form_text(result)
    totals = result.get("totals") or {}
    closed, actual = totals.get("closed_form_ratio"), totals.get("identification_ratio")
    free, biased = bias_free_ratio(result), model_has_biases(result)
    if closed is None:
        return f"{text} (for the same shape without biases)"
    if biased is False:
        if actual is not None and math.isclose(actual, closed, rel_tol=1e-9):
            return f"{text}, exactly this model's structural share (it has no attention biases)"
        return f"{text}; this model (no attention biases) is at {fmt_ratio(actual)}"
    if free is not None and math.isclose(free, closed, rel_tol=1e-9):
        return f"{text} without biases; this model's biases bring it to {fmt_ratio(actual)}"
    free_text = f"; this model counted without its biases: {fmt_ratio(free)}" if free is not None else ""
    return f"{text} for the same shape without biases{free_text}"


def effective_rank(values: Iterable[float] | None) -> float | None:
    """Entropy effective rank exp(H(p)), p = σ / Σσ (Roy and Vetterli 2007): 1 for one direction,
    n for n equal singular values. None for an empty or all-zero (or non-finite) spectrum."""
    vals = [float(v) for v in (values or []) if v is not None]
    if not vals or not all(math.isfinite(v) for v in vals):
        return None
    total = sum(abs(v) for v in vals)
    if total <= 0:
        return None
    entropy = -sum((abs(v) / total) * math.log(abs(v) / total) for v in vals if v)
    return math.exp(entropy)
