"""``python -m bench.family_errors [VARIANT ...]``: per tiny family variant, the largest errors that
the generic tests bound, as one table (for notes and docs; the tests are the proof).

Columns: attention blocks; the largest relative error of the float64 reference attention over the
canonical form against the HF module (test bound 1e-10); the relative error of the logits of a
float64 gauge-fixed export read back by stock transformers (test bound: idinspect.equivalence.bounds, see
bench/export_bounds.py);
the Jacobian nullity and idinspect's count summed over blocks (must be equal).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch


def measure(variant: str) -> dict:
    import idinspect
    from idinspect.forms.per_head.reference import reference_attention
    from tests.contract.test_export import outputs
    from tests.support import tiny
    from tests.support.jacobian import attention_nullity

    hf = tiny.build(variant)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        tiny.save(hf, src)
        model = idinspect.load(src)
        ids = torch.randint(0, tiny.vocab(hf), (2, 9), generator=torch.Generator().manual_seed(1))
        worst = 0.0
        for i, (x, y, *kv) in enumerate(tiny.capture_attention(hf, ids)):
            layer = model.layer(i)
            extra = {"x_kv": kv[0]} if kv and kv[0] is not None else {}
            ref = reference_attention(layer, x, **extra)
            worst = max(worst, float((ref - y).norm() / y.norm()))
        idinspect.export(src, out)
        a, b = outputs(src, ids), outputs(out, ids)
        export_err = float((a - b).abs().max() / a.abs().max())
        report = idinspect.inspect(src, spectra=False)
        exact = model.adapter.exact_float64
        null = sum(attention_nullity(hf, *tiny.attention_modules(hf, i), seed=i, exact=exact).nullity
                   for i in range(model.num_layers))
        counted = report["totals"]["unidentified_parameters"]
    return {"variant": variant, "family": model.adapter.family, "blocks": model.num_layers,
            "reference_rel_err": worst, "export_rel_err": export_err, "jacobian_nullity": null, "counted": counted}


def main(argv: list[str]) -> int:
    from tests.support import tiny

    variants = argv or tiny.variants()
    print("| variant | family | blocks | reference rel. err | export logits rel. err | Jacobian nullity | counted |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for v in variants:
        try:
            r = measure(v)
        except Exception as exc:  # a measurement script: report and go on
            print(f"| {v} | error: {type(exc).__name__}: {str(exc).splitlines()[0][:80]} | | | | | |")
            continue
        print(f"| {r['variant']} | {r['family']} | {r['blocks']} | {r['reference_rel_err']:.1e} | "
              f"{r['export_rel_err']:.1e} | {r['jacobian_nullity']} | {r['counted']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
