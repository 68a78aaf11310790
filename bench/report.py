"""Turn measured samples into medians, ratios and PASS/FAIL against the issue's targets.

Times are medians over the repeats; peak RSS is the maximum over the repeats. All ratios are
formed from numbers measured in the same run. GB means 10^9 bytes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

GB = 1e9


@dataclass(frozen=True)
class Target:
    """A named ratio with its bound: ``op`` is ``"<="`` or ``">="``."""

    key: str
    label: str
    op: str
    bound: float

    def check(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        ok = value <= self.bound if self.op == "<=" else value >= self.bound
        return "PASS" if ok else "FAIL"


TARGETS = (
    Target("inspect_over_floor", "inspect / floor (process wall)", "<=", 2.0),
    Target("baseline_over_inspect", "baseline / inspect", ">=", 500.0),
    Target("inspect_rss_small_gb", "peak RSS inspect, small (GB)", "<=", 1.0),
    Target("inspect_rss_large_gb", "peak RSS inspect, large (GB)", "<=", 1.0),
    Target("rss_large_over_small", "peak RSS large / small", "<=", 1.1),
    Target("export_over_copy", "export / plain copy", "<=", 2.5),
    Target("export_over_cpr", "export / cp -r", "<=", 2.5),
    Target("case_inspect_over_floor", "non-Llama case: inspect / floor", "<=", 1.5),
    Target("case_rss_large_over_small", "non-Llama case: RSS large / small", "<=", 1.1),
)


def summarize(samples: list[dict]) -> dict[str, Any]:
    """Median/min/max wall time, median and max peak RSS of one measure's samples."""
    ok = [s for s in samples if s.get("ok")]
    if not ok:
        return {"n": 0, "errors": [s.get("error") for s in samples if s.get("error")][:1]}
    walls = [s["wall_s"] for s in ok]
    rss = [s["max_rss_bytes"] for s in ok]
    # A peak at or below the harness's own (inherited at exec, see bench.measure) is not the child's.
    measured = all(s["max_rss_bytes"] > s.get("rss_floor_bytes", 0) for s in ok)
    out: dict[str, Any] = {"n": len(ok), "median_s": statistics.median(walls), "min_s": min(walls),
                           "max_s": max(walls), "median_rss_bytes": statistics.median(rss) if measured else None,
                           "max_rss_bytes": max(rss) if measured else None,
                           "rss_floor_bytes": max(s.get("rss_floor_bytes", 0) for s in ok),
                           "median_cpu_s": statistics.median(s["user_s"] + s["sys_s"] for s in ok)}
    for key in ("read_s", "extrapolated_s", "extrapolated_f32_svdvals_s", "layer_s", "layer_f32_svdvals_s", "load_s",
                "copy_s"):
        vals = [s["detail"][key] for s in ok if key in s.get("detail", {})]
        if vals:
            out[f"median_{key}"] = statistics.median(vals)
    return out


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _get(stats: dict, model: str | None, measure: str, key: str) -> float | None:
    if model is None:
        return None
    return stats.get(model, {}).get(measure, {}).get(key)


def model_ratios(stats: dict, model: str) -> dict[str, float | None]:
    """The time ratios of one model (any model, target or not)."""
    inspect = _get(stats, model, "inspect", "median_s")
    return {
        "inspect_over_floor": _div(inspect, _get(stats, model, "floor", "median_s")),
        "inspect_over_floor_read": _div(inspect, _get(stats, model, "floor", "median_read_s")),
        "baseline_over_inspect": _div(_get(stats, model, "baseline", "median_extrapolated_s"), inspect),
        "baseline_f32_svdvals_over_inspect": _div(_get(stats, model, "baseline", "median_extrapolated_f32_svdvals_s"),
                                                  inspect),
        "export_over_copy": _div(_get(stats, model, "export", "median_s"), _get(stats, model, "copy", "median_s")),
        "export_over_cpr": _div(_get(stats, model, "export", "median_s"), _get(stats, model, "cpr", "median_s")),
        "inspect_rss_gb": _div(_get(stats, model, "inspect", "max_rss_bytes"), GB),
        "export_rss_gb": _div(_get(stats, model, "export", "max_rss_bytes"), GB),
    }


def target_values(stats: dict, main: str | None, small: str | None, large: str | None,
                  case_small: str | None = None, case_large: str | None = None) -> dict[str, float | None]:
    """Values the targets are judged on: time ratios of ``main``, RSS of ``small`` and ``large``; for
    the non-Llama case, inspect / floor of ``case_large`` and its RSS over ``case_small``'s."""
    r = model_ratios(stats, main) if main else {}
    rss_small = _div(_get(stats, small, "inspect", "max_rss_bytes"), GB)
    rss_large = _div(_get(stats, large, "inspect", "max_rss_bytes"), GB)
    case = model_ratios(stats, case_large) if case_large else {}
    return {"inspect_over_floor": r.get("inspect_over_floor"), "baseline_over_inspect": r.get("baseline_over_inspect"),
            "inspect_rss_small_gb": rss_small, "inspect_rss_large_gb": rss_large,
            "rss_large_over_small": _div(rss_large, rss_small), "export_over_copy": r.get("export_over_copy"),
            "export_over_cpr": r.get("export_over_cpr"),
            "case_inspect_over_floor": case.get("inspect_over_floor"),
            "case_rss_large_over_small": _div(_get(stats, case_large, "inspect", "max_rss_bytes"),
                                              _get(stats, case_small, "inspect", "max_rss_bytes"))}


def judge(values: dict[str, float | None]) -> list[dict]:
    """One row per target: value, bound, PASS/FAIL/n/a."""
    return [{"key": t.key, "label": t.label, "value": values.get(t.key), "target": f"{t.op} {t.bound:g}",
             "verdict": t.check(values.get(t.key))} for t in TARGETS]


def _fmt(v: float | None, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.{digits}f}"


def format_times(stats: dict) -> str:
    """Per model: median seconds of every measure and the peak RSS of inspect/export."""
    cols = (("floor", "median_s", "floor s"), ("floor", "median_read_s", "(read s)"), ("inspect", "median_s", "inspect s"),
            ("copy", "median_s", "copy s"), ("cpr", "median_s", "cp -r s"), ("export", "median_s", "export s"),
            ("baseline", "median_extrapolated_s", "baseline s"))
    head = f"{'model':<16}" + "".join(f"{c[2]:>12}" for c in cols) + f"{'insp RSS GB':>13}{'exp RSS GB':>12}"
    lines = [head, "-" * len(head)]
    for model, measures in stats.items():
        cells = [f"{_fmt(measures.get(m, {}).get(key), 3):>12}" for m, key, _ in cols]
        r = model_ratios(stats, model)
        lines.append(f"{model:<16}" + "".join(cells) + f"{_fmt(r['inspect_rss_gb'], 3):>13}{_fmt(r['export_rss_gb'], 3):>12}")
    return "\n".join(lines)


def format_ratios(stats: dict) -> str:
    """Per model: every ratio (informational for models that are not the target model)."""
    keys = ("inspect_over_floor", "inspect_over_floor_read", "baseline_over_inspect",
            "baseline_f32_svdvals_over_inspect", "export_over_copy", "export_over_cpr")
    head = f"{'model':<16}" + "".join(f"{h:>14}" for h in ("insp/floor", "insp/read", "base/insp", "f32vals/insp",
                                                          "exp/copy", "exp/cp -r"))
    lines = [head, "-" * len(head)]
    for model in stats:
        r = model_ratios(stats, model)
        lines.append(f"{model:<16}" + "".join(f"{_fmt(r[k]):>14}" for k in keys))
    return "\n".join(lines)


def format_targets(rows: list[dict]) -> str:
    """The target table: label, measured value, bound, verdict."""
    head = f"{'target':<34}{'measured':>12}{'bound':>10}  verdict"
    lines = [head, "-" * len(head)]
    for row in rows:
        lines.append(f"{row['label']:<34}{_fmt(row['value']):>12}{row['target']:>10}  {row['verdict']}")
    return "\n".join(lines)


#: Full depths of the real models the scale set stands in for.
FULL_DEPTH = {"8b": 32, "70b": 80}


def scale_extrapolation(stats: dict) -> dict | None:
    """Floor and inspect times extrapolated to Llama-3.1-8B (32 layers) and -70B (80 layers).

    Linear in depth, T(n) = c + n t: t (per layer) and c (start, imports, headers) from the 8B
    shape's 2- and 8-layer medians; the 70B per-layer time is (T_70B(2) - c) / 2 with the 8B
    shape's c (the same start-up and a header of about the same size). Returns None when a median
    is missing.
    """
    out: dict = {}
    for measure in ("floor", "inspect"):
        t2 = _get(stats, "llama-8b-2l", measure, "median_s")
        t8 = _get(stats, "llama-8b-8l", measure, "median_s")
        w2 = _get(stats, "llama-70b-2l", measure, "median_s")
        if t2 is None or t8 is None:
            return None
        per = (t8 - t2) / 6
        fixed = t2 - 2 * per
        out[measure] = {"fixed_s": fixed, "per_layer_8b_s": per, "8b_32l_s": fixed + FULL_DEPTH["8b"] * per}
        if w2 is not None:
            per70 = (w2 - fixed) / 2
            out[measure].update(per_layer_70b_s=per70, **{"70b_80l_s": fixed + FULL_DEPTH["70b"] * per70})
    f, i = out["floor"], out["inspect"]
    out["ratios"] = {"8b_8l_measured": _div(_get(stats, "llama-8b-8l", "inspect", "median_s"),
                                            _get(stats, "llama-8b-8l", "floor", "median_s")),
                     "8b_per_layer": _div(i["per_layer_8b_s"], f["per_layer_8b_s"]),
                     "8b_32l_extrapolated": _div(i["8b_32l_s"], f["8b_32l_s"]),
                     "70b_2l_measured": _div(_get(stats, "llama-70b-2l", "inspect", "median_s"),
                                             _get(stats, "llama-70b-2l", "floor", "median_s")),
                     "70b_per_layer": _div(i.get("per_layer_70b_s"), f.get("per_layer_70b_s")),
                     "70b_80l_extrapolated": _div(i.get("70b_80l_s"), f.get("70b_80l_s"))}
    return out


def format_scale(scale: dict) -> str:
    """The extrapolation table of :func:`scale_extrapolation`."""
    lines = [f"{'':<10}{'fixed s':>10}{'8B s/layer':>12}{'8B 32l s':>10}{'70B s/layer':>13}{'70B 80l s':>11}"]
    for m in ("floor", "inspect"):
        r = scale[m]
        lines.append(f"{m:<10}{_fmt(r['fixed_s'], 3):>10}{_fmt(r['per_layer_8b_s'], 3):>12}{_fmt(r['8b_32l_s'], 1):>10}"
                     f"{_fmt(r.get('per_layer_70b_s'), 3):>13}{_fmt(r.get('70b_80l_s'), 1):>11}")
    lines.append("inspect / floor: " + ", ".join(f"{k} {_fmt(v)}" for k, v in scale["ratios"].items()))
    return "\n".join(lines)
