"""The whole-model oracle: singular values of d(outputs)/d(all parameters) of a real HF model.

Written independently of idinspect: the model's own forward (transformers' classes), every
parameter at once (a tied embedding is one parameter), float64 throughout (norms that cast to
float32 inside are patched to float64 by :func:`exact_rms_norms`, and a softmax asked for float32
by :func:`tests.support.jacobian.exact_softmax` (GPTBigCode), else a residual rotation shows as
a 1e-6 change and its directions as 1e-9 singular values). Outputs are the logits, or their
log-softmax, at every position of random token sequences (all positions of a learned table).
"""

from __future__ import annotations

import contextlib
import importlib
import math

import torch
from torch.func import functional_call, jacrev

from tests.support.jacobian import exact_softmax, single_thread

#: Sequences per Jacobian call of :func:`whole_model_singular_values` (the rows are the same in any grouping).
SEQUENCES_PER_CALL = 2
#: s / s_max below this is null. Measured on the twins of tests/forms/test_whole_model_jacobian.py: null
#: <= 5e-16, kept >= 6e-10.
NULL_RTOL = 1e-13


def exact_rms_norms(model) -> contextlib.AbstractContextManager:
    """A context in which every RMSNorm class of ``model`` computes weight * x / rms(x) in float64."""
    from idinspect.adapters.float64 import exact_norms, weighted_rms

    classes = {type(m): weighted_rms for m in model.modules() if type(m).__name__.endswith("RMSNorm")}
    return exact_norms(classes)


@contextlib.contextmanager
def exact_routers(model):
    """Mixtral's router in float64: transformers takes the softmax of ``router_logits.float()`` (float32 in
    a float64 model), and the router's shift direction then shows as a 4e-8 singular value."""
    classes = {type(m) for m in model.modules() if type(m).__name__ == "MixtralTopKRouter"}
    originals = {cls: cls.forward for cls in classes}

    def forward(self, hidden_states):
        h = hidden_states.reshape(-1, self.hidden_dim)
        logits = torch.nn.functional.linear(h, self.weight)
        top, index = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
        return logits, top / top.sum(dim=-1, keepdim=True), index

    for cls in classes:
        cls.forward = forward
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.forward = original


def true_embedding_gradients(model) -> None:
    """Clear every embedding's ``padding_idx``: it changes no output, but autograd then returns a zero
    gradient for the padding row, a fake null direction (Phi-3 with pad_token_id in the vocabulary
    measured 105 against the true 104)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding):
            m.padding_idx = None


def sample_ids(model, tokens: int, *, seed: int = 0, oversample: float = 2.5) -> torch.Tensor:
    """Random token sequences [n, tokens], enough for about ``oversample`` P Jacobian rows."""
    P = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (math.ceil(oversample * P / (tokens * vocab)), tokens), generator=gen)


def whole_model_singular_values(model, *, tokens: int, seed: int = 0,
                                oversample: float = 2.5) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(singular values s / s_max of the logits' Jacobian, of the log-softmax's, each descending and padded
    with zeros to P; parameter count P) over enough random sequences of ``tokens`` tokens for about
    ``oversample`` P rows. The log-softmax Jacobian is the logits' one with each position's
    probability-weighted row subtracted (d log p_v = d z_v - sum_w p_w d z_w)."""
    true_embedding_gradients(model)
    names, values = zip(*[(k, v.detach()) for k, v in model.named_parameters()])
    sizes = [v.numel() for v in values]
    P = sum(sizes)
    ids = sample_ids(model, tokens, seed=seed, oversample=oversample)

    def outputs(theta: torch.Tensor, ids: torch.Tensor = ids) -> torch.Tensor:
        params = {n: t.view_as(v) for n, t, v in zip(names, theta.split(sizes), values)}
        return functional_call(model, params, (ids,), {"use_cache": False}).logits.reshape(-1)

    theta = torch.cat([v.reshape(-1) for v in values])
    with single_thread(), exact_rms_norms(model), exact_softmax(), exact_routers(model):   # float32 casts kept float64
        # a few sequences at a time: a row's backward pass runs over every sequence of its call, though the
        # row depends on one (GPT-2 ReLU's 86 sequences: 23 s of Jacobian in one call)
        J = torch.cat([jacrev(lambda t, part=part: outputs(t, part), chunk_size=512)(theta)
                       for part in ids.split(SEQUENCES_PER_CALL)])
        V = model.config.vocab_size
        p = torch.softmax(outputs(theta).reshape(-1, V), -1)
        J = J.reshape(-1, V, P)
        J_lp = J - torch.einsum("nv,nvp->np", p, J).unsqueeze(1)
        out = []
        for M in (J, J_lp):
            s = torch.linalg.svdvals(M.reshape(-1, P))
            rel = s / s[0]
            out.append(torch.cat([rel, rel.new_zeros(max(0, P - rel.numel()))]))
    return out[0], out[1], P


def randomised(cls, config, seed: int = 0):
    """``cls(config)`` in float64, eval mode, eager attention, every matrix N(0, 0.5^2), every 1-D
    gain uniform in [0.5, 1.5] (non-unit, no zeros), every bias N(0, 0.5^2) (so that ReLU units switch)."""
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float64).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and not name.endswith("bias"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.5)
    return model


def model_class(name: str):
    return getattr(importlib.import_module("transformers"), name)
