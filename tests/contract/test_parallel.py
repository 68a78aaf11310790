"""The per-variant contract of tests/forms/test_parallel.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/forms/."""

from __future__ import annotations

import pytest
import torch

import idinspect
from idinspect.analysis import analyze
from idinspect.forms.per_head.analysis import for_analysis
from idinspect.forms.per_head.spectra import head_spectra
from idinspect.layer.buffers import Float64Buffers
from tests.support import tiny


@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "bert", "qwen2"])
def test_parallel_analysis_equals_serial(variant, tiny_dir):
    with idinspect.load(tiny_dir(variant)) as model:
        calls: list[int] = []
        serial = analyze(model, workers=1)
        parallel = analyze(model, workers=3, on_layer=lambda i, n: calls.append(i))
    assert parallel == serial
    assert calls == list(range(len(serial["layers"])))


@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2"])
def test_spectra_from_stored_dtype_equal_spectra_from_float64(variant, tiny_dir, tmp_path):
    """The analyzer keeps weights in the stored dtype (cast inside the Gram step): same spectra and
    masks as from a layer cast to float64 up front, in bf16 and float32 checkpoints alike."""
    with idinspect.load(tiny_dir(variant)) as model:
        layer = model.layer(0)
    for dtype in (torch.bfloat16, torch.float32):
        stored = layer.replace(**{r: t.to(dtype) for r, t in layer.tensors().items()})
        lean = for_analysis(stored, torch.device("cpu"))
        assert lean.W_Q.dtype == dtype and all(lean.tensors()[r].dtype == torch.float64
                                               for r in ("b_Q", "b_K", "b_V", "b_O") if r in lean.tensors())
        a = head_spectra(lean, Float64Buffers())
        b = head_spectra(tiny.float64_layer(stored))
        # bf16 Gram matrices accumulate in float32 (analysis/precision.py): within the data's precision
        rtol = 1e-12 if dtype == torch.float32 else torch.finfo(dtype).eps / 2
        for name in ("qk", "ov"):
            x, y = getattr(a, name), getattr(b, name)
            assert ((x - y).abs() <= rtol * y.abs().amax(dim=1, keepdim=True)).all()
        assert {k: v.tolist() for k, v in a.finite.items()} == {k: v.tolist() for k, v in b.finite.items()}
