"""``python -m bench.export_bounds [VARIANT ...]``: per tiny family variant, the relative logit error of a
gauge-fixed export read back by stock transformers, beside the rounding bound the tests and ``verify``
apply (idinspect.equivalence.bounds.output_bound), for two cases:

- float32 weights exported in float32, both models run in float32 (tests/contract/test_export.py's
  ``test_float32_export_keeps_logits_and_greedy_decodes``);
- float64 weights exported in float64, run in float64 (``test_stock_transformers_computes_the_original_function``).

The last column of each is error / bound: the tests need it at most 1. Set MKL_ENABLE_INSTRUCTIONS=AVX2
to see another CPU's float32 rounding (the errors move, the bound does not).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch


def measure(variant: str, dtype: torch.dtype) -> tuple[float, float]:
    """(relative error of the export's outputs, the bound) for ``variant`` stored and run in ``dtype``."""
    import idinspect
    from idinspect.equivalence.verify import output_tolerance
    from tests.contract.test_export import auto_class, rel
    from tests.support import tiny

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        tiny.save(tiny.build(variant), src, dtype=dtype)
        idinspect.export(src, out)
        ids = torch.randint(3, 64, (2, 7), generator=torch.Generator().manual_seed(1))
        values = []
        for d in (src, out):
            cls = auto_class(d)
            model = cls.from_pretrained(d, dtype=dtype, attn_implementation=tiny.attn_for(cls),
                                        experts_implementation="eager").eval()
            with torch.no_grad():
                values.append(tiny.model_output(model(**tiny.model_inputs(model, ids))).double())
        return rel(values[0], values[1]), output_tolerance(src, out, dtype).tolerance


def main(argv: list[str]) -> int:
    from tests.support import tiny

    variants = argv or tiny.variants()
    print("| variant | float32 error | bound | ratio | float64 error | bound | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for v in variants:
        cells = []
        for dtype in (torch.float32, torch.float64):
            try:
                err, bound = measure(v, dtype)
                cells += [f"{err:.2e}", f"{bound:.2e}", f"{err / bound:.3f}"]
            except Exception as exc:  # a measurement script: report and go on
                cells += [f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:60]}", "", ""]
        print(f"| {v} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
