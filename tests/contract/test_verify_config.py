"""The per-variant contract of tests/verify/test_verify_config.py: each test here runs for every
registered family variant (tests/families/); the rest of that subject stays in tests/verify/."""

from __future__ import annotations

import pytest
import torch

from tests.support import tiny


@pytest.mark.parametrize("variant", ["llama-gqa", "gpt2", "gemma3-text", "falcon-mqa", "gpt-oss", "bloom"])
def test_cached_greedy_decoding_equals_recomputing_the_sequence(variant):
    """verify's decode check runs a decoder-only model through its key/value cache (one token per
    step): the tokens equal recomputing the whole sequence every step, in float64."""
    from idinspect.equivalence import functional as fn

    model = tiny.build(variant).to(torch.float64).eval()
    ids = fn.probe_ids(model.config, 12, 6, 0)
    with torch.no_grad():
        cached = fn._greedy(model, ids, 6)
        seq = ids
        for _ in range(6):
            logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=False).logits
            seq = torch.cat([seq, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    assert torch.equal(cached, seq[:, ids.shape[1]:])
