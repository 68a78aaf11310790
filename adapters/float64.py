"""Contexts in which transformers' norm modules compute float64 inputs in float64.

Several families' norms cast to float32 inside (``hidden_states.to(torch.float32)``, Gemma's
``x.float()``), so a float64 model is not float64 end to end: a 1e-7 error that looks like a broken
symmetry at a 1e-9 cut. Within :func:`exact_norms` the named classes compute a float64 input in
float64 by the same formula (any other dtype takes the original path). Nothing here is used outside
the proofs (``--prove``) and the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def centred(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x - x.mean(-1, keepdim=True)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@contextlib.contextmanager
def exact_norms(classes: dict[type, Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]]) -> Iterator[None]:
    """Within the context, ``cls.forward(x)`` of each class computes ``formula(module, x)`` for float64 ``x``."""
    originals = {cls: cls.forward for cls in classes}

    def patched(cls, formula):
        original = originals[cls]

        def forward(self, x, *args, **kwargs):
            if x.dtype != torch.float64:
                return original(self, x, *args, **kwargs)
            return formula(self, x)
        return forward

    for cls, formula in classes.items():
        cls.forward = patched(cls, formula)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.forward = original


def eps_of(module: torch.nn.Module) -> float:
    """The epsilon a transformers norm module stores (``variance_epsilon`` or ``eps``)."""
    return float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))


def weighted_rms(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Llama-style RMSNorm: weight * x / rms(x)."""
    return module.weight * rms(x, eps_of(module))


def top_k_router(module: torch.nn.Module, x: torch.Tensor):
    """Mixtral's router (``MixtralTopKRouter``) in float64: logits x W_r^T, softmax over the experts, the
    top k renormalised to sum 1 (transformers takes the softmax of ``logits.float()``: float32 in a
    float64 model, which makes the router's shift direction look identified at 1e-8)."""
    h = x.reshape(-1, module.hidden_dim)
    logits = torch.nn.functional.linear(h, module.weight)
    top, index = torch.topk(torch.softmax(logits, dim=-1), module.top_k, dim=-1)
    return logits, top / top.sum(dim=-1, keepdim=True), index


def exact_routers(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """A context in which every Mixtral router of ``model`` computes float64 inputs in float64."""
    return exact_norms({type(m): top_k_router for m in model.modules() if type(m).__name__ == "MixtralTopKRouter"})


@contextlib.contextmanager
def float_cast_kept(module_class: type) -> Iterator[None]:
    """Within calls of ``module_class.forward``, ``Tensor.float()`` leaves a float64 tensor float64 (MPT's
    attention casts its scores with ``.float()`` before the softmax: float32 rounding in a float64 model)."""
    original_forward, original_float = module_class.forward, torch.Tensor.float

    def kept(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else original_float(self, *args, **kwargs)

    def forward(self, *args, **kwargs):
        torch.Tensor.float = kept
        try:
            return original_forward(self, *args, **kwargs)
        finally:
            torch.Tensor.float = original_float

    module_class.forward = forward
    try:
        yield
    finally:
        module_class.forward = original_forward


_NARROW = (torch.float32, torch.float16, torch.bfloat16)


@contextlib.contextmanager
def float64_casts_kept() -> Iterator[None]:
    """Within the context a float64 tensor ignores casts to a narrower float (``x.to(torch.float32)``,
    ``x.float()``): any module's own formula then runs in float64 unchanged. For adapters inferred by
    ``--auto`` (:mod:`adapters.inferred`), whose modules' float32 islands are not known in advance."""
    original_to, original_float = torch.Tensor.to, torch.Tensor.float

    def to(self, *args, **kwargs):
        if self.dtype == torch.float64 and (kwargs.get("dtype") in _NARROW or any(isinstance(a, torch.dtype) and a in _NARROW for a in args)):
            rest = [a for a in args if a not in _NARROW and not isinstance(a, torch.dtype)]
            kwargs.pop("dtype", None)
            return original_to(self, *rest, **kwargs) if rest or kwargs else self
        return original_to(self, *args, **kwargs)

    def to_float(self, *args, **kwargs):
        return self if self.dtype == torch.float64 else original_float(self, *args, **kwargs)

    torch.Tensor.to, torch.Tensor.float = to, to_float
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.float = original_to, original_float


@contextlib.contextmanager
def casts_kept_in(classes: tuple[type, ...]) -> Iterator[None]:
    """Within the context the forward of each class in ``classes`` (norm modules) runs under
    :func:`float64_casts_kept`; everything else (a rotary embedding's float32 angles) is untouched."""
    originals = {cls: cls.forward for cls in classes}

    def patched(original):
        def forward(self, *args, **kwargs):
            with float64_casts_kept():
                return original(self, *args, **kwargs)
        return forward

    for cls, original in originals.items():
        cls.forward = patched(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.forward = original
