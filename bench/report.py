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
        "inspect_rss_gb": _div(_get(stats, model, "inspect", "max_rss_bytes"), GB),
        "export_rss_gb": _div(_get(stats, model, "export", "max_rss_bytes"), GB),
    }


def target_values(stats: dict, main: str, small: str, large: str | None) -> dict[str, float | None]:
    """Values the targets are judged on: time ratios of ``main``, RSS of ``small`` and ``large``."""
    r = model_ratios(stats, main)
    rss_small = _div(_get(stats, small, "inspect", "max_rss_bytes"), GB)
    rss_large = _div(_get(stats, large, "inspect", "max_rss_bytes"), GB)
    return {"inspect_over_floor": r["inspect_over_floor"], "baseline_over_inspect": r["baseline_over_inspect"],
            "inspect_rss_small_gb": rss_small, "inspect_rss_large_gb": rss_large,
            "rss_large_over_small": _div(rss_large, rss_small), "export_over_copy": r["export_over_copy"]}


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
            ("copy", "median_s", "copy s"), ("export", "median_s", "export s"),
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
            "baseline_f32_svdvals_over_inspect", "export_over_copy")
    head = f"{'model':<16}" + "".join(f"{h:>14}" for h in ("insp/floor", "insp/read", "base/insp", "f32vals/insp",
                                                          "exp/copy"))
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
