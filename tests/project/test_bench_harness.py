"""The benchmark harness's memory measurement (bench/ is not part of the unit tests; its RSS rule is).

Linux folds the memory a child was forked from into the child's ``ru_maxrss`` at exec, so a child
can never report less than the harness's own peak RSS: ``bench.measure`` records that floor and
``bench.report`` refuses to call a peak at or below it measured.
"""

from __future__ import annotations

import sys

from bench import report
from bench.measure import own_peak_rss_bytes, run_child


def _sample(rss: int, floor: int) -> dict:
    return {"ok": True, "wall_s": 1.0, "user_s": 1.0, "sys_s": 0.1, "max_rss_bytes": rss, "rss_floor_bytes": floor}


def test_a_child_reports_at_least_the_parents_peak():
    res = run_child([sys.executable, "-c", "pass"])
    assert res.ok and res.rss_floor_bytes > 0
    assert res.rss_floor_bytes <= own_peak_rss_bytes()
    assert res.max_rss_bytes >= res.rss_floor_bytes      # the Linux behaviour the floor guards against


def test_a_child_that_allocates_more_is_measured():
    res = run_child([sys.executable, "-c", f"b = bytearray({own_peak_rss_bytes() + 64 * 2**20})"])   # zero-filled
    assert res.ok and res.rss_measured
    assert res.max_rss_bytes > res.rss_floor_bytes + 32 * 2**20


def test_peaks_at_the_floor_are_not_reported_as_measured():
    stats = report.summarize([_sample(500, 500), _sample(900, 500)])
    assert stats["max_rss_bytes"] is None and stats["median_rss_bytes"] is None and stats["rss_floor_bytes"] == 500
    stats = report.summarize([_sample(600, 500), _sample(900, 500)])
    assert stats["max_rss_bytes"] == 900 and stats["median_rss_bytes"] == 750


def test_unmeasured_rss_leaves_the_memory_targets_open():
    stats = {"m": {"inspect": report.summarize([_sample(500, 500)])},
             "big": {"inspect": report.summarize([_sample(2 * 10**9, 10**6)])}}
    values = report.target_values(stats, "m", "m", "big")
    assert values["inspect_rss_small_gb"] is None and values["rss_large_over_small"] is None
    verdicts = {row["key"]: row["verdict"] for row in report.judge(values)}
    assert verdicts["inspect_rss_small_gb"] == "n/a" and verdicts["inspect_rss_large_gb"] == "FAIL"
