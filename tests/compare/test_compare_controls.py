"""Negative controls and fine-tune pairs (issue 36; the measured version with 20 models and 190 pairs is
``python -m bench.disguise --part controls``): small Llamas of one config, independently initialised and
trained on the same synthetic corpus, are ``unrelated`` pairwise at the default alpha; a short fine-tune
of each is ``same-lineage``. Float64 throughout."""

from __future__ import annotations

import copy

import pytest
import torch

from idinspect.compare import ALPHA, compare_invariants, invariants_of
from tests.support.compare_models import one_thread, small_llama, train

PAIRS = 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("controls")
    out = {"base": [], "ft": []}
    with one_thread():
        for s in range(2 * PAIRS):
            m = train(small_llama(s, dtype=torch.float64), 100, 3e-3, seed=100 + s, corpus_seed=0)
            m.save_pretrained(root / f"seed{s}")
            out["base"].append(invariants_of(str(root / f"seed{s}")))
            if s < PAIRS:
                ft = train(copy.deepcopy(m), 100, 3e-4, seed=200 + s, corpus_seed=7)
                ft.save_pretrained(root / f"ft{s}")
                out["ft"].append(invariants_of(str(root / f"ft{s}")))
    return out


def test_independent_seed_pairs_are_unrelated(trained):
    base = trained["base"]
    for i in range(0, 2 * PAIRS, 2):
        r = compare_invariants(base[i], base[i + 1])
        assert r.verdict == "unrelated", (i, r.lineage)
        assert r.lineage.p_value >= ALPHA


def test_finetunes_are_same_lineage(trained):
    for s in range(PAIRS):
        r = compare_invariants(trained["base"][s], trained["ft"][s])
        assert r.verdict == "same-lineage", (s, r.lineage, r.same_function.get("worst"))
        assert r.lineage.p_value < ALPHA
